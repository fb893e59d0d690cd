// The HTTP front's JSON: the core's typed answers written field by field as Triton's HTTP API has them, and a
// repository request's "parameters" read into the core's typed parameters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/core/error.hpp"
#include "jitembed/server/detail/answers.hpp"
#include "jitembed/server/detail/service_core.hpp"
#include "jitembed/server/repository/model_source.hpp"

namespace jitembed::server::detail {

using ojson = nlohmann::ordered_json;

template <class T>
ojson to_ojson(const T& x);

// Collects a typed answer's fields into a JSON object; an empty optional is left out.
struct json_fields {
  ojson& out;
  template <class T>
  void operator()(std::string_view key, const T& x) const {
    if constexpr (is_optional<T>::value) {
      if (x) out[std::string(key)] = to_ojson(*x);
    } else {
      out[std::string(key)] = to_ojson(x);
    }
  }
};

template <class T>
ojson to_ojson(const T& x) {
  if constexpr (std::is_same_v<T, ojson>) {
    return x;
  } else if constexpr (std::is_same_v<T, version_policy>) {
    return ojson::parse(to_json(x).dump());  // Triton's form (config.hpp)
  } else if constexpr (requires { x.value.fields(json_fields{std::declval<ojson&>()}); }) {
    return to_ojson(x.value).dump();  // json_text<T>
  } else if constexpr (requires { x.fields(json_fields{std::declval<ojson&>()}); }) {
    ojson j = ojson::object();
    x.fields(json_fields{j});
    return j;
  } else if constexpr (requires { x.front().first; }) {  // vector<pair<string, T>>: an object
    ojson j = ojson::object();
    for (const auto& [k, v] : x) j[k] = to_ojson(v);
    return j;
  } else if constexpr (requires { x.begin(); } && !std::is_convertible_v<T, std::string_view>) {
    ojson j = ojson::array();
    for (const auto& v : x) j.push_back(to_ojson(v));
    return j;
  } else {
    return ojson(x);
  }
}

// A load / unload request's JSON body ({"parameters": {...}}, or empty) as the core's parameters.
inline result<repository_parameters> repository_request(const service_core& core, const std::string& name,
                                                        const nlohmann::json& body) {
  repository_parameters out;
  const auto it = body.find("parameters");
  if (it == body.end()) return out;
  if (!it->is_object()) {
    if (core.from_repository(name)) return fail(errc::invalid_argument, service_core::repository_parameters_refused(name));
    return fail(errc::invalid_argument, "repository request 'parameters' is not an object");
  }
  for (auto p = it->begin(); p != it->end(); ++p) {
    const auto& v = *p;
    repository_value value = nullptr;
    if (v.is_boolean()) value = v.get<bool>();
    else if (v.is_number_unsigned()) value = v.get<std::uint64_t>();
    else if (v.is_number_integer()) value = v.get<std::int64_t>();
    else if (v.is_number_float()) value = v.get<double>();
    else if (v.is_string()) value = v.get<std::string>();
    else if (!v.is_null()) value = structured_text{v.dump()};
    out.emplace_back(p.key(), std::move(value));
  }
  return out;
}

}  // namespace jitembed::server::detail
