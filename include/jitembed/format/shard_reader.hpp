// shard_reader: random access to the records of a shard file through one read-only mapping, shared (as
// keep_alive) with every record_view and zero-copy tensor it hands out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "jitembed/codec/text.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/format/detail/file.hpp"
#include "jitembed/format/detail/wire.hpp"
#include "jitembed/format/record_view.hpp"

namespace jitembed::format {

class shard_reader {
 public:
  shard_reader() = default;

  // Maps `path` and checks the file header, the trailer and the whole index: checksums, canonical spans,
  // UTF-8 keys, zero padding (O(records + key bytes), no allocation). Records are checked by record(i).
  static result<shard_reader> open(const std::string& path, const decode_limits& limits = {}) {
    auto m = detail::mapped_file::open(path);
    if (!m) return m.error();
    const bytes_view bytes = (*m)->bytes();
    auto r = parse(bytes, limits, jitembed::keep_alive(*m));
    if (!r) return fail(r.code(), r.error().message + " (file '" + path + "')");
    return r;
  }

  // Reads a shard held in memory; keep_alive (if any) is shared with what the reader hands out.
  static result<shard_reader> parse(bytes_view shard, const decode_limits& limits = {},
                                     jitembed::keep_alive keep_alive = {}) {
    using detail::load_le;
    const std::byte* b = shard.data();
    const std::size_t size = shard.size();
    constexpr std::size_t hs = detail::kShardHeaderSize, ts = detail::kShardTrailerSize;
    if (size < hs || load_le<std::uint32_t>(b) != detail::kShardMagic) {
      if (size < hs) return fail(errc::truncated, "shard: " + std::to_string(size) + " bytes < the 64-byte header");
      return fail(errc::bad_magic, "shard: magic at offset 0 is not 'JEMS'");
    }
    if (load_le<std::uint16_t>(b + 4) != kMajorVersion)
      return fail(errc::unsupported_version, "shard: major version " + std::to_string(load_le<std::uint16_t>(b + 4)));
    if (size < hs + ts || size % kPayloadAlignment != 0)
      return fail(errc::truncated, "shard: " + std::to_string(size) + " bytes: no trailer (file truncated or not closed)");
    const std::byte* t = b + size - ts;
    const std::string at = " (trailer at offset " + std::to_string(size - ts) + ")";
    if (std::memcmp(t, detail::kShardTrailerMagic, 8) != 0)
      return fail(errc::truncated, "shard: trailer magic missing" + at + ": file truncated or not closed");
    if (load_le<std::uint64_t>(t + detail::kTChecksum) != xxh3_64(bytes_view(t, detail::kTChecksum)))
      return fail(errc::checksum_mismatch, "shard: trailer checksum mismatch" + at);
    if (load_le<std::uint16_t>(t + detail::kTMajor) != kMajorVersion)
      return fail(errc::unsupported_version, "shard: trailer major version " + std::to_string(load_le<std::uint16_t>(t + detail::kTMajor)));
    // The file header is covered by no checksum: in 1.0 every byte of it is known and checked.
    const auto minor = load_le<std::uint16_t>(t + detail::kTMinor);
    if (load_le<std::uint16_t>(b + detail::kSMinor) != minor)
      return fail(errc::corrupt_data, "shard: file header minor " + std::to_string(load_le<std::uint16_t>(b + detail::kSMinor)) +
                                          " at offset 6 != trailer minor " + std::to_string(minor) + at);
    if (minor <= kMinorVersion) {
      if (!detail::all_zero(b + 8, hs - 8)) return fail(errc::corrupt_data, "shard: file header bytes [8, 64) are not zero");
      if (!detail::all_zero(t + detail::kTReserved0, 4) || !detail::all_zero(t + detail::kTReserved1, 8))
        return fail(errc::corrupt_data, "shard: reserved trailer bytes [12, 16) or [48, 56) are not zero" + at);
    }
    const auto index_offset = load_le<std::uint64_t>(t + detail::kTIndexOffset);
    const auto index_size = load_le<std::uint64_t>(t + detail::kTIndexSize);
    const auto count = load_le<std::uint64_t>(t + detail::kTCount);
    const std::uint64_t index_room = size - ts;
    if (index_offset < hs || index_offset % kPayloadAlignment != 0 || index_offset > index_room ||
        index_size > index_room - index_offset || align_up(static_cast<std::size_t>(index_offset + index_size)) != index_room)
      return fail(errc::corrupt_data, "shard: index [" + std::to_string(index_offset) + ", +" + std::to_string(index_size) +
                                          ") does not end at the trailer" + at);
    if (count > index_size / detail::kShardIndexEntrySize)
      return fail(errc::corrupt_data, "shard: " + std::to_string(count) + " records do not fit an index of " +
                                          std::to_string(index_size) + " bytes" + at);
    const std::byte* idx = b + index_offset;
    if (load_le<std::uint64_t>(t + detail::kTIndexChecksum) != xxh3_64(bytes_view(idx, static_cast<std::size_t>(index_size))))
      return fail(errc::checksum_mismatch, "shard: index checksum mismatch" + at);
    if (!detail::all_zero(idx + index_size, static_cast<std::size_t>(index_room - index_offset - index_size)))
      return fail(errc::corrupt_data, "shard: index padding [" + std::to_string(index_offset + index_size) + ", " +
                                          std::to_string(index_room) + ") is not zero");
    const std::uint64_t keys_size = index_size - count * detail::kShardIndexEntrySize;
    std::uint64_t next = hs, next_key = 0;
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::byte* e = idx + i * detail::kShardIndexEntrySize;
      const auto off = load_le<std::uint64_t>(e);
      const auto len = load_le<std::uint64_t>(e + 8);
      const auto koff = load_le<std::uint32_t>(e + 16);
      const auto klen = load_le<std::uint32_t>(e + 20);
      auto where = [&] {
        return "shard: record " + std::to_string(i) + " (index entry at offset " +
               std::to_string(index_offset + i * detail::kShardIndexEntrySize) + "): ";
      };
      if (off != next || len % kPayloadAlignment != 0 || len > index_offset - off)
        return fail(errc::corrupt_data, where() + "[" + std::to_string(off) + ", +" + std::to_string(len) +
                                            ") is not the next 64-byte aligned span before the index (expected offset " +
                                            std::to_string(next) + ")");
      if (len > limits.max_record_bytes)
        return fail(errc::limit_exceeded, where() + std::to_string(len) + " bytes > max_record_bytes " +
                                              std::to_string(limits.max_record_bytes));
      if (koff != next_key || klen > keys_size - koff)
        return fail(errc::corrupt_data, where() + "key [" + std::to_string(koff) + ", +" + std::to_string(klen) +
                                            ") is not the next span of the " + std::to_string(keys_size) + "-byte key area");
      if (auto ok = codec::validate_utf8(bytes_view(idx + count * detail::kShardIndexEntrySize + koff, klen)); !ok)
        return fail(errc::invalid_utf8, where() + "key: " + ok.error().message);
      next = off + len;
      next_key = koff + std::uint64_t{klen};
    }
    if (next != index_offset)
      return fail(errc::corrupt_data, "shard: records end at " + std::to_string(next) + ", index starts at " + std::to_string(index_offset));
    if (next_key != keys_size)
      return fail(errc::corrupt_data, "shard: keys end at " + std::to_string(next_key) + " of a " + std::to_string(keys_size) + "-byte key area");
    shard_reader r;
    r.bytes_ = shard;
    r.keep_alive_ = std::move(keep_alive);
    r.limits_ = limits;
    r.index_ = idx;
    r.keys_ = idx + count * detail::kShardIndexEntrySize;
    r.count_ = static_cast<std::size_t>(count);
    return r;
  }

