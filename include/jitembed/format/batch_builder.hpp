// batch_builder: a batch of sample records (an offset table, then each record 64-byte aligned), built from
// record builders or already-encoded records without copying them until write().
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/format/detail/wire.hpp"
#include "jitembed/format/gather.hpp"
#include "jitembed/format/record_builder.hpp"

namespace jitembed::format {

class batch_builder {
 public:
  batch_builder() = default;
  batch_builder(const batch_builder&) = delete;  // holds pointers into its own storage
  batch_builder& operator=(const batch_builder&) = delete;
  batch_builder(batch_builder&&) noexcept = default;
  batch_builder& operator=(batch_builder&&) noexcept = default;

  // References b: it (and what it references) must outlive this builder's write / gather.
  result<void> append(const record_builder& b) { return push(&b); }
  // Takes b over.
  result<void> append(record_builder&& b) {
    owned_.push_back(std::move(b));
    return push(&owned_.back());
  }
  // An encoded record (referenced); its header is checked: magic, size, 64-byte multiple.
  result<void> append(bytes_view record) {
    if (record.size() < detail::kRecordHeaderSize || detail::load_le<std::uint32_t>(record.data()) != detail::kRecordMagic)
      return fail(errc::bad_magic, "batch_builder: record " + std::to_string(items_.size()) + " is not a record");
    if (detail::load_le<std::uint64_t>(record.data() + detail::kHRecordSize) != record.size() ||
        record.size() % kPayloadAlignment != 0)
      return fail(errc::corrupt_data, "batch_builder: record " + std::to_string(items_.size()) + " of " +
                                          std::to_string(record.size()) + " bytes disagrees with its record_size");
    return push(record);
  }

  std::size_t size() const noexcept { return items_.size(); }
  void clear() noexcept {
    items_.clear();
    owned_.clear();
  }

  std::size_t encoded_size() const noexcept {
    std::size_t total = table_end();
    for (const auto& it : items_) total += item_size(it);
    return total;
  }

  result<std::size_t> write(mutable_bytes out) const {
    const std::size_t total = encoded_size();
    if (out.size() < total)
      return fail(errc::buffer_too_small, "batch_builder: output of " + std::to_string(out.size()) + " bytes < batch of " +
                                              std::to_string(total));
    std::byte* o = out.data();
    std::size_t pos = table_end();
    for (const auto& it : items_) {
      if (const auto* rv = std::get_if<bytes_view>(&it)) {
        std::memcpy(o + pos, rv->data(), rv->size());
        pos += rv->size();
      } else {
        auto n = std::get<const record_builder*>(it)->write(mutable_bytes(o + pos, out.size() - pos));
        if (!n) return n.error();
        pos += *n;
      }
    }
    write_head(o, total);
    return total;
  }

  result<byte_buffer> finish() const {
    byte_buffer out(encoded_size());
    auto n = write(out);
    if (!n) return n.error();
    return out;
  }

  result<gather_list> gather() const {
    gather_list g;
    byte_buffer head(table_end());
    g.storage.push_back(std::move(head));
    g.pieces.push_back(g.storage.back());
    g.size = table_end();
    for (const auto& it : items_) {
      if (const auto* rv = std::get_if<bytes_view>(&it)) {
        g.pieces.push_back(*rv);
        g.size += rv->size();
      } else {
        JITEMBED_TRY(std::get<const record_builder*>(it)->gather_into(g));
      }
    }
    write_head(g.storage.front().data(), g.size);
    return g;
  }

 private:
  using item = std::variant<const record_builder*, bytes_view>;

  result<void> push(item it) {
    if (items_.size() >= std::numeric_limits<std::uint32_t>::max())
      return fail(errc::limit_exceeded, "batch_builder: too many records");
    items_.push_back(it);
    return {};
  }
  static std::size_t item_size(const item& it) noexcept {
    if (const auto* rv = std::get_if<bytes_view>(&it)) return rv->size();
    return std::get<const record_builder*>(it)->encoded_size();
  }
  std::size_t table_end() const noexcept {
    return align_up(detail::kBatchHeaderSize + items_.size() * detail::kBatchEntrySize);
  }

  // Header and offset table into o[0, table_end()).
  void write_head(std::byte* o, std::size_t total) const {
    using detail::store_le;
    const std::size_t meta = detail::kBatchHeaderSize + items_.size() * detail::kBatchEntrySize;
    std::memset(o, 0, detail::kBatchHeaderSize);
    std::memset(o + meta, 0, table_end() - meta);
    std::size_t pos = table_end();
    for (std::size_t i = 0; i < items_.size(); ++i) {
      const std::size_t n = item_size(items_[i]);
      store_le<std::uint64_t>(o + detail::kBatchHeaderSize + i * detail::kBatchEntrySize, pos);
      store_le<std::uint64_t>(o + detail::kBatchHeaderSize + i * detail::kBatchEntrySize + 8, n);
      pos += n;
    }
    store_le<std::uint32_t>(o + detail::kHMagic, detail::kBatchMagic);
    store_le<std::uint16_t>(o + detail::kHMajor, kMajorVersion);
    store_le<std::uint16_t>(o + detail::kHMinor, kMinorVersion);
    store_le<std::uint16_t>(o + detail::kHHeaderSize, static_cast<std::uint16_t>(detail::kBatchHeaderSize));
    store_le<std::uint16_t>(o + detail::kHEntrySize, static_cast<std::uint16_t>(detail::kBatchEntrySize));
    store_le<std::uint32_t>(o + detail::kBCount, static_cast<std::uint32_t>(items_.size()));
    store_le<std::uint64_t>(o + detail::kBBatchSize, total);
    detail::store_checksum(o, meta);
  }

  std::vector<item> items_;
  std::deque<record_builder> owned_;
};

}  // namespace jitembed::format
