// dataset: one random-access sequence of samples over record shards (.jems), record files (.jemr),
// WebDataset tars and directories of media files with same-stem captions. open() builds the index once;
// get(i) reads sample i lazily, zero-copy where the bytes are mapped, and is safe from many threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/codec/codec.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/config.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/format/field.hpp"
#include "jitembed/format/record_view.hpp"

namespace jitembed::format {

class record_builder;  // sample::to_record (format/record_builder.hpp)

// The index and its sources (format/detail/dataset_impl.hpp): only the TU that defines dataset's members sees them.
namespace detail {
struct dataset_state;
struct ds_source;
struct ds_shard_source;
struct ds_tar_source;
struct ds_record_source;
struct ds_loose_source;
enum class ds_file_role : std::uint8_t;
}  // namespace detail

// One named field of a sample, as stored: `bytes` is the encoded payload (JPEG, MP4, UTF-8 or zstd text,
// raw tensor bytes, ...) described by kind and codec. Text is exposed as stored (codec raw: UTF-8 bytes;
// codec text / zstd: a zstd frame); text() gives validated UTF-8 either way.
struct sample_field {
  std::string name;  // record field name; WebDataset and directories: the lowercased extension ("jpg", "txt")
  field_kind kind = field_kind::bytes;
  codec::codec_id codec = codec::codec_id::raw;
  jitembed::dtype dtype = jitembed::dtype::u8;  // decoded element type / shape where declared (tensors, .npy)
  jitembed::shape shape{};
  std::uint64_t decoded_size = 0;  // bytes of the decoded form; 0 = unknown (JPEG, video)
  bytes_view bytes;                // into the mapped shard / tar, or into a loose file's buffer
  jitembed::keep_alive keep_alive;  // keeps `bytes` valid (the mapping or the buffer)

  // The UTF-8 text of a text / json / bytes field: raw bytes validated, codec text or zstd decompressed
  // under `limits` first. Other kinds: invalid_argument.
  result<std::string> text(const decode_limits& limits = {}) const;
};

// One sample: a stable id and its fields. Copies share the bytes (keep_alive), nothing is copied.
struct sample {
  // Stable across reopening the same files: "<path>#<key>" for shard records and tar samples, "<path>" for
  // a .jemr file, the path without its extension for loose media. <path> is relative to the directory
  // given to open(), or the file name of a file given by itself. Unique within a source; two sources can
  // repeat an id (two directories of the same layout): the index i is what identifies a sample.
  std::string id;
  std::vector<sample_field> fields;  // record order (records), member order (tars), sorted by name (loose)
  // Shard and .jemr samples: the parsed record (fields[i] is record[i]); send record.bytes() as it is.
  // Empty (no bytes) for the other sources.
  record_view record;

  bool is_record() const noexcept { return !record.bytes().empty(); }
  const sample_field* find(std::string_view name) const noexcept {
    for (const auto& f : fields)
      if (f.name == name) return &f;
    return nullptr;
  }
  // The first field of kind `k` (e.g. the image, the caption), or nullptr.
  const sample_field* first(field_kind k) const noexcept {
    for (const auto& f : fields)
      if (f.kind == k) return &f;
    return nullptr;
  }
  // The first field of kind `k` stored with codec `c`: first(image, jpeg) skips a tar's PNG (image, raw).
  const sample_field* first(field_kind k, codec::codec_id c) const noexcept {
    for (const auto& f : fields)
      if (f.kind == k && f.codec == c) return &f;
    return nullptr;
  }

