// The raw bytes a model embeds from a jitembed record ("sample" input): its first field of the model's
// kind (image/JPEG, video, text). Shared by the server and the client's local mode.
#pragma once

#include <string>

#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/format/record_view.hpp"
#include "jitembed/models/any_model.hpp"

namespace jitembed::models {

// The kind of sample field a model of modality `m` reads: a model's modality (what it consumes: image,
// video, text) and a field's kind (what a stored field is: also bytes, tensor, json) are two ideas, this is
// where they meet.
constexpr format::field_kind field_kind_of(modality m) noexcept {
  switch (m) {
    case modality::image: return format::field_kind::image;
    case modality::video: return format::field_kind::video;
    case modality::text: return format::field_kind::text;
  }
  return format::field_kind::bytes;
}

// Preprocesses `raw` for `m`: a record when `is_sample`, else the model's own field bytes.
inline result<tensor> preprocess_input(const any_model& m, bytes_view raw, bool is_sample, const decode_limits& limits) {
  if (!is_sample) return m.preprocess(raw, limits);
  JITEMBED_ASSIGN_OR_RETURN(auto rec, format::record_view::parse(raw, limits));
  const auto mod = m.input_modality();
  for (const auto& f : rec.fields()) {
    if (f.kind() != field_kind_of(mod)) continue;
    if (mod == modality::image && f.codec() == codec::codec_id::jpeg) {
      JITEMBED_ASSIGN_OR_RETURN(auto p, f.checked_payload());
      return m.preprocess(p, limits);
    }
    if (mod == modality::video) {
      JITEMBED_ASSIGN_OR_RETURN(auto p, f.checked_payload());
      return m.preprocess(p, limits);
    }
    if (mod == modality::text) {
      JITEMBED_ASSIGN_OR_RETURN(auto s, f.text(limits));
      return m.preprocess(as_bytes_view(s), limits);
    }
  }
  return fail(errc::invalid_argument,
              "sample has no " + std::string(to_string(mod)) + " field for model '" + std::string(m.name()) + "'");
}

}  // namespace jitembed::models
