// dataset's index (dataset_state) and the members that use it: classifying paths into sources (shards, records,
// tar / WebDataset, loose files, directories) and reading a sample from each kind of source; sample_field::text()
// and sample::to_record(). Included at the end of format/dataset.hpp header-only, from format/src.hpp in separate
// compilation (core/config.hpp).
#pragma once

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <variant>

#include "jitembed/codec/text.hpp"
#include "jitembed/codec/zstd.hpp"
#include "jitembed/core/config.hpp"
#include "jitembed/format/dataset.hpp"
#include "jitembed/format/detail/dataset_sources.hpp"
#include "jitembed/format/record_builder.hpp"
#include "jitembed/format/shard_reader.hpp"
#include "jitembed/format/webdataset.hpp"

namespace jitembed::format {

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

JITEMBED_DECL auto sample_field::text(const decode_limits& limits) const -> result<std::string> {
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

JITEMBED_DECL auto sample::to_record() const -> result<record_builder> {
  record_builder b;
  if (is_record()) {
    for (const auto& f : record) JITEMBED_TRY(b.add_field(f));
    return b;
  }
  for (const auto& f : fields) {
    if (f.kind == field_kind::text || f.kind == field_kind::json) {
      if (f.codec == codec::codec_id::raw) {
        if (auto ok = codec::validate_utf8(f.bytes); !ok)
          return fail(ok.code(), "sample '" + id + "' field '" + f.name + "': " + ok.error().message);
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

JITEMBED_DECL std::size_t dataset::size() const noexcept { return state_ ? state_->starts.back() : 0; }

JITEMBED_DECL auto dataset::get(std::size_t i) const -> result<sample> {
  auto at = locate(i);
  if (!at) return at.error();
  const auto [k, local] = *at;
  return std::visit([&, local = local](const auto& s) { return read(s, local); }, state_->sources[k].src);
}

JITEMBED_DECL auto dataset::id(std::size_t i) const -> result<std::string> {
  auto at = locate(i);
  if (!at) return at.error();
  const auto [k, local] = *at;
  struct {
    std::size_t local;
    std::string operator()(const detail::ds_shard_source& s) const {
      return s.id_prefix + std::string(s.reader.key(local));
    }
    std::string operator()(const detail::ds_tar_source& s) const { return s.id_prefix + s.reader.sample(local).key; }
    std::string operator()(const detail::ds_record_source& s) const { return s.id; }
    std::string operator()(const detail::ds_loose_source& s) const { return s.samples[local].id; }
  } v{local};
  return std::visit(v, state_->sources[k].src);
}

JITEMBED_DECL auto dataset::errors() const noexcept -> std::span<const source_error> {
  return state_ ? std::span<const source_error>(state_->errors) : std::span<const source_error>{};
}
JITEMBED_DECL std::uint64_t dataset::file_count() const noexcept { return state_ ? state_->files : 0; }
JITEMBED_DECL std::uint64_t dataset::ignored_files() const noexcept { return state_ ? state_->ignored : 0; }
JITEMBED_DECL auto dataset::options() const noexcept -> const dataset_options& {
  static const dataset_options none;
  return state_ ? state_->options : none;
}

JITEMBED_DECL auto dataset::locate(std::size_t i) const -> result<std::pair<std::size_t, std::size_t>> {
  if (i >= size())
    return fail(errc::not_found, "dataset: sample " + std::to_string(i) + " of " + std::to_string(size()));
  const auto& s = state_->starts;
  const auto k = static_cast<std::size_t>(std::upper_bound(s.begin(), s.end(), i) - s.begin()) - 1;
  return std::pair{k, i - s[k]};
}

JITEMBED_DECL auto dataset::open(std::span<const std::string> paths, const dataset_options& options) -> result<dataset> {
  auto st = std::make_shared<detail::dataset_state>();
  st->options = options;
  st->starts.push_back(0);
  for (const auto& p : paths) {
    auto ok = add_path(*st, p);
    if (ok) continue;
    if (!options.skip_bad_sources) return ok.error();
    st->errors.push_back({p, ok.error()});
  }
  dataset d;
  d.state_ = std::move(st);
  return d;
}

JITEMBED_DECL auto dataset::lower_ext(const std::string& filename) -> std::string {
  const auto dot = filename.rfind('.');
  if (dot == std::string::npos || dot == 0) return {};
  std::string e = filename.substr(dot + 1);
  for (auto& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

JITEMBED_DECL void dataset::push(state& st, detail::ds_source src) {
  const std::size_t n = src.size();
  if (n == 0) return;
  st.sources.push_back(std::move(src));
  st.starts.push_back(st.starts.back() + n);
}

JITEMBED_DECL auto dataset::add_container(state& st, detail::ds_file_role role, const std::string& path, const std::string& rel) -> result<void> {
  ++st.files;
  if (role == detail::ds_file_role::shard) {
    auto r = shard_reader::open(path, st.options.limits);
    if (!r) return r.error();
    push(st, {detail::ds_shard_source{rel + "#", std::move(*r)}});
  } else if (role == detail::ds_file_role::tar) {
    auto r = webdataset_reader::open(path, st.options.limits);
    if (!r) return r.error();
    push(st, {detail::ds_tar_source{rel + "#", std::move(*r)}});
  } else {
    push(st, {detail::ds_record_source{rel, path}});
  }
  return {};
}

JITEMBED_DECL auto dataset::add_path(state& st, const std::string& path) -> result<void> {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (path.empty() || ec || !fs::exists(status))
    return fail(errc::not_found, "dataset: no such file or directory '" + path + "'");
  if (fs::is_directory(status)) return add_directory(st, path);
  const std::string name = fs::path(path).filename().string();
  const std::string ext = lower_ext(name);
  const auto cls = detail::classify_data_file(ext);
  switch (cls.role) {
    case detail::ds_file_role::shard:
    case detail::ds_file_role::tar:
    case detail::ds_file_role::record: return add_container(st, cls.role, path, name);
    case detail::ds_file_role::media:
    case detail::ds_file_role::caption: {
      ++st.files;
      detail::ds_loose_source src;
      src.samples.push_back({name.substr(0, name.size() - ext.size() - 1), {{ext, path, cls.kind, cls.codec}}, nullptr});
      push(st, {std::move(src)});
      return {};
    }
    case detail::ds_file_role::ignored: break;
  }
  return fail(errc::unsupported_format,
              "dataset: '" + path + "' is not a .jems / .jemr / .tar / image (.jpg) / video (.mp4 .mkv .webm .mov .avi) / text (.txt) file");
}

JITEMBED_DECL auto dataset::add_directory(state& st, const std::string& root) -> result<void> {
  namespace fs = std::filesystem;
  struct entry {
    std::string rel, path;
  };
  std::vector<entry> files;
  std::error_code ec;
  const fs::path root_path(root);
  for (auto it = fs::recursive_directory_iterator(root_path, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code fec;
    if (it->is_regular_file(fec)) files.push_back({it->path().lexically_relative(root_path).generic_string(), it->path().string()});
  }
  if (ec) return fail(errc::io_error, "dataset: cannot list '" + root + "': " + ec.message());
  std::sort(files.begin(), files.end(), [](const entry& a, const entry& b) { return a.rel < b.rel; });

  struct container {
    std::string rel, path;
    detail::ds_file_role role;
  };
  std::vector<container> containers;  // sorted by rel (files are)
  std::map<std::string, detail::ds_loose_sample> loose;  // by stem
  for (auto& f : files) {
    const auto slash = f.rel.rfind('/');
    const std::string ext = lower_ext(slash == std::string::npos ? f.rel : f.rel.substr(slash + 1));
    const auto cls = detail::classify_data_file(ext);
    if (cls.role == detail::ds_file_role::ignored) {
      ++st.ignored;
      continue;
    }
    if (cls.role == detail::ds_file_role::media || cls.role == detail::ds_file_role::caption) {
      ++st.files;
      std::string stem = f.rel.substr(0, f.rel.size() - ext.size() - 1);
      auto& s = loose[stem];
      if (s.id.empty()) s.id = stem;
      s.members.push_back({ext, std::move(f.path), cls.kind, cls.codec});
      continue;
    }
    containers.push_back({std::move(f.rel), std::move(f.path), cls.role});
  }
  // Merge containers and loose samples by id; consecutive loose samples form one source.
  detail::ds_loose_source run;
  auto flush = [&] {
    if (!run.samples.empty()) push(st, {std::move(run)});
    run = {};
  };
  auto c = containers.begin();
  auto add_containers_before = [&](const std::string* key) -> result<void> {
    for (; c != containers.end() && (!key || c->rel < *key); ++c) {
      flush();
      auto ok = add_container(st, c->role, c->path, c->rel);
      if (ok) continue;
      if (!st.options.skip_bad_sources) return ok.error();
      st.errors.push_back({c->path, ok.error()});
    }
    return {};
  };
  for (auto& [stem, s] : loose) {
    JITEMBED_TRY(add_containers_before(&stem));
    std::sort(s.members.begin(), s.members.end(), [](const auto& a, const auto& b) { return a.name < b.name || (a.name == b.name && a.path < b.path); });
    for (std::size_t m = 1; m < s.members.size(); ++m)
      if (s.members[m].name == s.members[m - 1].name && !s.error)
        s.error = std::make_shared<const error_info>(fail(
            errc::corrupt_data, "dataset: sample '" + s.id + "': field '" + s.members[m].name + "' given twice ('" +
                                    s.members[m - 1].path + "', '" + s.members[m].path + "')"));
    run.samples.push_back(std::move(s));
  }
  JITEMBED_TRY(add_containers_before(nullptr));
  flush();
  return {};
}

JITEMBED_DECL auto dataset::sample_error(const std::string& id, const error_info& e) -> error_info {
  return fail(e.code, "dataset: sample '" + id + "': " + e.message);
}

JITEMBED_DECL auto dataset::from_record(std::string id, result<record_view> rec) const -> result<sample> {
  if (!rec) return sample_error(id, rec.error());
  sample out;
  out.id = std::move(id);
  out.fields.reserve(rec->size());
  for (const auto& f : *rec) {
    if (state_->options.payload_checks == checksum_policy::verify) {
      if (auto ok = f.verify(); !ok) return sample_error(out.id, ok.error());
    }
    out.fields.push_back({std::string(f.name()), f.kind(), f.codec(), f.dtype(), f.shape(), f.decoded_size(), f.payload(),
                          rec->keep_alive()});
  }
  out.record = std::move(*rec);
  return out;
}

JITEMBED_DECL auto dataset::read(const detail::ds_shard_source& s, std::size_t i) const -> result<sample> {
  return from_record(s.id_prefix + std::string(s.reader.key(i)), s.reader.record(i));
}

JITEMBED_DECL auto dataset::read(const detail::ds_record_source& s, std::size_t) const -> result<sample> {
  auto buf = detail::read_file_bounded(s.path, state_->options.limits.max_record_bytes);
  if (!buf) return sample_error(s.id, buf.error());
  const bytes_view bytes((*buf)->data(), (*buf)->size());
  return from_record(s.id, record_view::parse(bytes, state_->options.limits, jitembed::keep_alive(*buf)));
}

JITEMBED_DECL auto dataset::read(const detail::ds_tar_source& s, std::size_t i) const -> result<sample> {
  const wds_sample& w = s.reader.sample(i);
  sample out;
  out.id = s.id_prefix + w.key;
  out.fields.reserve(w.members.size());
  for (const auto& m : w.members)
    out.fields.push_back({m.name, m.kind, m.codec, m.dtype, m.shape,
                          m.codec == codec::codec_id::raw ? static_cast<std::uint64_t>(m.data.size()) : 0, m.data,
                          s.reader.keep_alive()});
  return out;
}

JITEMBED_DECL auto dataset::read(const detail::ds_loose_source& s, std::size_t i) const -> result<sample> {
  const auto& ls = s.samples[i];
  if (ls.error) return *ls.error;
  sample out;
  out.id = ls.id;
  out.fields.reserve(ls.members.size());
  for (const auto& m : ls.members) {
    auto buf = detail::read_file_bounded(m.path, state_->options.limits.max_record_bytes);
    if (!buf) return sample_error(ls.id, buf.error());
    const bytes_view bytes((*buf)->data(), (*buf)->size());
    out.fields.push_back({m.name, m.kind, m.codec, jitembed::dtype::u8, {},
                          m.kind == field_kind::text ? static_cast<std::uint64_t>(bytes.size()) : 0, bytes,
                          jitembed::keep_alive(*buf)});
  }
  return out;
}

}  // namespace jitembed::format
