// Typed reads from a parsed tokenizer.json with errors that name the JSON path ("model.vocab",
// "normalizer.normalizers[2]").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "jitembed/core/error.hpp"

namespace jitembed::models::detail {

using hf_json = nlohmann::json;

// Where in the file: the source name and the path of the value being read.
struct json_at {
  const std::string* source;
  std::string path;

  json_at operator[](std::string_view key) const {
    return {source, path.empty() ? std::string(key) : path + "." + std::string(key)};
  }
  json_at operator[](std::size_t i) const { return {source, path + "[" + std::to_string(i) + "]"}; }
  error_info error(errc code, std::string_view what) const {
    return fail(code, "hf_tokenizer: " + *source + ": " + (path.empty() ? std::string("(root)") : path) + ": " +
                          std::string(what));
  }
  error_info invalid(std::string_view what) const { return error(errc::decode_failed, what); }
};

inline const char* json_type(const hf_json& j) noexcept { return j.type_name(); }

// The member `key` of object j, or nullptr when absent (or null when null_is_absent).
inline const hf_json* member(const hf_json& j, std::string_view key, bool null_is_absent = true) {
  const auto it = j.find(key);
  if (it == j.end() || (null_is_absent && it->is_null())) return nullptr;
  return &*it;
}

inline result<const hf_json*> object_of(const hf_json& j, const json_at& at) {
  if (!j.is_object()) return at.invalid(std::string("expected an object, got ") + json_type(j));
  return &j;
}
inline result<const hf_json*> array_of(const hf_json& j, const json_at& at) {
  if (!j.is_array()) return at.invalid(std::string("expected an array, got ") + json_type(j));
  return &j;
}

inline result<std::string> string_of(const hf_json& j, const json_at& at) {
  if (!j.is_string()) return at.invalid(std::string("expected a string, got ") + json_type(j));
  return j.get<std::string>();
}
inline result<bool> bool_of(const hf_json& j, const json_at& at) {
  if (!j.is_boolean()) return at.invalid(std::string("expected a boolean, got ") + json_type(j));
  return j.get<bool>();
}
// A non-negative integer not above max (ids, lengths): huge or negative numbers are refused, not wrapped.
inline result<std::uint64_t> uint_of(const hf_json& j, const json_at& at,
                                     std::uint64_t max = std::numeric_limits<std::uint32_t>::max()) {
  if (!j.is_number_integer()) return at.invalid(std::string("expected a non-negative integer, got ") + json_type(j));
  if (j.is_number_unsigned()) {
    const auto v = j.get<std::uint64_t>();
    if (v > max) return at.error(errc::limit_exceeded, std::to_string(v) + " is above " + std::to_string(max));
    return v;
  }
  const auto v = j.get<std::int64_t>();
  if (v < 0) return at.invalid(std::to_string(v) + " is negative");
  if (static_cast<std::uint64_t>(v) > max)
    return at.error(errc::limit_exceeded, std::to_string(v) + " is above " + std::to_string(max));
  return static_cast<std::uint64_t>(v);
}
inline result<double> number_of(const hf_json& j, const json_at& at) {
  if (!j.is_number()) return at.invalid(std::string("expected a number, got ") + json_type(j));
  return j.get<double>();
}

// Required / optional members: absent (or null) gives `missing field` / the fallback.
inline result<const hf_json*> required(const hf_json& j, std::string_view key, const json_at& at) {
  if (const hf_json* m = member(j, key)) return m;
  return at[key].invalid("missing field");
}
inline result<std::string> required_string(const hf_json& j, std::string_view key, const json_at& at) {
  JITEMBED_ASSIGN_OR_RETURN(const hf_json* m, required(j, key, at));
  return string_of(*m, at[key]);
}
inline result<bool> optional_bool(const hf_json& j, std::string_view key, const json_at& at, bool fallback) {
  const hf_json* m = member(j, key);
  return m ? bool_of(*m, at[key]) : result<bool>(fallback);
}
inline result<std::optional<std::string>> optional_string(const hf_json& j, std::string_view key, const json_at& at) {
  const hf_json* m = member(j, key);
  if (!m) return std::optional<std::string>();
  JITEMBED_ASSIGN_OR_RETURN(auto s, string_of(*m, at[key]));
  return std::optional<std::string>(std::move(s));
}

// The `type` tag of a component; `unsupported` names it when this library does not implement it.
inline result<std::string> type_of(const hf_json& j, const json_at& at) {
  JITEMBED_TRY(object_of(j, at));
  return required_string(j, "type", at);
}
inline error_info unsupported(const json_at& at, std::string_view kind, std::string_view type) {
  return at.error(errc::invalid_argument, "unsupported " + std::string(kind) + " type '" + std::string(type) + "'");
}

}  // namespace jitembed::models::detail
