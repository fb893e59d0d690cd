// server::split_parameters: flat configuration parameters split by the table of serving keys into the
// batcher's and the model's (here, not in models/, which cannot name model_config's keys).
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include <nlohmann/json.hpp>

#include "jitembed/server/config.hpp"

namespace jitembed::server {

struct parameter_split {
  nlohmann::json serving = nlohmann::json::object();  // the serving keys, values as given (serving_value types them)
  nlohmann::json model = nlohmann::json::object();    // every other key: the model factory's parameters
};

// Splits the object `params`; keys in `reserved` (the caller's own, such as "version") go to neither side.
// A non-object `params` splits into two empty objects (callers check the type where it is an error).
inline parameter_split split_parameters(const nlohmann::json& params,
                                        std::initializer_list<std::string_view> reserved = {}) {
  parameter_split out;
  if (!params.is_object()) return out;
  for (auto it = params.begin(); it != params.end(); ++it) {
    const std::string& k = it.key();
    if (std::find(reserved.begin(), reserved.end(), k) != reserved.end()) continue;
    (is_serving_key(k) ? out.serving : out.model)[k] = *it;
  }
  return out;
}

}  // namespace jitembed::server
