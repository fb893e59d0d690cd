// The model repository's backends: platform / backend name -> models::backend_factory ("jitembed" always;
// models/torch_repository.hpp adds "pytorch_libtorch" and "torch_aoti").
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/core/error.hpp"
#include "jitembed/models/any_model.hpp"
#include "jitembed/models/backend_config.hpp"
#include "jitembed/models/reference.hpp"
#include "jitembed/models/reference_factory.hpp"
#include "jitembed/net/kserve/datatype.hpp"
#include "jitembed/server/model_instance.hpp"

namespace jitembed::server {

namespace detail {

// The reference models' own settings (parse_reference_params) plus `model`, the reference model to serve.
inline constexpr std::string_view kJitembedBackendParams[] = {"model",        "work",          "image_bucket",    "video_bucket",
                                                              "video_frames", "text_max_length", "text_dim",      "output_dtype"};

inline std::string dims_string(const std::vector<std::int64_t>& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

}  // namespace detail

// backend "jitembed": a reference model (parameter `model`: image-latent | video-latent | text-embed, the
// model's name by default). Declared inputs and outputs must be the model's, else invalid_argument.
struct jitembed_backend_model {
  static result<models::any_model> create(const models::backend_config& c);
};

inline result<models::any_model> jitembed_backend_model::create(const models::backend_config& c) {
  const std::string& file = c.config_file;
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [k, v] : c.parameters) {
    if (std::find(std::begin(detail::kJitembedBackendParams), std::end(detail::kJitembedBackendParams), k) ==
        std::end(detail::kJitembedBackendParams))
      return fail(errc::invalid_argument, file + ": parameters '" + k + "' is not a parameter of the jitembed backend (model, work, image_bucket, "
                                                 "video_bucket, video_frames, text_max_length, text_dim, output_dtype)");
    params[k] = v;
  }
  if (!c.device.is_cpu())
    return fail(errc::invalid_argument, file + ": instance_group kind KIND_GPU: the jitembed backend's reference models run on the CPU here");
  const std::string kind = c.parameters.count("model") ? c.parameters.at("model") : c.name;
  auto o = models::parse_reference_params(params);
  if (!o) return fail(o.error().code, file + ": " + o.error().message);
  auto m = models::reference_model::create(kind, *o);
  if (!m) return fail(m.error().code, file + ": " + m.error().message + " (set parameters 'model')");
  if (!c.inputs.empty()) {
    const std::string_view want = models::to_string(m->input_modality());
    const auto& in = c.inputs.front();
    if (c.inputs.size() != 1 || in.name != want || in.data_type != "TYPE_STRING" || in.dims != std::vector<std::int64_t>{1})
      return fail(errc::invalid_argument, file + ": input '" + in.name + "' " + in.data_type + " " + detail::dims_string(in.dims) +
                                              " disagrees with the model " + kind + ": one input '" + std::string(want) + "' TYPE_STRING [1]");
  }
  for (const auto& out : c.outputs) {
    const auto outs = m->outputs();
    const auto it = std::find_if(outs.begin(), outs.end(), [&](const models::tensor_meta& t) { return t.name == out.name; });
    if (it == outs.end()) return fail(errc::invalid_argument, file + ": output '" + out.name + "' is not an output of the model " + kind);
    const std::vector<std::int64_t> dims(it->shape.begin(), it->shape.end());
    if (out.type != it->type || out.dims != dims)
      return fail(errc::invalid_argument, file + ": output '" + out.name + "' " + out.data_type + " " + detail::dims_string(out.dims) +
                                              " disagrees with the model " + kind + ": " +
                                              "TYPE_" + std::string(net::kserve::to_string(net::kserve::from_dtype(it->type))) + " " +
                                              detail::dims_string(dims));
  }
  return m;
}

// platform "torch_aoti" until models::torch_aoti_backend() (component jitembed::torch) is added.
inline result<models::any_model> no_torch_aoti_backend(const models::backend_config& c) {
  return fail(errc::unsupported_format, c.config_file + ": platform 'torch_aoti': no torch_aoti backend linked "
                                                        "(a program built without the torch component)");
}

// The backends a model_repository chooses from, by the config's backend (or platform) name.
class repository_backends {
 public:
  // "jitembed" and the "torch_aoti" placeholder.
  repository_backends() {
    add("jitembed", jitembed_backend_model::create);
    add("torch_aoti", no_torch_aoti_backend);
  }

  // Registers (or replaces) the backend for `name` (a platform or backend name).
  repository_backends& add(std::string name, models::backend_factory f) {
    factories_[std::move(name)] = std::move(f);
    return *this;
  }

  // The backend for a config's platform / backend: backend "pytorch" and platform "pytorch_libtorch" are
  // one (Triton's spelling of each); both given must agree. Errors: invalid_argument (neither given, or
  // they disagree), unsupported_format (nothing registered for it).
  result<std::pair<std::string, models::backend_factory>> resolve(std::string_view platform, std::string_view backend,
                                                                   const std::string& file) const {
    const auto canonical = [](std::string_view n) -> std::string { return n == "pytorch" ? "pytorch_libtorch" : std::string(n); };
    if (platform.empty() && backend.empty()) return fail(errc::invalid_argument, file + ": neither 'platform' nor 'backend' is set");
    if (!platform.empty() && !backend.empty() && canonical(platform) != canonical(backend))
      return fail(errc::invalid_argument, file + ": platform '" + std::string(platform) + "' and backend '" + std::string(backend) + "' disagree");
    const std::string key = canonical(backend.empty() ? platform : backend);
    const auto it = factories_.find(key);
    if (it == factories_.end()) {
      std::string known;
      for (const auto& [k, f] : factories_) known += (known.empty() ? "" : ", ") + k;
      return fail(errc::unsupported_format, file + ": unknown " + std::string(backend.empty() ? "platform" : "backend") + " '" +
                                                std::string(backend.empty() ? platform : backend) + "' (linked: " + known + ")");
    }
    return std::pair{key, it->second};
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [k, f] : factories_) out.push_back(k);
    return out;
  }

 private:
  std::map<std::string, models::backend_factory> factories_;
};

}  // namespace jitembed::server
