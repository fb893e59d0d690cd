// The service's default model factory: the reference embedders (models/reference.hpp) built from their JSON
// parameters.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "jitembed/core/dtype.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/models/any_model.hpp"
#include "jitembed/models/factory.hpp"
#include "jitembed/models/reference.hpp"

namespace jitembed::models {

// The reference embedders; params: work, image_bucket, video_bucket, video_frames, text_max_length,
// text_dim (integers or integer strings), output_dtype ("f32" | "bf16" | "f16"). Other keys are ignored
// (batcher settings travel in the same object).
inline result<reference_options> parse_reference_params(const nlohmann::json& params) {
  reference_options o;
  if (!params.is_null() && !params.is_object())
    return fail(errc::invalid_argument, "model parameters are not an object");
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
      if (!dt)
        return fail(errc::invalid_argument, "model parameter 'output_dtype' must be \"f32\", \"bf16\" or \"f16\"");
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

}  // namespace jitembed::models
