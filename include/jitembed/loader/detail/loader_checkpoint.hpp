// The bytes of a loader checkpoint: the plan's inputs, the position in the epoch and which of this
// rank's samples were delivered, under an XXH3-64 checksum. Little-endian, versioned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/byte_order.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"

namespace jitembed::loader::detail {

inline constexpr std::uint32_t kLoaderStateMagic = 0x4b434c4a;  // "JLCK"
inline constexpr std::uint32_t kLoaderStateVersion = 1;

struct loader_checkpoint {
  std::uint64_t n = 0, world = 1, rank = 0, batch = 1, seed = 0;
  bool shuffle = false;
  std::uint64_t epoch = 0;
  std::uint64_t steps_done = 0;         // steps returned in `epoch`
  std::vector<bool> delivered;          // per position of this rank's sequence (size == plan count)

  byte_buffer serialize() const {
    byte_buffer out;
    auto put = [&](std::uint64_t v, int bytes) {
      std::byte le[8];
      store_le(le, v);
      out.insert(out.end(), le, le + bytes);  // the low `bytes` bytes
    };
    put(kLoaderStateMagic, 4);
    put(kLoaderStateVersion, 4);
    for (std::uint64_t v : {n, world, rank, batch, seed}) put(v, 8);
    put(shuffle ? 1 : 0, 1);
    put(epoch, 8);
    put(steps_done, 8);
    put(delivered.size(), 8);
    for (std::size_t i = 0; i < delivered.size(); i += 8) {
      unsigned b = 0;
      for (std::size_t k = 0; k < 8 && i + k < delivered.size(); ++k) b |= (delivered[i + k] ? 1u : 0u) << k;
      out.push_back(static_cast<std::byte>(b));
    }
    put(xxh3_64(bytes_view(out.data(), out.size())), 8);
    return out;
  }

  static result<loader_checkpoint> parse(bytes_view b) {
    auto bad = [](errc c, const std::string& m) { return fail(c, "loader state: " + m); };
    constexpr std::size_t kFixed = 4 + 4 + 5 * 8 + 1 + 8 + 8 + 8;
    if (b.size() < kFixed + 8) return bad(errc::truncated, std::to_string(b.size()) + " bytes < " + std::to_string(kFixed + 8));
    std::size_t pos = 0;
    auto get = [&](int bytes) {
      std::byte le[8] = {};
      std::memcpy(le, b.data() + pos, static_cast<std::size_t>(bytes));
      pos += static_cast<std::size_t>(bytes);
      return load_le<std::uint64_t>(le);
    };
    if (get(4) != kLoaderStateMagic) return bad(errc::bad_magic, "not a jit_loader state");
    if (const auto v = get(4); v != kLoaderStateVersion) return bad(errc::unsupported_version, "version " + std::to_string(v));
    loader_checkpoint c;
    for (std::uint64_t* v : {&c.n, &c.world, &c.rank, &c.batch, &c.seed}) *v = get(8);
    c.shuffle = get(1) != 0;
    c.epoch = get(8);
    c.steps_done = get(8);
    const std::uint64_t count = get(8);
    const std::uint64_t bitmap = (count + 7) / 8;
    if (count > b.size() * 8 || b.size() - kFixed - 8 != bitmap)
      return bad(errc::corrupt_data, "bitmap of " + std::to_string(count) + " positions does not match " + std::to_string(b.size()) + " bytes");
    const std::uint64_t sum = load_le<std::uint64_t>(b.data() + b.size() - 8);
    if (sum != xxh3_64(bytes_view(b.data(), b.size() - 8))) return bad(errc::checksum_mismatch, "checksum does not match");
    c.delivered.resize(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < c.delivered.size(); ++i)
      c.delivered[i] = ((static_cast<unsigned>(b[pos + i / 8]) >> (i % 8)) & 1u) != 0;
    if (c.world == 0 || c.rank >= c.world || c.batch == 0) return bad(errc::corrupt_data, "rank / world / batch out of range");
    return c;
  }
};

}  // namespace jitembed::loader::detail
