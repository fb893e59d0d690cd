// The preprocessing a preprocess_spec asks for as one callable and its cache key: what a backend that
// serves a model from a repository config (TorchScript, AOTInductor, a Python callable) runs per row.
// Image and video need only component models_video; text models need the SentencePiece tokenizer
// (models/tokenizer.hpp), compiled in with JITEMBED_WITH_SENTENCEPIECE=1 (else unsupported_format).
#pragma once

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
  if (spec.input_modality == modality::text) {
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
