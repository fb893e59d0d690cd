// A compact JSON writer that reproduces tritonclient's bytes (python-rapidjson: ASCII-only output with
// upper-case \uXXXX escapes, shortest round-trip numbers), so encoded headers equal tritonclient's.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "jitembed/core/error.hpp"

namespace jitembed::net::kserve::detail {

using ordered_json = nlohmann::ordered_json;

inline void append_u_escape(std::string& out, std::uint32_t unit) {
  static constexpr char hex[] = "0123456789ABCDEF";
  out += "\\u";
  for (int s = 12; s >= 0; s -= 4) out += hex[(unit >> s) & 0xfu];
}

// Decodes one UTF-8 sequence at s[i]; returns the code point and advances i, or -1 if invalid.
inline std::int32_t next_code_point(std::string_view s, std::size_t& i) noexcept {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int len = 0;
  std::uint32_t cp = 0;
  std::uint32_t min = 0;
  if ((b0 & 0xe0u) == 0xc0u) {
    len = 2, cp = b0 & 0x1fu, min = 0x80;
  } else if ((b0 & 0xf0u) == 0xe0u) {
    len = 3, cp = b0 & 0x0fu, min = 0x800;
  } else if ((b0 & 0xf8u) == 0xf0u) {
    len = 4, cp = b0 & 0x07u, min = 0x10000;
  } else {
    return -1;
  }
  if (s.size() - i < static_cast<std::size_t>(len)) return -1;
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
    if ((b & 0xc0u) != 0x80u) return -1;
    cp = (cp << 6) | (b & 0x3fu);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
  i += static_cast<std::size_t>(len);
  return static_cast<std::int32_t>(cp);
}

inline bool is_valid_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    if (next_code_point(s, i) < 0) return false;
  }
  return true;
}

// Appends s as a JSON string literal. Invalid UTF-8 fails unless replace_invalid (then U+FFFD).
inline bool write_json_string(std::string& out, std::string_view s, bool replace_invalid = false) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80) {
      if (c == '"' || c == '\\') out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    std::int32_t cp = next_code_point(s, i);
    if (cp < 0) {
      if (!replace_invalid) return false;
      cp = 0xfffd;
      ++i;
    }
    switch (cp) {
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (cp >= 0x10000) {
          const auto v = static_cast<std::uint32_t>(cp) - 0x10000u;
          append_u_escape(out, 0xd800u + (v >> 10));
          append_u_escape(out, 0xdc00u + (v & 0x3ffu));
        } else {
          append_u_escape(out, static_cast<std::uint32_t>(cp));
        }
    }
  }
  out += '"';
  return true;
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
