// Internals of format::dataset: the per-source index built at open (shards, WebDataset tars, record files,
// loose media grouped by stem) and bounded whole-file reads of loose files.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "jitembed/codec/codec.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/format/field.hpp"
#include "jitembed/format/shard_reader.hpp"
#include "jitembed/format/webdataset.hpp"

namespace jitembed::format::detail {

// What a file is to a data set, by its lowercased last extension (without the dot).
enum class ds_file_role : std::uint8_t { ignored, media, caption, shard, tar, record };

struct ds_file_class {
  ds_file_role role = ds_file_role::ignored;
  field_kind kind = field_kind::bytes;
  codec::codec_id codec = codec::codec_id::raw;
};

inline ds_file_class classify_data_file(std::string_view ext) {
  using codec::codec_id;
  if (ext == "jpg" || ext == "jpeg") return {ds_file_role::media, field_kind::image, codec_id::jpeg};
  if (ext == "mp4" || ext == "mkv" || ext == "webm" || ext == "mov" || ext == "avi")
    return {ds_file_role::media, field_kind::video, codec_id::video};
  if (ext == "txt" || ext == "caption") return {ds_file_role::caption, field_kind::text, codec_id::raw};
  if (ext == "jems") return {ds_file_role::shard};
  if (ext == "tar") return {ds_file_role::tar};
  if (ext == "jemr") return {ds_file_role::record};
  return {};
}

// One file of a loose sample: the field it becomes.
struct ds_loose_member {
  std::string name;  // lowercased extension: "jpg", "mp4", "txt"
  std::string path;  // as opened
  field_kind kind = field_kind::bytes;
  codec::codec_id codec = codec::codec_id::raw;
};

// Media (and captions) sharing a stem in one directory, or one media / text file given by itself.
struct ds_loose_sample {
  std::string id;
  std::vector<ds_loose_member> members;  // sorted by name
  std::shared_ptr<const error_info> error;  // a defect found while listing (duplicate field): get() fails
};

struct ds_shard_source {
  std::string id_prefix;  // "<relative path>#"
  shard_reader reader;
};
struct ds_tar_source {
  std::string id_prefix;
  webdataset_reader reader;
};
struct ds_record_source {
  std::string id;
  std::string path;
};
struct ds_loose_source {
  std::vector<ds_loose_sample> samples;
};

struct ds_source {
  std::variant<ds_shard_source, ds_tar_source, ds_record_source, ds_loose_source> src;

  std::size_t size() const noexcept {
    struct {
      std::size_t operator()(const ds_shard_source& s) const noexcept { return s.reader.size(); }
      std::size_t operator()(const ds_tar_source& s) const noexcept { return s.reader.size(); }
      std::size_t operator()(const ds_record_source&) const noexcept { return 1; }
      std::size_t operator()(const ds_loose_source& s) const noexcept { return s.samples.size(); }
    } v;
    return std::visit(v, src);
  }
};

// Reads a whole regular file into a 64-byte aligned buffer, refusing files over max_bytes before
// allocating. The buffer is shared so fields can keep it alive.
inline result<std::shared_ptr<const byte_buffer>> read_file_bounded(const std::string& path, std::uint64_t max_bytes) {
  auto io = [&](const char* what) { return fail(errc::io_error, std::string(what) + " '" + path + "': " + std::strerror(errno)); };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io("cannot open");
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io("cannot stat");
  if (!S_ISREG(st.st_mode)) return fail(errc::io_error, "'" + path + "' is not a regular file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes)
    return fail(errc::limit_exceeded, "'" + path + "': file of " + std::to_string(size) + " bytes > max_record_bytes " +
                                          std::to_string(max_bytes));
  auto buf = std::make_shared<byte_buffer>(static_cast<std::size_t>(size));
  std::size_t done = 0;
  while (done < buf->size()) {
    const ssize_t n = ::read(fd, buf->data() + done, buf->size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io("cannot read");
    }
    if (n == 0)
      return fail(errc::truncated, "'" + path + "': file shrank to " + std::to_string(done) + " of " +
                                       std::to_string(size) + " bytes while reading");
    done += static_cast<std::size_t>(n);
  }
  return std::shared_ptr<const byte_buffer>(std::move(buf));
}

}  // namespace jitembed::format::detail
