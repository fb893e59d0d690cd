// The model repository's TorchScript backend (platform "pytorch_libtorch" / backend "pytorch"): a
// models::backend_factory that opens <version>/model.pt with torch_model::open. Register it with
// server::repository_backends::add("pytorch_libtorch", models::torch_script_backend()). Component jitembed::torch.
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

// One TorchScript model version from its repository config. Parameters (strings):
//   modality         image | video | text (default image): which sample field feeds it; image models with a
//                    TYPE_UINT8 [H, W, 3] input get the reference JPEG preprocessing (decode + stretch)
//   batch_transform  none | nchw_unit | nchw_signed (default none): [N, H, W, 3] u8 -> [N, 3, H, W] f32
//                    in [0, 1] or [-1, 1] before forward
//   version          the user's version string (part of the fingerprint; default empty)
// Config: max_batch_size >= 1 (forward gets [N, dims...]); one input; outputs in forward's order (Triton's
// OUTPUT__<k> names give the position; else the order declared). The module file is model.pt, or
// default_model_filename. Errors: invalid_argument (settings), not_found (no file), decode_failed (a file
// LibTorch does not load).
inline result<any_model> open_torch_script_model(const backend_config& c) {
  const std::string& file = c.config_file;
  torch_model_options o;
  o.name = c.name;
  for (const auto& [k, v] : c.parameters) {
    if (k == "modality") {
      if (v == "image") o.input_modality = modality::image;
      else if (v == "video") o.input_modality = modality::video;
      else if (v == "text") o.input_modality = modality::text;
      else return fail(errc::invalid_argument, file + ": parameters 'modality' is '" + v + "', not image, video or text");
    } else if (k == "batch_transform") {
      if (v == "nchw_unit") o.batch_transform = torch_image_to_nchw_unit;
      else if (v == "nchw_signed") o.batch_transform = torch_image_to_nchw_signed;
      else if (v != "none") return fail(errc::invalid_argument, file + ": parameters 'batch_transform' is '" + v + "', not none, nchw_unit or nchw_signed");
    } else if (k == "version") {
      o.version = v;
    } else {
      return fail(errc::invalid_argument, file + ": parameters '" + k + "' is not a parameter of the pytorch backend (modality, batch_transform, version)");
    }
  }
  if (c.max_batch_size < 1)
    return fail(errc::invalid_argument, file + ": max_batch_size 0 (a model without a batch dimension) is not supported by the pytorch backend: "
                                               "set max_batch_size >= 1");
  o.max_batch_size = c.max_batch_size;
  if (c.inputs.size() != 1)
    return fail(errc::invalid_argument, file + ": the pytorch backend takes exactly one input, the config declares " + std::to_string(c.inputs.size()));
  if (const auto p = detail::torch_position(c.inputs.front().name); p > 0)
    return fail(errc::invalid_argument, file + ": input '" + c.inputs.front().name + "' is forward's argument " + std::to_string(p) +
                                            "; the one input is INPUT__0");
  auto in = detail::torch_meta(c.inputs.front(), file, "input");
  if (!in) return in.error();
  o.input = std::move(*in);
  if (c.outputs.empty()) return fail(errc::invalid_argument, file + ": no output declared");
  std::vector<std::pair<std::int64_t, tensor_meta>> outs;
  std::size_t positioned = 0;
  for (std::size_t i = 0; i < c.outputs.size(); ++i) {
    auto m = detail::torch_meta(c.outputs[i], file, "output");
    if (!m) return m.error();
    const auto p = detail::torch_position(c.outputs[i].name);
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
  o.dev = c.dev;
  o.hash_parameters = false;  // the repository fingerprints the file's bytes
  const std::string filename = c.model_filename.empty() ? "model.pt" : c.model_filename;
  auto m = torch_model::open(c.version_dir / filename, std::move(o));
  if (!m) return fail(m.error().code, file + ": " + m.error().message);
  return any_model(std::move(*m));
}

inline backend_factory torch_script_backend() { return open_torch_script_model; }

}  // namespace jitembed::models