  std::size_t size() const noexcept { return count_; }
  bytes_view bytes() const noexcept { return bytes_; }
  const jitembed::keep_alive& keep_alive() const noexcept { return keep_alive_; }

  // The encoded bytes of record i (unchecked beyond the index checks done at open).
  bytes_view record_bytes(std::size_t i) const noexcept {
    const std::byte* e = index_ + i * detail::kShardIndexEntrySize;
    return bytes_.subspan(static_cast<std::size_t>(detail::load_le<std::uint64_t>(e)),
                          static_cast<std::size_t>(detail::load_le<std::uint64_t>(e + 8)));
  }

  // Parses record i (random access); the record_view shares the mapping.
  result<record_view> record(std::size_t i) const {
    if (i >= count_)
      return fail(errc::not_found, "shard: record " + std::to_string(i) + " of " + std::to_string(count_));
    auto r = record_view::parse(record_bytes(i), limits_, keep_alive_);
    if (!r) return fail(r.code(), "shard: record " + std::to_string(i) + ": " + r.error().message);
    return r;
  }

  std::string_view key(std::size_t i) const noexcept {
    if (i >= count_) return {};
    const std::byte* e = index_ + i * detail::kShardIndexEntrySize;
    return {reinterpret_cast<const char*>(keys_) + detail::load_le<std::uint32_t>(e + 16), detail::load_le<std::uint32_t>(e + 20)};
  }

 private:
  bytes_view bytes_;
  jitembed::keep_alive keep_alive_;
  decode_limits limits_{};
  const std::byte* index_ = nullptr;
  const std::byte* keys_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace jitembed::format
