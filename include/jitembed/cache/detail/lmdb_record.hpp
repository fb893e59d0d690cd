// On-disk layout of one LMDB cache record (a 48-byte header, then the value bytes), its integrity check,
// and the approximate space it takes in the LMDB file (what the size cap counts).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/byte_order.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"

namespace jitembed::cache::detail {

// Record header, little-endian:
//   0 u32 magic "JECV"   4 u16 version   6 u16 header bytes (48)   8 u64 value length
//  16 u64 XXH3-64 of the value, seeded with XXH3-64 of the 16 key bytes   24..47 zero
// 48 bytes because LMDB puts a large value at page start + 16 (its page header): 16 + 48 = 64 keeps the
// value of every overflow-page record 64-byte aligned in the map.
inline constexpr std::uint32_t kLmdbRecordMagic = 0x5643454Au;  // "JECV"
inline constexpr std::uint16_t kLmdbRecordVersion = 1;
inline constexpr std::size_t kLmdbHeaderBytes = 48;
inline constexpr std::size_t kLmdbKeyBytes = 16;
inline constexpr std::uint64_t kLmdbMaxValueBytes = 0xFFFFFFFFull - kLmdbHeaderBytes;  // LMDB's data size is 32-bit

using lmdb_key_bytes = std::array<std::byte, kLmdbKeyBytes>;

// The key as cache_key::to_hex() prints it (high word first).
inline std::string lmdb_key_hex(const lmdb_key_bytes& key) {
  return hash128{load_le<std::uint64_t>(key.data()), load_le<std::uint64_t>(key.data() + 8)}.to_hex();
}

inline std::uint64_t lmdb_value_checksum(const lmdb_key_bytes& key, bytes_view value) noexcept {
  return xxh3_64(value, xxh3_64(bytes_view(key.data(), key.size())));
}

// Writes header + value into dst (kLmdbHeaderBytes + value.size() bytes).
inline void write_lmdb_record(std::byte* dst, const lmdb_key_bytes& key, bytes_view value) noexcept {
  std::memset(dst, 0, kLmdbHeaderBytes);
  store_le<std::uint32_t>(dst, kLmdbRecordMagic);
  store_le<std::uint16_t>(dst + 4, kLmdbRecordVersion);
  store_le<std::uint16_t>(dst + 6, kLmdbHeaderBytes);
  store_le<std::uint64_t>(dst + 8, value.size());
  store_le<std::uint64_t>(dst + 16, lmdb_value_checksum(key, value));
  if (!value.empty()) std::memcpy(dst + kLmdbHeaderBytes, value.data(), value.size());
}

// Checks a stored record and returns its value bytes (a view into `record`). With check_sum false only the
// header and the length are checked (contains()); get() always checks the checksum too.
inline result<bytes_view> verify_lmdb_record(bytes_view record, const lmdb_key_bytes& key, bool check_sum = true) {
  auto where = [&] { return " (key " + lmdb_key_hex(key) + ")"; };
  if (record.size() < kLmdbHeaderBytes)
    return fail(errc::truncated, "lmdb: record of " + std::to_string(record.size()) + " bytes < header " +
                                     std::to_string(kLmdbHeaderBytes) + where());
  const std::byte* h = record.data();
  if (load_le<std::uint32_t>(h) != kLmdbRecordMagic) return fail(errc::bad_magic, "lmdb: record magic at offset 0 is wrong" + where());
  if (load_le<std::uint16_t>(h + 4) != kLmdbRecordVersion)
    return fail(errc::unsupported_version, "lmdb: record version " + std::to_string(load_le<std::uint16_t>(h + 4)) + " at offset 4" + where());
  if (load_le<std::uint16_t>(h + 6) != kLmdbHeaderBytes)
    return fail(errc::corrupt_data, "lmdb: record header size " + std::to_string(load_le<std::uint16_t>(h + 6)) + " at offset 6" + where());
  const std::uint64_t len = load_le<std::uint64_t>(h + 8);
  if (len != record.size() - kLmdbHeaderBytes)
    return fail(errc::corrupt_data, "lmdb: record value length " + std::to_string(len) + " at offset 8 != stored " +
                                        std::to_string(record.size() - kLmdbHeaderBytes) + where());
  for (std::size_t i = 24; i < kLmdbHeaderBytes; ++i)
    if (h[i] != std::byte{0}) return fail(errc::corrupt_data, "lmdb: record reserved byte at offset " + std::to_string(i) + " is not zero" + where());
  const bytes_view value = record.subspan(kLmdbHeaderBytes);
  if (check_sum) {
    const std::uint64_t want = load_le<std::uint64_t>(h + 16);
    const std::uint64_t got = lmdb_value_checksum(key, value);
    if (got != want)
      return fail(errc::checksum_mismatch, "lmdb: value checksum " + std::to_string(got) + " != stored " + std::to_string(want) + where());
  }
  return value;
}

// Approximate bytes a record takes in the LMDB file: a value too large for a leaf node goes to its own
// overflow pages (whole pages, 16-byte page header), a small one sits in a leaf node (8-byte node header +
// key + 2-byte index); plus the access-order entries (meta + lru). This is what lmdb_options::max_bytes caps.
inline std::uint64_t lmdb_record_cost(std::uint64_t record_bytes, std::uint64_t page_bytes) noexcept {
  constexpr std::uint64_t node = 8, index = 2, page_header = 16;
  const std::uint64_t node_max = (((page_bytes - page_header) / 2) & ~std::uint64_t{1}) - index;
  const std::uint64_t index_entries = (node + kLmdbKeyBytes + 16 + index) + (node + 8 + kLmdbKeyBytes + index);
  std::uint64_t main;
  if (node + kLmdbKeyBytes + record_bytes > node_max)
    main = (record_bytes + page_header + page_bytes - 1) / page_bytes * page_bytes + node + kLmdbKeyBytes + 8 + index;
  else
    main = node + kLmdbKeyBytes + record_bytes + index;
  return main + index_entries;
}

}  // namespace jitembed::cache::detail
