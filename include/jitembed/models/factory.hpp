// Model construction from JSON parameters, apart from the serving instance (server/model_instance.hpp): the
// factory signature the service calls, the reference embedders' parameters and the emulated-latency wrapper.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/any_model.hpp"
#include "jitembed/models/emulated_latency.hpp"
#include "jitembed/models/reference.hpp"

namespace jitembed::models {

// Makes a model from its name and JSON parameters (model_config::params or a load request's parameters).
using model_factory = std::function<result<any_model>(std::string_view name, const nlohmann::json& params)>;

namespace detail {

inline result<int> int_param(const nlohmann::json& p, std::string_view key) {
  const auto it = p.find(key);
  if (it == p.end()) return 0;
  if (it->is_number_integer()) return static_cast<int>(it->get<std::int64_t>());
  if (it->is_string()) {  // Triton's load parameters are strings
    const auto& s = it->get_ref<const std::string&>();
    try {
      std::size_t used = 0;
      const int v = std::stoi(s, &used);
      if (used == s.size()) return v;
    } catch (...) {  // not a ladder: stoi's invalid_argument / out_of_range mean "not an integer" below
    }
  }
  return fail(errc::invalid_argument, "model parameter '" + std::string(key) + "' is not an integer");
}

}  // namespace detail

// The reference embedders; params: work, image_bucket, video_bucket, video_frames, text_max_length,
// text_dim (integers or integer strings), output_dtype ("f32" | "bf16" | "f16"). Other keys are ignored
// (batcher settings travel in the same object).
inline result<reference_options> parse_reference_params(const nlohmann::json& params) {
  reference_options o;
  if (!params.is_null() && !params.is_object()) return fail(errc::invalid_argument, "model parameters are not an object");
  if (params.is_object()) {
    const std::pair<const char*, int*> ints[] = {{"work", &o.work},
                                                 {"image_bucket", &o.image_bucket},
                                                 {"video_bucket", &o.video_bucket},
                                                 {"video_frames", &o.video_frames},
                                                 {"text_max_length", &o.text_max_length},
                                                 {"text_dim", &o.text_dim}};
    for (auto [k, dst] : ints) {
      JITEMBED_ASSIGN_OR_RETURN(auto v, detail::int_param(params, k));
      *dst = v;
    }
    if (auto it = params.find("output_dtype"); it != params.end()) {
      const auto dt = it->is_string() ? dtype_from_string(it->get<std::string>()) : std::nullopt;
      if (!dt) return fail(errc::invalid_argument, "model parameter 'output_dtype' must be \"f32\", \"bf16\" or \"f16\"");
      o.output_dtype = *dt;
    }
  }
  return o;
}

// The service's default model_factory: reference_model::create(name, parse_reference_params(params)).
inline result<any_model> reference_factory(std::string_view name, const nlohmann::json& params) {
  JITEMBED_ASSIGN_OR_RETURN(auto o, parse_reference_params(params));
  return reference_model::create(name, o);
}

// The emulated latency that params ask for: sleep_us per batch, sleep_us_per_row per row (integers or
// integer strings, >= 0; 0 or absent: none).
inline result<latency_options> parse_latency_params(const nlohmann::json& params) {
  latency_options o;
  if (!params.is_object()) return o;
  const std::pair<const char*, std::chrono::microseconds*> keys[] = {{"sleep_us", &o.per_batch}, {"sleep_us_per_row", &o.per_item}};
  for (auto [k, dst] : keys) {
    JITEMBED_ASSIGN_OR_RETURN(auto v, detail::int_param(params, k));
    if (v < 0) return fail(errc::invalid_argument, "model parameter '" + std::string(k) + "' is negative");
    *dst = std::chrono::microseconds(v);
  }
  return o;
}

// `m`, sleeping as params ask (parse_latency_params); `m` itself when they ask for nothing. The
// fingerprint (version()) stays the model's: sleeping changes no output.
inline result<any_model> with_latency_params(any_model m, const nlohmann::json& params) {
  JITEMBED_ASSIGN_OR_RETURN(auto o, parse_latency_params(params));
  if (o.per_batch.count() == 0 && o.per_item.count() == 0) return m;
  return any_model(emulated_latency(std::move(m), o));
}

}  // namespace jitembed::models
