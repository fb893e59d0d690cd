// dataset: one random-access sequence of samples over record shards (.jems), record files (.jemr),
// WebDataset tars and directories of media files with same-stem captions. open() builds the index once;
// get(i) reads sample i lazily, zero-copy where the bytes are mapped, and is safe from many threads.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "jitembed/codec/codec.hpp"
#include "jitembed/codec/text.hpp"
#include "jitembed/codec/zstd.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/config.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/format/detail/dataset_sources.hpp"
#include "jitembed/format/field.hpp"
#include "jitembed/format/record_builder.hpp"
#include "jitembed/format/record_view.hpp"
#include "jitembed/format/shard_reader.hpp"
#include "jitembed/format/webdataset.hpp"

namespace jitembed::format {

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
  result<std::string> text(const decode_limits& limits = {}) const {
    using codec::codec_id;
    auto bad = [&](errc c, const std::string& m) { return fail(c, "sample field '" + name + "': " + m); };
    if (kind != field_kind::text && kind != field_kind::json && kind != field_kind::bytes)
      return bad(errc::invalid_argument, "kind " + std::string(to_string(kind)) + " is not text");
    std::string s;
    if (codec == codec_id::raw) {
      s.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    } else if (codec == codec_id::text || codec == codec_id::zstd) {
      auto t = codec::zstd_codec().decompress(bytes, limits);
      if (!t) return bad(t.code(), t.error().message);
      if (decoded_size != 0 && t->nbytes() != decoded_size)
        return bad(errc::corrupt_data, "decompressed " + std::to_string(t->nbytes()) + " bytes != decoded size " +
                                           std::to_string(decoded_size));
      s.assign(reinterpret_cast<const char*>(t->data()), t->nbytes());
    } else {
      return bad(errc::unsupported_codec, "codec " + std::string(codec::to_string(codec)) + " is not a text codec");
    }
    if (auto ok = codec::validate_utf8(std::string_view(s)); !ok) return bad(ok.code(), ok.error().message);
    return s;
  }
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
  // written). Record samples keep their stored checksums; text fields of other sources must be UTF-8.
  result<record_builder> to_record() const {
    record_builder b;
    if (is_record()) {
      for (const auto& f : record) JITEMBED_TRY(b.add_field(f));
      return b;
    }
    for (const auto& f : fields) {
      if (f.kind == field_kind::text || f.kind == field_kind::json) {
        if (f.codec == codec::codec_id::raw) {
          if (auto ok = codec::validate_utf8(f.bytes); !ok) return fail(ok.code(), "sample '" + id + "' field '" + f.name + "': " + ok.error().message);
        }
      }
      encoded_info info;
      info.dtype = f.dtype;
      info.shape = f.shape;
      info.decoded_size = f.codec == codec::codec_id::raw ? f.bytes.size() : f.decoded_size;
      if (auto ok = b.add_encoded(f.name, f.kind, f.codec, f.bytes, info); !ok)
        return fail(ok.code(), "sample '" + id + "' field '" + f.name + "': " + ok.error().message);
    }
    return b;
  }
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

namespace detail {
struct dataset_state {
  dataset_options options;
  std::vector<ds_source> sources;   // non-empty sources, in order
  std::vector<std::size_t> starts;  // starts[k]: index of the first sample of sources[k]; back() == size
  std::vector<source_error> errors;
  std::uint64_t files = 0;    // files indexed (containers and loose media / captions)
  std::uint64_t ignored = 0;  // files in directories that are none of those
};
}  // namespace detail

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

  std::size_t size() const noexcept { return state_ ? state_->starts.back() : 0; }
  bool empty() const noexcept { return size() == 0; }

  // Sample i (0 <= i < size()): reads its bytes (mapped: zero-copy; loose files: one read each). A bad
  // sample fails only itself: the error names its id. i >= size(): not_found.
  result<sample> get(std::size_t i) const {
    auto at = locate(i);
    if (!at) return at.error();
    const auto [k, local] = *at;
    return std::visit([&, local = local](const auto& s) { return read(s, local); }, state_->sources[k].src);
  }

  // The id of sample i without reading it.
  result<std::string> id(std::size_t i) const {
    auto at = locate(i);
    if (!at) return at.error();
    const auto [k, local] = *at;
    struct {
      std::size_t local;
      std::string operator()(const detail::ds_shard_source& s) const { return s.id_prefix + std::string(s.reader.key(local)); }
      std::string operator()(const detail::ds_tar_source& s) const { return s.id_prefix + s.reader.sample(local).key; }
      std::string operator()(const detail::ds_record_source& s) const { return s.id; }
      std::string operator()(const detail::ds_loose_source& s) const { return s.samples[local].id; }
    } v{local};
    return std::visit(v, state_->sources[k].src);
  }

  // Sources open() left out (only with skip_bad_sources).
  std::span<const source_error> errors() const noexcept {
    return state_ ? std::span<const source_error>(state_->errors) : std::span<const source_error>{};
  }
  // Files indexed: shards, tars, record files, loose media and captions.
  std::uint64_t file_count() const noexcept { return state_ ? state_->files : 0; }
  // Files in directories that are not data (unknown extensions).
  std::uint64_t ignored_files() const noexcept { return state_ ? state_->ignored : 0; }
  const dataset_options& options() const noexcept {
    static const dataset_options none;
    return state_ ? state_->options : none;
  }

 private:
  using state = detail::dataset_state;

  result<std::pair<std::size_t, std::size_t>> locate(std::size_t i) const {
    if (i >= size()) return fail(errc::not_found, "dataset: sample " + std::to_string(i) + " of " + std::to_string(size()));
    const auto& s = state_->starts;
    const auto k = static_cast<std::size_t>(std::upper_bound(s.begin(), s.end(), i) - s.begin()) - 1;
    return std::pair{k, i - s[k]};
  }

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

// open() and the private member functions, defined out of line: here header-only, in format/src.hpp with
// JITEMBED_SEPARATE_COMPILATION (core/config.hpp).
#if defined(JITEMBED_HEADER_ONLY)
#include "jitembed/format/detail/dataset_impl.hpp"
#endif
