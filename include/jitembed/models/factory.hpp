// Model construction from JSON parameters, apart from the serving instance (server/model_instance.hpp): the
// factory signature the service calls and the emulated-latency wrapper (the reference embedders' factory:
// models/reference_factory.hpp, so that the serving headers do not parse the reference models).
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
