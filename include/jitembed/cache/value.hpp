// Cache values: the embedding tensors of one cache entry encoded as one jitembed record (a tensor field
// each, raw or shuffle+zstd), and decoded zero-copy from the bytes a store hands out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/cache/store.hpp"
#include "jitembed/cache/value_options.hpp"
#include "jitembed/codec/zstd.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/format/field.hpp"
#include "jitembed/format/record_builder.hpp"
#include "jitembed/format/record_view.hpp"

namespace jitembed::cache {

using named_tensor = std::pair<std::string_view, tensor_view>;

// Encodes named tensors (contiguous, on the CPU, distinct non-empty names, at least one) as one record.
inline result<byte_buffer> encode_value(std::span<const named_tensor> tensors, const value_options& opt = {}) {
  if (tensors.empty()) return fail(errc::invalid_argument, "cache value: no tensors to encode");
  format::record_builder b;
  std::vector<byte_buffer> compressed;  // owned payloads the builder references until finish()
  compressed.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (opt.compression == format::compression::raw || !t.device().is_cpu() || !t.is_contiguous() || !is_valid(t.dtype())) {
      JITEMBED_TRY(b.add_tensor(name, t));  // the builder reports device / layout / dtype errors by name
      continue;
    }
    const std::uint8_t shuffle = opt.shuffle ? *opt.shuffle : auto_shuffle(t.dtype());
    if (shuffle != 0 && shuffle != 2 && shuffle != 4 && shuffle != 8)
      return fail(errc::invalid_argument, "cache value: shuffle " + std::to_string(shuffle) + " not in {0,2,4,8}");
    const bytes_view data(static_cast<const std::byte*>(t.data()), t.nbytes());
    const bool shuffled = shuffle > 1 && data.size() % shuffle == 0;
    codec::zstd_options zo;
    zo.level = opt.level;
    zo.shuffle = shuffled ? shuffle : 0;
    byte_buffer out(codec::zstd_codec::compress_bound(data.size()));
    auto n = codec::zstd_codec(std::move(zo)).compress(data, out);
    if (!n) return fail(n.code(), "cache value: tensor '" + std::string(name) + "': " + n.error().message);
    if (opt.raw_if_not_smaller && align_up(*n) >= align_up(data.size())) {
      JITEMBED_TRY(b.add_tensor(name, t));
      continue;
    }
    out.resize(*n);
    format::encoded_info info;
    info.dtype = t.dtype();
    info.shape = t.shape();
    info.decoded_size = data.size();
    info.shuffle = shuffled ? shuffle : 0;
    compressed.push_back(std::move(out));
    JITEMBED_TRY(b.add_encoded(name, format::field_kind::tensor, codec::codec_id::zstd, compressed.back(), info));
  }
  return b.finish();
}

inline result<byte_buffer> encode_value(std::initializer_list<named_tensor> tensors, const value_options& opt = {}) {
  return encode_value(std::span<const named_tensor>(tensors.begin(), tensors.size()), opt);
}

// A decoded cache value: the parsed record plus what keeps its bytes alive. Cheap to copy.
class embedding_value {
 public:
  embedding_value() = default;
  // A parsed record (see decode_value, which also checks it); tensors decode under `limits`.
  embedding_value(format::record_view record, const decode_limits& limits) : record_(std::move(record)), limits_(limits) {}

  std::size_t size() const noexcept { return record_.size(); }
  bool contains(std::string_view name) const noexcept { return record_.find(name) != nullptr; }
  std::vector<std::string_view> names() const {
    std::vector<std::string_view> out;
    for (const auto& f : record_) out.push_back(f.name());
    return out;
  }

  // The tensor named `name` (errc::not_found if absent). Raw fields are zero-copy: the tensor points into
  // the value bytes and shares the cached_value's keep_alive; zstd fields decode into new storage.
  result<jitembed::tensor> tensor(std::string_view name) const {
    const auto* f = record_.find(name);
    if (!f) return fail(errc::not_found, "cache value: no tensor named '" + std::string(name) + "'");
    return f->decode(limits_);
  }
  // All tensors, in stored order.
  result<std::vector<std::pair<std::string, jitembed::tensor>>> tensors() const {
    std::vector<std::pair<std::string, jitembed::tensor>> out;
    out.reserve(size());
    for (const auto& f : record_) {
      JITEMBED_ASSIGN_OR_RETURN(auto t, f.decode(limits_));
      out.emplace_back(std::string(f.name()), std::move(t));
    }
    return out;
  }

  const format::record_view& record() const noexcept { return record_; }
  bytes_view bytes() const noexcept { return record_.bytes(); }

 private:
  format::record_view record_;
  decode_limits limits_{};
};

// Parses a value a store returned. With checksum_policy::verify (the default) every payload checksum and
// the padding are checked here, so a value that decodes is intact; any failure is an error (stores and
// callers treat it as a miss). Fields must all be tensors (errc::corrupt_data otherwise).
inline result<embedding_value> decode_value(const cached_value& v, const decode_limits& limits = {},
                                            format::checksum_policy policy = format::checksum_policy::verify) {
  auto rec = format::record_view::parse(v.bytes, limits, v.keep_alive);
  if (!rec) return fail(rec.code(), "cache value: " + rec.error().message);
  if (rec->empty()) return fail(errc::corrupt_data, "cache value: record has no fields");
  for (const auto& f : *rec)
    if (f.kind() != format::field_kind::tensor)
      return fail(errc::corrupt_data, "cache value: field " + std::to_string(f.index()) + " '" + std::string(f.name()) +
                                          "' is of kind " + std::string(format::to_string(f.kind())) + ", not tensor");
  if (policy == format::checksum_policy::verify) {
    if (auto ok = rec->verify(); !ok) return fail(ok.code(), "cache value: " + ok.error().message);
  }
  return embedding_value(std::move(*rec), limits);
}

}  // namespace jitembed::cache
