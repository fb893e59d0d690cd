// The one JSON string writer: HTTP error bodies, KServe headers and error bodies all escape through it.
// Output is ASCII only, with upper-case \uXXXX escapes (surrogate pairs above U+FFFF), as python-rapidjson
// (tritonclient) and Triton write it, so encoded headers equal theirs byte for byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "jitembed/core/utf8.hpp"

namespace jitembed {

// What append_json_string does with bytes that are not valid UTF-8.
enum class invalid_utf8_policy : std::uint8_t {
  fail,     // return false (out holds a partial string; callers discard it)
  replace,  // write U+FFFD for each invalid byte and go on
};

namespace core::detail {
inline void append_u_escape(std::string& out, std::uint32_t unit) {
  static constexpr char hex[] = "0123456789ABCDEF";
  out += "\\u";
  for (int s = 12; s >= 0; s -= 4) out += hex[(unit >> s) & 0xfu];
}
}  // namespace core::detail

// Appends s as a quoted JSON string literal: `"` and `\` backslash-escaped, \b \f \n \r \t by name, other
// control characters and every non-ASCII code point as \uXXXX. Returns false on invalid UTF-8 under
// invalid_utf8_policy::fail.
inline bool append_json_string(std::string& out, std::string_view s, invalid_utf8_policy policy = invalid_utf8_policy::fail) {
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
      if (policy == invalid_utf8_policy::fail) return false;
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
          core::detail::append_u_escape(out, 0xd800u + (v >> 10));
          core::detail::append_u_escape(out, 0xdc00u + (v & 0x3ffu));
        } else {
          core::detail::append_u_escape(out, static_cast<std::uint32_t>(cp));
        }
    }
  }
  out += '"';
  return true;
}

// s as a quoted JSON string literal, invalid UTF-8 replaced by U+FFFD (for messages quoting any bytes).
inline std::string json_string(std::string_view s) {
  std::string out;
  append_json_string(out, s, invalid_utf8_policy::replace);
  return out;
}

}  // namespace jitembed