  // A jitembed record of every field, referencing this sample's bytes (keep the sample alive until it is
  // written). Record samples keep their stored checksums; text fields of other sources must be UTF-8. With
  // JITEMBED_SEPARATE_COMPILATION, include format/record_builder.hpp to call it.
  result<record_builder> to_record() const;
};

struct dataset_options {
  decode_limits limits{};  // shard / tar / record parsing; a loose file larger than max_record_bytes fails
  // false: open() fails on the first bad source (missing path, corrupt shard or tar, unknown file given
  // by itself). true: the source is left out and recorded in errors(), open() goes on.
  bool skip_bad_sources = false;
  // Record fields (shards, .jemr): verify: get() hashes each payload against its stored checksum, so a
  // flipped payload bit fails that sample; skip: the consumer verifies (the embedding server does).
  checksum_policy payload_checks = checksum_policy::verify;
};

// A source open() left out (skip_bad_sources).
struct source_error {
  std::string path;
  error_info error;
};

// Samples of several sources, concatenated in the order given. A directory contributes, recursively and
// in byte order of the ids: record shards (.jems), record files (.jemr), WebDataset tars (.tar), and one
// sample per stem of media files (.jpg .jpeg .mp4 .mkv .webm .mov .avi, extensions case-insensitive) with
// every same-stem media file and caption (.txt .caption) next to it as its fields ("jpg", "txt", ...). A
// caption without a same-stem media file is a text-only sample. Other files are ignored (counted). A file
// given by itself is its own source (a media or text file: a one-field sample, no caption pairing).
// Symbolic links to files are followed, to directories not.
//
// Copies share the immutable index; get() and every const member are safe to call concurrently.
class dataset {
 public:
  dataset() = default;

  // Indexes every path in order (a directory recursively). The first bad source fails open() (its error),
  // unless options.skip_bad_sources.
  static result<dataset> open(std::span<const std::string> paths, const dataset_options& options = {});
  static result<dataset> open(std::initializer_list<std::string> paths, const dataset_options& options = {}) {
    return open(std::span<const std::string>(paths.begin(), paths.size()), options);
  }
  static result<dataset> open(const std::string& path, const dataset_options& options = {}) {
    return open(std::span<const std::string>(&path, 1), options);
  }

  std::size_t size() const noexcept;
  bool empty() const noexcept { return size() == 0; }

  // Sample i (0 <= i < size()): reads its bytes (mapped: zero-copy; loose files: one read each). A bad
  // sample fails only itself: the error names its id. i >= size(): not_found.
  result<sample> get(std::size_t i) const;

  // The id of sample i without reading it.
  result<std::string> id(std::size_t i) const;

  // Sources open() left out (only with skip_bad_sources).
  std::span<const source_error> errors() const noexcept;
  // Files indexed: shards, tars, record files, loose media and captions.
  std::uint64_t file_count() const noexcept;
  // Files in directories that are not data (unknown extensions).
  std::uint64_t ignored_files() const noexcept;
  const dataset_options& options() const noexcept;

 private:
  using state = detail::dataset_state;

  result<std::pair<std::size_t, std::size_t>> locate(std::size_t i) const;

  static std::string lower_ext(const std::string& filename);

  static void push(state& st, detail::ds_source src);

  // A container file (shard / tar / record file) at `path`, its ids prefixed by `rel`.
  static result<void> add_container(state& st, detail::ds_file_role role, const std::string& path, const std::string& rel);

  static result<void> add_path(state& st, const std::string& path);

  static result<void> add_directory(state& st, const std::string& root);

  static error_info sample_error(const std::string& id, const error_info& e);

  result<sample> from_record(std::string id, result<record_view> rec) const;

  result<sample> read(const detail::ds_shard_source& s, std::size_t i) const;

  result<sample> read(const detail::ds_record_source& s, std::size_t) const;

  result<sample> read(const detail::ds_tar_source& s, std::size_t i) const;

  result<sample> read(const detail::ds_loose_source& s, std::size_t i) const;

  std::shared_ptr<const detail::dataset_state> state_;
};

}  // namespace jitembed::format

// The members that read the index (and open()), defined out of line with the index itself: here header-only,
// in format/src.hpp with JITEMBED_SEPARATE_COMPILATION (core/config.hpp), so a program's other TUs parse
// neither the readers (shards, tars, zstd) nor the index.
#if defined(JITEMBED_HEADER_ONLY)
#include "jitembed/format/detail/dataset_impl.hpp"
#endif
