// Byte-level constants of the record, batch and shard layouts (docs/format.md) and little-endian access.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/byte_order.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"

namespace jitembed::format {

// The format version this library writes; it reads every 1.x (newer minors with forward-compatible rules).
inline constexpr std::uint16_t kMajorVersion = 1;
inline constexpr std::uint16_t kMinorVersion = 0;

// Payloads, records and shard entries start at multiples of this (relative to the record / file start).
inline constexpr std::size_t kPayloadAlignment = 64;

namespace detail {

using jitembed::load_le;  // core/byte_order.hpp
using jitembed::store_le;

constexpr std::uint32_t magic4(char a, char b, char c, char d) noexcept {
  return static_cast<std::uint32_t>(static_cast<unsigned char>(a)) |
         static_cast<std::uint32_t>(static_cast<unsigned char>(b)) << 8 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(c)) << 16 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(d)) << 24;
}

// ---- record -------------------------------------------------------------------------------------
inline constexpr std::uint32_t kRecordMagic = magic4('J', 'E', 'M', 'R');
inline constexpr std::size_t kRecordHeaderSize = 64;  // v1.0; a newer minor may store more
inline constexpr std::size_t kEntrySize = 48;         // v1.0 field-table entry; a newer minor may store more

// Record header offsets.
inline constexpr std::size_t kHMagic = 0;         // u32 "JEMR"
inline constexpr std::size_t kHMajor = 4;         // u16
inline constexpr std::size_t kHMinor = 6;         // u16
inline constexpr std::size_t kHHeaderSize = 8;    // u16
inline constexpr std::size_t kHEntrySize = 10;    // u16
inline constexpr std::size_t kHFieldCount = 12;   // u32
inline constexpr std::size_t kHFlags = 16;        // u32 (bits 16..31 "required": unknown ones are rejected)
inline constexpr std::size_t kHMetaSize = 20;     // u32 header + table + heap bytes
inline constexpr std::size_t kHRecordSize = 24;   // u64
inline constexpr std::size_t kHReserved = 32;     // 16 bytes, zero in 1.0
inline constexpr std::size_t kHReservedSize = 16;
inline constexpr std::size_t kHChecksum = 48;     // 16 bytes: XXH3-128 (low u64, high u64)

// Field-table entry offsets.
inline constexpr std::size_t kEPayloadOffset = 0;  // u64
inline constexpr std::size_t kEPayloadSize = 8;    // u64
inline constexpr std::size_t kEDecodedSize = 16;   // u64
inline constexpr std::size_t kEChecksum = 24;      // u64 XXH3-64 of the stored payload
inline constexpr std::size_t kEExtraOffset = 32;   // u32 where rank*i64 dims, then the name, are
inline constexpr std::size_t kENameSize = 36;      // u16
inline constexpr std::size_t kEKind = 38;          // u8
inline constexpr std::size_t kECodec = 39;         // u8
inline constexpr std::size_t kEDtype = 40;         // u8
inline constexpr std::size_t kERank = 41;          // u8
inline constexpr std::size_t kEShuffle = 42;       // u8
inline constexpr std::size_t kEFlags = 43;         // u8
inline constexpr std::size_t kEReserved = 44;      // 4 bytes, zero in 1.0
inline constexpr std::size_t kEReservedSize = 4;

// ---- batch --------------------------------------------------------------------------------------
inline constexpr std::uint32_t kBatchMagic = magic4('J', 'E', 'M', 'B');
inline constexpr std::size_t kBatchHeaderSize = 64;
inline constexpr std::size_t kBatchEntrySize = 16;  // offset u64, size u64
inline constexpr std::size_t kBCount = 12;          // u32
inline constexpr std::size_t kBBatchSize = 16;      // u64
inline constexpr std::size_t kBFlags = 24;          // u32
inline constexpr std::size_t kBReserved = 28;       // 20 bytes, zero in 1.0
inline constexpr std::size_t kBReservedSize = 20;

// ---- shard --------------------------------------------------------------------------------------
inline constexpr std::uint32_t kShardMagic = magic4('J', 'E', 'M', 'S');
inline constexpr std::size_t kShardHeaderSize = 64;
inline constexpr std::size_t kShardTrailerSize = 64;
inline constexpr std::size_t kShardIndexEntrySize = 24;  // offset u64, size u64, key offset u32, key size u32
inline constexpr char kShardTrailerMagic[9] = "JEMSHIDX";
inline constexpr std::size_t kSMinor = 6;            // u16 in the file header; bytes 8..63 are zero in 1.0
inline constexpr std::size_t kTMajor = 8;            // u16
inline constexpr std::size_t kTMinor = 10;           // u16
inline constexpr std::size_t kTReserved0 = 12;       // 4 bytes, zero in 1.0
inline constexpr std::size_t kTIndexOffset = 16;     // u64
inline constexpr std::size_t kTIndexSize = 24;       // u64
inline constexpr std::size_t kTCount = 32;           // u64
inline constexpr std::size_t kTIndexChecksum = 40;   // u64 XXH3-64 of the index
inline constexpr std::size_t kTReserved1 = 48;       // 8 bytes, zero in 1.0
inline constexpr std::size_t kTChecksum = 56;        // u64 XXH3-64 of trailer bytes [0, 56)

// The checksum stored at byte 48 of record and batch headers: XXH3-128 of bytes [64, meta_end) seeded
// with the XXH3-64 of bytes [0, 48). It covers everything but the payloads and the checksum itself.
inline hash128 meta_checksum(const std::byte* base, std::size_t meta_end) noexcept {
  const std::uint64_t seed = xxh3_64(bytes_view(base, 48));
  return xxh3_128(bytes_view(base + 64, meta_end - 64), seed);
}

inline void store_checksum(std::byte* base, std::size_t meta_end) noexcept {
  const hash128 h = meta_checksum(base, meta_end);
  store_le<std::uint64_t>(base + 48, h.low);
  store_le<std::uint64_t>(base + 56, h.high);
}

inline bool checksum_matches(const std::byte* base, std::size_t meta_end) noexcept {
  const hash128 h = meta_checksum(base, meta_end);
  return load_le<std::uint64_t>(base + 48) == h.low && load_le<std::uint64_t>(base + 56) == h.high;
}

inline bool all_zero(const std::byte* p, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != std::byte{0}) return false;
  return true;
}

inline const std::byte* zero_padding() noexcept {
  alignas(64) static const std::byte zeros[kPayloadAlignment] = {};
  return zeros;
}

inline std::string u64s(std::uint64_t v) { return std::to_string(v); }

inline std::string hex(std::uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  do {
    s.insert(s.begin(), digits[v & 0xf]);
    v >>= 4;
  } while (v);
  return s;
}

// zstd reports "more bytes than the output holds" as buffer_too_small (a caller's buffer); when the size
// is the stored decoded_size, the stored data is what is wrong.
constexpr errc stored_size_code(errc e) noexcept { return e == errc::buffer_too_small ? errc::corrupt_data : e; }

}  // namespace detail
}  // namespace jitembed::format
