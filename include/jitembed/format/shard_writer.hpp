// shard_writer: appends records to a shard file (each 64-byte aligned, written with writev from the
// builders' pieces), then close() writes the index (offsets, sizes, keys) and the fixed 64-byte trailer.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/codec/text.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/format/detail/file.hpp"
#include "jitembed/format/detail/wire.hpp"
#include "jitembed/format/gather.hpp"
#include "jitembed/format/record_builder.hpp"
#include "jitembed/format/record_view.hpp"

namespace jitembed::format {

class shard_writer {
 public:
  shard_writer() = default;
  shard_writer(shard_writer&& o) noexcept { *this = std::move(o); }
  shard_writer& operator=(shard_writer&& o) noexcept {
    if (this != &o) {
      (void)close();
      fd_ = std::exchange(o.fd_, -1);
      path_ = std::move(o.path_);
      pos_ = o.pos_;
      index_ = std::move(o.index_);
      keys_ = std::move(o.keys_);
    }
    return *this;
  }
  shard_writer(const shard_writer&) = delete;
  shard_writer& operator=(const shard_writer&) = delete;
  // Closes (writes the index) if close() was not called; errors are lost then: call close().
  ~shard_writer() { (void)close(); }

  // Creates (or truncates) `path` and writes the 64-byte file header.
  static result<shard_writer> create(const std::string& path) {
    shard_writer w;
    w.fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w.fd_ < 0) return detail::io_fail("cannot create", path);
    w.path_ = path;
    std::byte head[detail::kShardHeaderSize] = {};
    detail::store_le<std::uint32_t>(head, detail::kShardMagic);
    detail::store_le<std::uint16_t>(head + 4, kMajorVersion);
    detail::store_le<std::uint16_t>(head + 6, kMinorVersion);
    JITEMBED_TRY(detail::write_all(w.fd_, {bytes_view(head, sizeof head)}, path));
    w.pos_ = detail::kShardHeaderSize;
    return w;
  }

  bool is_open() const noexcept { return fd_ >= 0; }
  std::size_t size() const noexcept { return index_.size(); }

  // Appends the record `b` builds (payloads go straight from their memory to the file).
  result<void> append(const record_builder& b, std::string_view key = {}) {
    JITEMBED_TRY(check_open());
    gather_list g;
    JITEMBED_TRY(b.gather_into(g));
    return push(g.pieces, g.size, key);
  }
  // Appends an encoded record (checked with record_view::parse first).
  result<void> append(bytes_view record, std::string_view key = {}) {
    JITEMBED_TRY(check_open());
    decode_limits lim;
    lim.max_record_bytes = ~std::uint64_t{0};
    auto r = record_view::parse(record, lim);
    if (!r) return fail(r.code(), "shard_writer: record " + std::to_string(index_.size()) + ": " + r.error().message);
    return push({record}, record.size(), key);
  }

  // Writes the index and trailer and closes the file. Idempotent.
  result<void> close() {
    if (fd_ < 0) return {};
    const int fd = std::exchange(fd_, -1);
    using detail::store_le;
    const std::size_t entries = index_.size() * detail::kShardIndexEntrySize;
    const std::size_t index_size = entries + keys_.size();
    const std::size_t padded = align_up(index_size);
    byte_buffer tail(padded + detail::kShardTrailerSize);
    for (std::size_t i = 0; i < index_.size(); ++i) {
      std::byte* e = tail.data() + i * detail::kShardIndexEntrySize;
      store_le<std::uint64_t>(e, index_[i].offset);
      store_le<std::uint64_t>(e + 8, index_[i].size);
      store_le<std::uint32_t>(e + 16, index_[i].key_offset);
      store_le<std::uint32_t>(e + 20, index_[i].key_size);
    }
    if (!keys_.empty()) std::memcpy(tail.data() + entries, keys_.data(), keys_.size());
    std::byte* t = tail.data() + padded;
    std::memcpy(t, detail::kShardTrailerMagic, 8);
    store_le<std::uint16_t>(t + 8, kMajorVersion);
    store_le<std::uint16_t>(t + 10, kMinorVersion);
    store_le<std::uint64_t>(t + detail::kTIndexOffset, pos_);
    store_le<std::uint64_t>(t + detail::kTIndexSize, index_size);
    store_le<std::uint64_t>(t + detail::kTCount, index_.size());
    store_le<std::uint64_t>(t + detail::kTIndexChecksum, xxh3_64(bytes_view(tail.data(), index_size)));
    store_le<std::uint64_t>(t + detail::kTChecksum, xxh3_64(bytes_view(t, detail::kTChecksum)));
    auto w = detail::write_all(fd, {bytes_view(tail)}, path_);
    if (::close(fd) != 0 && w) return detail::io_fail("cannot close", path_);
    return w;
  }

 private:
  struct entry {
    std::uint64_t offset, size;
    std::uint32_t key_offset, key_size;
  };

  result<void> check_open() const {
    if (fd_ < 0) return fail(errc::invalid_argument, "shard_writer: not open");
    return {};
  }

  result<void> push(const std::vector<bytes_view>& pieces, std::size_t size, std::string_view key) {
    if (auto ok = codec::validate_utf8(key); !ok)
      return fail(errc::invalid_utf8, "shard_writer: key of record " + std::to_string(index_.size()) + " is not UTF-8: " + ok.error().message);
    if (keys_.size() + key.size() > std::numeric_limits<std::uint32_t>::max())
      return fail(errc::limit_exceeded, "shard_writer: keys exceed 4 GiB");
    JITEMBED_TRY(detail::write_all(fd_, pieces, path_));
    index_.push_back({pos_, size, static_cast<std::uint32_t>(keys_.size()), static_cast<std::uint32_t>(key.size())});
    keys_.append(key);
    pos_ += size;  // records are multiples of 64 bytes: the next one stays aligned
    return {};
  }

  int fd_ = -1;
  std::string path_;
  std::uint64_t pos_ = 0;
  std::vector<entry> index_;
  std::string keys_;
};

}  // namespace jitembed::format
