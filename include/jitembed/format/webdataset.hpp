// webdataset_reader: reads a WebDataset tar shard (mapped or in memory) as samples grouped by key, each
// member typed by its extension; to_record() turns a sample into a record_builder referencing the tar.
#pragma once

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/codec/codec.hpp"
#include "jitembed/codec/text.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/format/detail/file.hpp"
#include "jitembed/format/detail/npy.hpp"
#include "jitembed/format/detail/tar.hpp"
#include "jitembed/format/field.hpp"
#include "jitembed/format/record_builder.hpp"

namespace jitembed::format {

// One tar member of a sample.
struct wds_member {
  std::string name;   // the extension, lowercased (WebDataset's field name): "jpg", "seg.png", "txt"
  std::string path;   // full path in the tar
  field_kind kind = field_kind::bytes;
  codec::codec_id codec = codec::codec_id::raw;
  jitembed::dtype dtype = jitembed::dtype::u8;  // .npy members: the array's dtype and shape
  jitembed::shape shape{};
  bytes_view data;     // into the tar (for .npy: the array bytes after the header)
  std::uint64_t header_offset = 0;
};

struct wds_sample {
  std::string key;  // path up to the first dot of the file name
  std::vector<wds_member> members;

  const wds_member* find(std::string_view name) const noexcept {
    for (const auto& m : members)
      if (m.name == name) return &m;
    return nullptr;
  }

  // A record_builder with one field per member, named by extension; payloads reference the tar's bytes
  // (nothing is copied until the record is written). Text members must be valid UTF-8.
  result<record_builder> to_record() const {
    record_builder b;
    for (const auto& m : members) {
      if (m.kind == field_kind::text || m.kind == field_kind::json) {
        if (auto ok = codec::validate_utf8(m.data); !ok)
          return fail(ok.code(), "webdataset: " + m.path + ": " + ok.error().message);
      }
      encoded_info info;
      info.dtype = m.dtype;
      info.shape = m.shape;
      info.decoded_size = m.codec == codec::codec_id::raw ? m.data.size() : 0;
      auto ok = b.add_encoded(m.name, m.kind, m.codec, m.data, info);
      if (!ok) return fail(ok.code(), "webdataset: " + m.path + ": " + ok.error().message);
    }
    return b;
  }
};

// How an extension maps to a field (by its last dot-separated part).
inline void classify_extension(std::string_view ext, field_kind& kind, codec::codec_id& codec) {
  const auto dot = ext.rfind('.');
  const std::string_view last = dot == std::string_view::npos ? ext : ext.substr(dot + 1);
  kind = field_kind::bytes;
  codec = codec::codec_id::raw;
  if (last == "jpg" || last == "jpeg") {
    kind = field_kind::image;
    codec = codec::codec_id::jpeg;
  } else if (last == "png" || last == "webp") {
    kind = field_kind::image;  // stored as is: jitembed has no PNG / WebP codec
  } else if (last == "mp4" || last == "webm" || last == "mkv" || last == "avi" || last == "mov") {
    kind = field_kind::video;
    codec = codec::codec_id::video;
  } else if (last == "txt" || last == "caption" || last == "cls") {
    kind = field_kind::text;
  } else if (last == "json") {
    kind = field_kind::json;
  } else if (last == "npy") {
    kind = field_kind::tensor;
  }
}

class webdataset_reader {
 public:
  webdataset_reader() = default;

  static result<webdataset_reader> open(const std::string& path, const decode_limits& limits = {}) {
    auto m = detail::mapped_file::open(path);
    if (!m) return m.error();
    auto r = parse((*m)->bytes(), limits, jitembed::keep_alive(*m));
    if (!r) return fail(r.code(), r.error().message + " (file '" + path + "')");
    return r;
  }

  // Parses every header up front. Members are grouped into samples as WebDataset does: consecutive
  // members with the same key form one sample; files without a '.' in their name (or starting with
  // one), and "__*__" metadata files at the top level, are skipped; a repeated extension within a sample
  // is an error (errc::corrupt_data).
  static result<webdataset_reader> parse(bytes_view tar, const decode_limits& limits = {},
                                          jitembed::keep_alive keep_alive = {}) {
    auto members = detail::parse_tar(tar, limits);
    if (!members) return members.error();
    webdataset_reader r;
    r.bytes_ = tar;
    r.keep_alive_ = std::move(keep_alive);
    for (auto& tm : *members) {
      const auto slash = tm.path.rfind('/');
      const std::string_view base = slash == std::string::npos ? std::string_view(tm.path) : std::string_view(tm.path).substr(slash + 1);
      if (slash == std::string::npos && base.size() >= 4 && base.starts_with("__") && base.ends_with("__")) continue;
      const auto dot = base.find('.');
      if (dot == std::string_view::npos || dot == 0) continue;
      const std::size_t key_len = tm.path.size() - base.size() + dot;
      std::string key = tm.path.substr(0, key_len);
      std::string ext = tm.path.substr(key_len + 1);
      for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      auto at = [&] { return "webdataset: " + tm.path + " (header at offset " + std::to_string(tm.header_offset) + ")"; };
      if (ext.empty()) continue;
      if (ext.size() > limits.max_name_bytes)
        return fail(errc::limit_exceeded, at() + ": extension of " + std::to_string(ext.size()) + " bytes > max_name_bytes " +
                                              std::to_string(limits.max_name_bytes));
      if (r.samples_.empty() || r.samples_.back().key != key) r.samples_.push_back(wds_sample{std::move(key), {}});
      wds_sample& s = r.samples_.back();
      if (s.find(ext)) return fail(errc::corrupt_data, at() + ": duplicate extension '" + ext + "' in sample '" + s.key + "'");
      if (s.members.size() >= limits.max_fields)
        return fail(errc::limit_exceeded, at() + ": sample '" + s.key + "' has more than max_fields " +
                                              std::to_string(limits.max_fields) + " members");
      wds_member m;
      m.name = std::move(ext);
      m.path = std::move(tm.path);
      m.header_offset = tm.header_offset;
      m.data = tm.data;
      classify_extension(m.name, m.kind, m.codec);
      if (m.kind == field_kind::tensor) {
        auto npy = detail::parse_npy(m.data);
        if (!npy)
          return fail(npy.code(), "webdataset: " + m.path + " (header at offset " + std::to_string(m.header_offset) +
                                      "): " + npy.error().message);
        if (*npy) {
          m.dtype = (*npy)->dtype;
          m.shape = (*npy)->shape;
          m.data = (*npy)->data;
        } else {
          m.kind = field_kind::bytes;  // a valid .npy this library cannot represent: kept as bytes
        }
      }
      s.members.push_back(std::move(m));
    }
    return r;
  }

  std::size_t size() const noexcept { return samples_.size(); }
  bool empty() const noexcept { return samples_.empty(); }
  const wds_sample& sample(std::size_t i) const { return samples_[i]; }
  const wds_sample& operator[](std::size_t i) const { return samples_[i]; }
  std::span<const wds_sample> samples() const noexcept { return samples_; }
  auto begin() const noexcept { return samples_.begin(); }
  auto end() const noexcept { return samples_.end(); }
  bytes_view bytes() const noexcept { return bytes_; }
  // Keeps the tar's bytes alive (the mapping for open()); hold it while builders reference the tar.
  const jitembed::keep_alive& keep_alive() const noexcept { return keep_alive_; }

 private:
  bytes_view bytes_;
  jitembed::keep_alive keep_alive_;
  std::vector<wds_sample> samples_;
};

}  // namespace jitembed::format
