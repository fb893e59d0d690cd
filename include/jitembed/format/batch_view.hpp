// batch_view: parses a batch (offset table + 64-byte aligned records) into record_views sharing one
// keep_alive; every record is checked as record_view::parse checks it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/format/detail/wire.hpp"
#include "jitembed/format/record_view.hpp"

namespace jitembed::format {

class batch_view {
 public:
  batch_view() = default;

  // The batch as a whole is bounded by limits.max_record_bytes; each record by the same limits.
  static result<batch_view> parse(bytes_view batch, const decode_limits& limits = {},
                                  jitembed::keep_alive keep_alive = {}) {
    using detail::load_le;
    const std::byte* b = batch.data();
    const std::size_t size = batch.size();
    if (size < detail::kBatchHeaderSize)
      return fail(errc::truncated, "batch: " + std::to_string(size) + " bytes < the 64-byte header");
    if (load_le<std::uint32_t>(b) != detail::kBatchMagic) return fail(errc::bad_magic, "batch: magic at offset 0 is not 'JEMB'");
    const auto major = load_le<std::uint16_t>(b + detail::kHMajor);
    const auto minor = load_le<std::uint16_t>(b + detail::kHMinor);
    if (major != kMajorVersion)
      return fail(errc::unsupported_version, "batch: major version " + std::to_string(major) + " (this reader reads 1.x)");
    const bool newer = minor > kMinorVersion;
    const std::size_t header_size = load_le<std::uint16_t>(b + detail::kHHeaderSize);
    const std::size_t entry_size = load_le<std::uint16_t>(b + detail::kHEntrySize);
    if (newer ? (header_size < detail::kBatchHeaderSize || header_size % 8) : header_size != detail::kBatchHeaderSize)
      return fail(errc::corrupt_data, "batch: header_size " + std::to_string(header_size) + " at offset 8");
    if (newer ? (entry_size < detail::kBatchEntrySize || entry_size % 8) : entry_size != detail::kBatchEntrySize)
      return fail(errc::corrupt_data, "batch: entry_size " + std::to_string(entry_size) + " at offset 10");
    const auto flags = load_le<std::uint32_t>(b + detail::kBFlags);
    if ((flags >> 16) != 0)
      return fail(errc::unsupported_version, "batch: required flags at offset 24 are unknown to this reader");
    const auto batch_size = load_le<std::uint64_t>(b + detail::kBBatchSize);
    if (batch_size > limits.max_record_bytes)
      return fail(errc::limit_exceeded, "batch: batch_size " + std::to_string(batch_size) + " > max_record_bytes " +
                                            std::to_string(limits.max_record_bytes));
    if (batch_size > size)
      return fail(errc::truncated, "batch: batch_size " + std::to_string(batch_size) + " but only " + std::to_string(size) + " bytes given");
    if (batch_size < size)
      return fail(errc::corrupt_data, "batch: batch_size " + std::to_string(batch_size) + " but " + std::to_string(size) +
                                          " bytes given (trailing bytes)");
    const std::uint64_t count = load_le<std::uint32_t>(b + detail::kBCount);
    const std::uint64_t meta = header_size + count * entry_size;
    if (meta > size)
      return fail(errc::corrupt_data, "batch: offset table of " + std::to_string(count) + " records ends at " +
                                          std::to_string(meta) + " > batch_size " + std::to_string(size));
    if (!detail::checksum_matches(b, static_cast<std::size_t>(meta)))
      return fail(errc::checksum_mismatch, "batch: header checksum at offset 48 does not match bytes [0, " + std::to_string(meta) + ")");
    if (!newer && (flags & 0xffffu) != 0)
      return fail(errc::corrupt_data, "batch: optional flags 0x" + detail::hex(flags & 0xffffu) + " at offset 24 (1.0 defines none)");
    if (!newer && !detail::all_zero(b + detail::kBReserved, detail::kBReservedSize))
      return fail(errc::corrupt_data, "batch: reserved header bytes [28, 48) are not zero");
    for (std::uint64_t k = meta; k < align_up(static_cast<std::size_t>(meta)); ++k)
      if (k >= size || b[k] != std::byte{0}) return fail(errc::corrupt_data, "batch: padding byte at offset " + std::to_string(k) + " is not zero");
    batch_view v;
    v.bytes_ = batch;
    v.records_.reserve(static_cast<std::size_t>(count));  // count * entry_size <= size: bounded by the input
    std::uint64_t next = align_up(static_cast<std::size_t>(meta));
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::byte* e = b + header_size + i * entry_size;
      const auto off = load_le<std::uint64_t>(e);
      const auto len = load_le<std::uint64_t>(e + 8);
      auto where = [&] {
        return "batch: record " + std::to_string(i) + " (entry at offset " + std::to_string(header_size + i * entry_size) + "): ";
      };
      if (off != next)
        return fail(errc::corrupt_data, where() + "offset " + std::to_string(off) + ", expected " + std::to_string(next) +
                                            (off % kPayloadAlignment ? " (misaligned)" : off < next ? " (overlap)" : " (gap)"));
      if (len > size - off)
        return fail(errc::corrupt_data, where() + "[" + std::to_string(off) + ", +" + std::to_string(len) + ") runs past batch_size " +
                                            std::to_string(size));
      auto r = record_view::parse(batch.subspan(static_cast<std::size_t>(off), static_cast<std::size_t>(len)), limits, keep_alive);
      if (!r) return fail(r.code(), where() + r.error().message);
      v.records_.push_back(std::move(*r));
      next = off + len;
    }
    if (next != size)
      return fail(errc::corrupt_data, "batch: records end at " + std::to_string(next) + " but batch_size is " + std::to_string(size));
    return v;
  }

  std::size_t size() const noexcept { return records_.size(); }
  bool empty() const noexcept { return records_.empty(); }
  const record_view& record(std::size_t i) const { return records_[i]; }
  const record_view& operator[](std::size_t i) const { return records_[i]; }
  std::span<const record_view> records() const noexcept { return records_; }
  auto begin() const noexcept { return records_.begin(); }
  auto end() const noexcept { return records_.end(); }
  bytes_view bytes() const noexcept { return bytes_; }

 private:
  bytes_view bytes_;
  std::vector<record_view> records_;
};

}  // namespace jitembed::format
