// The preprocessing a preprocess_spec asks for as one callable and its cache key: what a backend that
// serves a model from a repository config (TorchScript, AOTInductor, a Python callable) runs per row.
// Image and video need only component models_video; text models need the SentencePiece tokenizer
// (models/tokenizer.hpp), compiled in with JITEMBED_WITH_SENTENCEPIECE=1, or a Hugging Face tokenizer.json
// (models/hf_tokenizer.hpp, component tokenizers: JITEMBED_HAS_TOKENIZERS); else unsupported_format.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <utility>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/preprocess.hpp"
#if JITEMBED_WITH_SENTENCEPIECE
#include "jitembed/models/tokenizer.hpp"
#endif
#if JITEMBED_HAS_TOKENIZERS
#include "jitembed/models/hf_tokenizer.hpp"
#endif

namespace jitembed::models {

struct preprocess_function {
  std::function<result<tensor>(bytes_view, const decode_limits&)> run;  // raw field bytes -> one input item
  std::string key;  // preprocess_spec::key() (text: with the SentencePiece model's hash)
};

// The callable of an active spec (spec.active; an inactive spec has none: invalid_argument). Text models
// open their tokenizer here. Errors carry `file`: unsupported_format (text without SentencePiece compiled
// in), the tokenizer's (not_found, decode_failed).
inline result<preprocess_function> make_preprocess_function(const preprocess_spec& spec, const std::string& file) {
  if (!spec.active) return fail(errc::invalid_argument, file + ": no image, video or text preprocessing is configured");
  preprocess_function f;
  if (spec.input_modality == modality::text && !spec.text.tokenizer_json.empty()) {
#if !JITEMBED_HAS_TOKENIZERS
    return fail(errc::unsupported_format, file + ": parameters 'tokenizer': this program is built without the tokenizers component "
                                               "(jitembed::tokenizers, models/hf_tokenizer.hpp)");
#else
    auto tok = hf_tokenizer::open(spec.text.tokenizer_json);
    if (!tok) return fail(tok.error().code, file + ": parameters 'tokenizer': " + tok.error().message);
    hf_truncation trunc;
    if (spec.text.truncation) trunc.max_length = static_cast<std::size_t>(spec.text.max_length);
    hf_padding pad;
    pad.length = static_cast<std::size_t>(spec.text.max_length);
    pad.pad_id = spec.text.pad_id ? *spec.text.pad_id : tok->declared_padding() ? tok->declared_padding()->pad_id : 0;
    f.key = spec.key(tok->file_hash(), pad.pad_id);
    f.run = [t = std::move(*tok), trunc, pad, text = spec.text](bytes_view raw, const decode_limits& limits) -> result<tensor> {
      const std::string_view utf8(reinterpret_cast<const char*>(raw.data()), raw.size());
      JITEMBED_ASSIGN_OR_RETURN(auto enc, t.encode(utf8, text.add_special_tokens, trunc, pad, limits));
      const auto L = static_cast<std::size_t>(text.max_length);
      if (enc.ids.size() != L)  // longer: truncation off (or the post-processor's specials alone exceed L)
        return fail(errc::invalid_argument, "tokenizer: the caption has " + std::to_string(enc.ids.size()) + " tokens > " +
                                                std::to_string(L) + (text.truncation ? "" : " (text_truncation is false)"));
      tensor out = tensor::empty(text.with_mask ? shape{2, text.max_length} : shape{text.max_length}, dtype::i64);
      auto* row = out.data<std::int64_t>();
      std::copy(enc.ids.begin(), enc.ids.end(), row);
      if (text.with_mask) std::copy(enc.attention_mask.begin(), enc.attention_mask.end(), row + L);
      return out;
    };
#endif
  } else if (spec.input_modality == modality::text) {
#if !JITEMBED_WITH_SENTENCEPIECE
    return fail(errc::unsupported_format, file + ": parameters 'sentencepiece_model': this program is built without the "
                                               "SentencePiece tokenizer (models/tokenizer.hpp; JITEMBED_WITH_SENTENCEPIECE): Debian's "
                                               "libsentencepiece embeds protobuf 3.14 and cannot share a process with libprotobuf");
#else
    auto tok = t5_tokenizer::open(spec.text);
    if (!tok) return fail(tok.error().code, file + ": parameters 'sentencepiece_model': " + tok.error().message);
    f.key = spec.key(tok->model_hash());
    f.run = [t = std::move(*tok)](bytes_view raw, const decode_limits& limits) { return t.encode(raw, limits); };
#endif
  } else if (spec.input_modality == modality::video) {
    f.key = spec.key();
    f.run = [v = spec.video, p = spec.image](bytes_view raw, const decode_limits& limits) { return preprocess_video(raw, v, p, limits); };
  } else {
    f.key = spec.key();
    f.run = [p = spec.image](bytes_view raw, const decode_limits& limits) { return preprocess_image(raw, p, limits); };
  }
  return f;
}

}  // namespace jitembed::models
