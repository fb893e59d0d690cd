// The model repository's torch backends: TorchScript (platform "pytorch_libtorch" / backend "pytorch",
// <version>/model.pt) and AOTInductor (platform "torch_aoti", <version>/model.pt2), models::backend_factory
// values that open the file with torch_model::open and preprocess as the config's parameters say
// (models/preprocess.hpp; text models need models/tokenizer.hpp, compiled in with JITEMBED_WITH_SENTENCEPIECE=1).
// Register both: repository_backends::add("pytorch_libtorch", models::torch_script_backend()) and
// add("torch_aoti", models::torch_aoti_backend()). Component jitembed::torch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/models/any_model.hpp"
#include "jitembed/models/backend_config.hpp"
#include "jitembed/models/model.hpp"
#include "jitembed/models/preprocess.hpp"
#include "jitembed/models/preprocess_function.hpp"
#include "jitembed/models/torch_adapter.hpp"

namespace jitembed::models {

namespace detail {

// "OUTPUT__3" -> 3 (Triton's TorchScript naming: the position in forward's inputs / outputs); -1: no suffix.
inline std::int64_t torch_position(std::string_view name) {
  const auto p = name.rfind("__");
  if (p == std::string_view::npos || p + 2 >= name.size() || name.size() - p - 2 > 6) return -1;
  std::int64_t v = 0;
  for (char c : name.substr(p + 2)) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

inline result<tensor_meta> torch_meta(const backend_tensor& t, const std::string& file, std::string_view kind) {
  if (!t.type)
    return fail(errc::invalid_argument, file + ": " + std::string(kind) + " '" + t.name + "' data_type " + t.data_type +
                                            " has no tensor type here (a TorchScript model takes and returns tensors)");
  return tensor_meta{t.name, *t.type, t.dims};
}

}  // namespace detail

namespace detail {

inline constexpr std::string_view kTorchOwnParameters[] = {"batch_transform", "version"};

inline bool is_torch_parameter(const std::string& k) {
  for (auto p : kTorchOwnParameters)
    if (k == p) return true;
  for (auto p : kPreprocessParameters)
    if (k == p) return true;
  return false;
}

// The preprocess a spec asks for, into the options (and its key); text models load their tokenizer here.
inline result<void> set_preprocess(const preprocess_spec& spec, torch_model_options& o, const std::string& file) {
  if (!spec.active) return {};
  if (o.batch_transform)
    return fail(errc::invalid_argument, file + ": parameters 'batch_transform' applies to TYPE_UINT8 [H, W, 3] inputs; this input is "
                                               "made by the image / video / text preprocessing already");
  JITEMBED_ASSIGN_OR_RETURN(auto f, make_preprocess_function(spec, file));
  o.preprocess_key = std::move(f.key);
  o.preprocess = std::move(f.run);
  return {};
}

// One model version of a torch backend (TorchScript or AOTInductor) from its repository config.
inline result<any_model> open_torch_repository_model(const backend_config& c, bool aoti) {
  const std::string& file = c.config_file;
  const std::string backend = aoti ? "torch_aoti" : "pytorch";
  torch_model_options o;
  o.name = c.name;
  for (const auto& [k, v] : c.parameters) {
    if (k == "batch_transform") {
      if (v == "nchw_unit") o.batch_transform = torch_image_to_nchw_unit;
      else if (v == "nchw_signed") o.batch_transform = torch_image_to_nchw_signed;
      else if (v != "none") return fail(errc::invalid_argument, file + ": parameters 'batch_transform' is '" + v + "', not none, nchw_unit or nchw_signed");
    } else if (k == "version") {
      o.version = v;
    } else if (!is_torch_parameter(k)) {
      std::string known;
      for (auto p : kTorchOwnParameters) known += std::string(known.empty() ? "" : ", ") + std::string(p);
      for (auto p : kPreprocessParameters) known += ", " + std::string(p);
      return fail(errc::invalid_argument, file + ": parameters '" + k + "' is not a parameter of the " + backend + " backend (" + known + ")");
    }
  }
  if (c.max_batch_size < 1)
    return fail(errc::invalid_argument, file + ": max_batch_size 0 (a model without a batch dimension) is not supported by the " + backend +
                                               " backend: set max_batch_size >= 1");
  o.max_batch_size = c.max_batch_size;
  if (c.inputs.size() != 1)
    return fail(errc::invalid_argument, file + ": the " + backend + " backend takes exactly one input, the config declares " + std::to_string(c.inputs.size()));
  if (const auto p = torch_position(c.inputs.front().name); p > 0)
    return fail(errc::invalid_argument, file + ": input '" + c.inputs.front().name + "' is forward's argument " + std::to_string(p) +
                                            "; the one input is INPUT__0");
  auto in = torch_meta(c.inputs.front(), file, "input");
  if (!in) return in.error();
  auto spec = preprocess_spec::parse(c.parameters, in->type, std::vector<std::int64_t>(in->shape.begin(), in->shape.end()),
                                     c.version_dir.parent_path(), file);
  if (!spec) return spec.error();
  o.input_modality = spec->input_modality;
  // No `modality`: Triton's tensor model, served through its declared input only (no reference JPEG decode).
  o.tensor_input_only = !spec->active && !c.parameters.count("modality");
  o.input = std::move(*in);
  if (c.outputs.empty()) return fail(errc::invalid_argument, file + ": no output declared");
  std::vector<std::pair<std::int64_t, tensor_meta>> outs;
  std::size_t positioned = 0;
  for (std::size_t i = 0; i < c.outputs.size(); ++i) {
    auto m = torch_meta(c.outputs[i], file, "output");
    if (!m) return m.error();
    const auto p = torch_position(c.outputs[i].name);
    if (p >= 0) ++positioned;
    outs.emplace_back(p >= 0 ? p : static_cast<std::int64_t>(i), std::move(*m));
  }
  if (positioned == c.outputs.size()) {
    std::sort(outs.begin(), outs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t i = 0; i < outs.size(); ++i)
      if (outs[i].first != static_cast<std::int64_t>(i))
        return fail(errc::invalid_argument, file + ": outputs named <name>__<k> must number 0.." + std::to_string(outs.size() - 1) +
                                                ", output '" + outs[i].second.name + "' is " + std::to_string(outs[i].first));
  } else if (positioned != 0) {
    return fail(errc::invalid_argument, file + ": some outputs are named <name>__<k> and some are not");
  }
  for (auto& [p, m] : outs) o.outputs.push_back(std::move(m));
  JITEMBED_TRY(set_preprocess(*spec, o, file));
  o.device = c.device;
  o.hash_parameters = false;  // the repository fingerprints the file's bytes
  o.file_format = aoti ? torch_file_format::aoti_package : torch_file_format::torchscript;
  const std::string filename = c.model_filename.empty() ? (aoti ? "model.pt2" : "model.pt") : c.model_filename;
  auto m = torch_model::open(c.version_dir / filename, std::move(o));
  if (!m) return fail(m.error().code, file + ": " + m.error().message);
  return any_model(std::move(*m));
}

}  // namespace detail

// One TorchScript model version from its repository config (platform "pytorch_libtorch" / backend
// "pytorch"; the module file is model.pt, or default_model_filename). Parameters (strings):
//   modality         image | video | text: preprocessing is opt-in; without it the model is served as Triton
//                    serves it, through its declared input tensor only. With it, raw fields of that kind
//                    are preprocessed (and the declared input tensor is accepted too)
//   preprocessing    image_resize, image_normalize, image_mean, image_std (image / video models with a
//                    TYPE_FP32 [3, H, W] / [3, T, H, W] input), video_frames, video_frame_stride, and
//                    tokenizer (a Hugging Face tokenizer.json) or sentencepiece_model, text_max_length,
//                    text_padding, text_truncation, text_append_eos, text_pad_id, text_add_special_tokens
//                    (text models with a TYPE_INT64 [2, L] input): preprocess_spec::parse, docs/models.md.
//                    Image models with a TYPE_UINT8 [H, W, 3] input get the reference JPEG preprocessing
//                    (decode + stretch) instead
//   batch_transform  none | nchw_unit | nchw_signed (default none): [N, H, W, 3] u8 -> [N, 3, H, W] f32
//                    in [0, 1] or [-1, 1] before forward (u8 inputs only)
//   version          the user's version string (part of the fingerprint; default empty)
// Config: max_batch_size >= 1 (forward gets [N, dims...]); one input; outputs in forward's order (Triton's
// OUTPUT__<k> names give the position; else the order declared), in the declared dtype (floating outputs
// are cast). Errors: invalid_argument (settings, naming the parameter and the file), not_found (no model
// file, no tokenizer file), decode_failed (a file LibTorch or the tokenizer does not load).
inline result<any_model> open_torch_script_model(const backend_config& c) { return detail::open_torch_repository_model(c, false); }

// One AOTInductor package version (platform "torch_aoti"; model.pt2, or default_model_filename): the same
// parameters and errors as open_torch_script_model. The package must be compiled for the instances' device
// (CPU packages for KIND_CPU), with a dynamic batch dimension up to max_batch_size.
inline result<any_model> open_torch_aoti_model(const backend_config& c) { return detail::open_torch_repository_model(c, true); }

inline backend_factory torch_script_backend() { return open_torch_script_model; }
inline backend_factory torch_aoti_backend() { return open_torch_aoti_model; }

}  // namespace jitembed::models
