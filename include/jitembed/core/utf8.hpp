// The one UTF-8 validator (RFC 3629, strict): used by the text codec, the format, KServe and the JSON
// string writer (core/json_string.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed {

// Why one UTF-8 sequence is invalid.
enum class utf8_status : std::uint8_t {
  ok,
  unexpected_continuation,  // a continuation byte (0x80..0xBF) where a sequence starts
  overlong,                 // a code point encoded with more bytes than it needs (C0, C1, E0 80.., F0 80..)
  surrogate,                // U+D800..U+DFFF (ED A0..)
  above_max,                // above U+10FFFF (F4 90.., F5..FF)
  truncated,                // the input ends inside the sequence
  bad_continuation,         // a byte after the lead is not a continuation byte
};

// One decoded sequence: the code point, its length, and for an invalid one why and where (the offset of
// the byte that is wrong relative to the lead: 0 for the lead, k for a bad k-th continuation byte).
struct utf8_sequence {
  utf8_status status = utf8_status::ok;
  std::uint32_t code_point = 0;
  std::uint8_t length = 0;      // bytes consumed when ok
  std::uint8_t bad_offset = 0;  // where the error is, relative to the lead byte
};

// Decodes the sequence starting at p[0] (n >= 1 bytes available).
constexpr utf8_sequence decode_utf8(const unsigned char* p, std::size_t n) noexcept {
  const unsigned char c = p[0];
  if (c < 0x80) return {utf8_status::ok, c, 1, 0};
  if (c < 0xC0) return {utf8_status::unexpected_continuation, 0, 0, 0};
  if (c < 0xC2) return {utf8_status::overlong, 0, 0, 0};
  std::uint8_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  utf8_status narrow = utf8_status::ok;  // what a second byte outside [lo, hi] (but a continuation) means
  std::uint32_t cp;
  if (c < 0xE0) {
    len = 2, cp = c & 0x1Fu;
  } else if (c < 0xF0) {
    len = 3, cp = c & 0x0Fu;
    if (c == 0xE0) lo = 0xA0, narrow = utf8_status::overlong;
    if (c == 0xED) hi = 0x9F, narrow = utf8_status::surrogate;
  } else if (c < 0xF5) {
    len = 4, cp = c & 0x07u;
    if (c == 0xF0) lo = 0x90, narrow = utf8_status::overlong;
    if (c == 0xF4) hi = 0x8F, narrow = utf8_status::above_max;
  } else {
    return {utf8_status::above_max, 0, 0, 0};
  }
  for (std::uint8_t k = 1; k < len; ++k) {
    if (k >= n) return {utf8_status::truncated, 0, 0, 0};
    const unsigned char d = p[k];
    if ((d & 0xC0) != 0x80) return {utf8_status::bad_continuation, 0, 0, k};
    if (k == 1 && (d < lo || d > hi)) return {narrow, 0, 0, 0};
    cp = (cp << 6) | (d & 0x3Fu);
  }
  return {utf8_status::ok, cp, len, 0};
}

// The code point at s[i], advancing i past it; -1 (i unchanged) when the sequence there is invalid.
inline std::int32_t next_code_point(std::string_view s, std::size_t& i) noexcept {
  const auto seq = decode_utf8(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i);
  if (seq.status != utf8_status::ok) return -1;
  i += seq.length;
  return static_cast<std::int32_t>(seq.code_point);
}

namespace core::detail {

// Offset of the first invalid sequence (s.size() when there is none) and what is wrong there.
inline std::size_t find_invalid_utf8(const unsigned char* p, std::size_t n, utf8_sequence& bad) noexcept {
  std::size_t i = 0;
  while (i < n) {
    // ASCII fast path: 16 bytes per step while no byte has its top bit set.
    while (i + 16 <= n) {
      std::uint64_t a, b;
      std::memcpy(&a, p + i, 8);
      std::memcpy(&b, p + i + 8, 8);
      if (((a | b) & 0x8080808080808080ull) != 0) break;
      i += 16;
    }
    if (i >= n) break;
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const auto seq = decode_utf8(p + i, n - i);
    if (seq.status != utf8_status::ok) {
      bad = seq;
      return i;
    }
    i += seq.length;
  }
  return n;
}

inline const char* utf8_what(utf8_status s, unsigned char lead) noexcept {
  switch (s) {
    case utf8_status::unexpected_continuation: return "unexpected continuation byte";
    case utf8_status::overlong:
      return lead < 0xE0 ? "overlong 2-byte lead" : lead < 0xF0 ? "overlong 3-byte sequence, lead" : "overlong 4-byte sequence, lead";
    case utf8_status::surrogate: return "surrogate code point, lead";
    case utf8_status::above_max: return "code point above U+10FFFF, lead";
    case utf8_status::truncated: return "truncated sequence, lead";
    case utf8_status::bad_continuation: return "invalid continuation byte";
    case utf8_status::ok: break;
  }
  return "valid";
}

}  // namespace core::detail

// Whether s is valid UTF-8 (no allocation, no message).
inline bool is_valid_utf8(bytes_view s) noexcept {
  utf8_sequence bad;
  return core::detail::find_invalid_utf8(reinterpret_cast<const unsigned char*>(s.data()), s.size(), bad) == s.size();
}
inline bool is_valid_utf8(std::string_view s) noexcept { return is_valid_utf8(as_bytes_view(s)); }

// Strict UTF-8 (RFC 3629): rejects stray continuation bytes, overlong forms, UTF-16 surrogates
// (U+D800..U+DFFF), code points above U+10FFFF and truncated sequences, with errc::invalid_utf8 and a
// message naming the byte and the offset where the offending sequence starts (for a bad continuation
// byte: that byte and its offset), e.g. "utf8: overlong 2-byte lead 0xC0 at offset 3".
inline result<void> validate_utf8(bytes_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  utf8_sequence bad;
  const std::size_t at = core::detail::find_invalid_utf8(p, s.size(), bad);
  if (at == s.size()) return {};
  const std::size_t where = at + bad.bad_offset;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(p[where]));
  return fail(errc::invalid_utf8,
              std::string("utf8: ") + core::detail::utf8_what(bad.status, p[at]) + " " + hex + " at offset " + std::to_string(where));
}
inline result<void> validate_utf8(std::string_view s) { return validate_utf8(as_bytes_view(s)); }

}  // namespace jitembed
