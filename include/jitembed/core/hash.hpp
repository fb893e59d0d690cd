// Content hashing with XXH3-128 (libxxhash): one-shot and streaming.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "jitembed/core/buffer.hpp"

namespace jitembed {

struct hash128 {
  std::uint64_t low = 0;
  std::uint64_t high = 0;

  friend constexpr bool operator==(const hash128&, const hash128&) noexcept = default;

  // 32 lowercase hex digits, high word first (XXH3's canonical order).
  std::string to_hex() const {
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(high),
                  static_cast<unsigned long long>(low));
    return std::string(buf, 32);
  }
};

}  // namespace jitembed

// Hash tables keyed by a content hash: the low word mixed with the high one (both already uniform).
template <>
struct std::hash<jitembed::hash128> {
  std::size_t operator()(const jitembed::hash128& h) const noexcept {
    return static_cast<std::size_t>(h.low ^ (h.high * 0x9E3779B97F4A7C15ull));
  }
};

namespace jitembed {

inline hash128 xxh3_128(bytes_view data, std::uint64_t seed = 0) noexcept {
  const XXH128_hash_t h = XXH3_128bits_withSeed(data.data(), data.size(), seed);
  return {h.low64, h.high64};
}

inline std::uint64_t xxh3_64(bytes_view data, std::uint64_t seed = 0) noexcept {
  return XXH3_64bits_withSeed(data.data(), data.size(), seed);
}

// Streaming XXH3-128 over scattered pieces (the format writer hashes payloads without joining them).
class hasher128 {
 public:
  explicit hasher128(std::uint64_t seed = 0) : state_(XXH3_createState(), &XXH3_freeState) {
    if (!state_) throw std::bad_alloc();
    XXH3_128bits_reset_withSeed(state_.get(), seed);
  }
  hasher128& update(bytes_view data) noexcept {
    XXH3_128bits_update(state_.get(), data.data(), data.size());
    return *this;
  }
  hash128 digest() const noexcept {
    const XXH128_hash_t h = XXH3_128bits_digest(state_.get());
    return {h.low64, h.high64};
  }

 private:
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state_;
};

}  // namespace jitembed
