// A compact JSON writer that reproduces tritonclient's bytes (python-rapidjson: ASCII-only output with
// upper-case \uXXXX escapes, shortest round-trip numbers), so encoded headers equal tritonclient's.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "jitembed/core/error.hpp"
#include "jitembed/core/json_string.hpp"

namespace jitembed::net::kserve::detail {

using ordered_json = nlohmann::ordered_json;

// Appends s as a JSON string literal (core/json_string.hpp). Invalid UTF-8 fails unless replace_invalid
// (then U+FFFD).
inline bool write_json_string(std::string& out, std::string_view s, bool replace_invalid = false) {
  return append_json_string(out, s, replace_invalid ? invalid_utf8_policy::replace : invalid_utf8_policy::fail);
}

// Shortest round-trip form with a ".0" on integral values ("1.0", "1e+16", "0.10000000149011612"),
// as Python's repr and nlohmann both write it. Non-finite values have no JSON form: returns false.
inline bool write_json_double(std::string& out, double v) {
  if (!std::isfinite(v)) return false;
  out += ordered_json(v).dump();
  return true;
}

// Writes any JSON value compactly, keys in stored order. Fails on non-finite numbers, invalid UTF-8,
// or nesting deeper than max_depth.
inline result<void> write_json_value(std::string& out, const ordered_json& v, std::size_t max_depth = 32) {
  if (max_depth == 0) return fail(errc::limit_exceeded, "JSON value nested too deeply");
  switch (v.type()) {
    case ordered_json::value_t::null: out += "null"; return {};
    case ordered_json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; return {};
    case ordered_json::value_t::number_integer: out += std::to_string(v.get<std::int64_t>()); return {};
    case ordered_json::value_t::number_unsigned: out += std::to_string(v.get<std::uint64_t>()); return {};
    case ordered_json::value_t::number_float:
      if (!write_json_double(out, v.get<double>())) return fail(errc::invalid_argument, "JSON cannot carry NaN or infinity");
      return {};
    case ordered_json::value_t::string:
      if (!write_json_string(out, v.get_ref<const std::string&>())) return fail(errc::invalid_utf8, "JSON string is not valid UTF-8");
      return {};
    case ordered_json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ',';
        first = false;
        JITEMBED_TRY(write_json_value(out, e, max_depth - 1));
      }
      out += ']';
      return {};
    }
    case ordered_json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ',';
        first = false;
        if (!write_json_string(out, it.key())) return fail(errc::invalid_utf8, "JSON key is not valid UTF-8");
        out += ':';
        JITEMBED_TRY(write_json_value(out, it.value(), max_depth - 1));
      }
      out += '}';
      return {};
    }
    case ordered_json::value_t::binary:
    case ordered_json::value_t::discarded: break;
  }
  return fail(errc::invalid_argument, "JSON value of a type JSON text cannot carry");
}

}  // namespace jitembed::net::kserve::detail
