// Unicode for the Hugging Face tokenizer: UTF-8 code points, the character classes and normalizations the tokenizers
// library uses, on utf8proc plus the deltas of hf_unicode_tables.hpp (where the library's tables are of another
// version).
#pragma once

#include <utf8proc.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "jitembed/models/detail/hf_unicode_tables.hpp"

namespace jitembed::models::detail {

// The code point at s[i] (s is valid UTF-8: the tokenizer validates its input), advancing i past it.
inline char32_t next_cp(std::string_view s, std::size_t& i) noexcept {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return ++i, c;
  if (c < 0xE0) {
    const char32_t cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
    i += 2;
    return cp;
  }
  if (c < 0xF0) {
    const char32_t cp = ((c & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 6) |
                        (static_cast<unsigned char>(s[i + 2]) & 0x3Fu);
    i += 3;
    return cp;
  }
  const char32_t cp = ((c & 0x07u) << 18) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 12) |
                      ((static_cast<unsigned char>(s[i + 2]) & 0x3Fu) << 6) |
                      (static_cast<unsigned char>(s[i + 3]) & 0x3Fu);
  i += 4;
  return cp;
}

// Byte length of the UTF-8 sequence whose lead byte is c.
constexpr std::size_t cp_len(unsigned char c) noexcept { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

inline void append_cp(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

inline bool is_ascii(std::string_view s) noexcept {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

template <std::size_t N>
constexpr bool in_ranges(const code_point_range (&r)[N], char32_t c) noexcept {
  const auto* it = std::upper_bound(r, r + N, c, [](char32_t v, const code_point_range& x) { return v < x.lo; });
  return it != r + 0 && (it - 1)->lo <= c && c <= (it - 1)->hi;
}
// A utf8proc predicate with the library's additions and removals.
template <std::size_t A, std::size_t R>
constexpr bool with_delta(bool base, const code_point_range (&add)[A], const code_point_range (&remove)[R],
                          char32_t c) noexcept {
  return base ? !in_ranges(remove, c) : in_ranges(add, c);
}

inline utf8proc_category_t category(char32_t c) noexcept { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

// Rust's char::is_whitespace (the White_Space property).
constexpr bool is_whitespace(char32_t c) noexcept {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}
// BertNormalizer's is_control: Cc, Cf, Co (not \t \n \r), as the unicode_categories crate sees them.
inline bool is_control(char32_t c) noexcept {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const auto k = category(c);
  return with_delta(k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CO, k_control_add,
                    k_control_remove, c);
}
// ASCII punctuation or a P* category (Punctuation, BertPreTokenizer).
inline bool is_punctuation(char32_t c) noexcept {
  if (c < 0x80)
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
  const auto k = category(c);
  return with_delta(k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO, k_punctuation_add, k_punctuation_remove, c);
}
// Rust's char::is_numeric (Nd, Nl, No): the Digits pre-tokenizer.
inline bool is_numeric(char32_t c) noexcept {
  if (c < 0x80) return c >= '0' && c <= '9';
  const auto k = category(c);
  return with_delta(k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO, k_numeric_add,
                    k_numeric_remove, c);
}
// Mn (BertNormalizer's strip_accents) and M* (StripAccents' is_combining_mark).
inline bool is_nonspacing_mark(char32_t c) noexcept {
  return c >= 0x300 &&
         with_delta(category(c) == UTF8PROC_CATEGORY_MN, k_nonspacing_mark_add, k_nonspacing_mark_remove, c);
}
inline bool is_combining_mark(char32_t c) noexcept {
  if (c < 0x300) return false;
  const auto k = category(c);
  return with_delta(k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME, k_mark_add,
                    k_mark_remove, c);
}
// The Rust regex crate's \w (Alphabetic, M, Nd, Pc, Join_Control): the Whitespace pre-tokenizer, single_word tokens.
inline bool is_word(char32_t c) noexcept {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  const auto k = category(c);
  const bool base = (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_NL) || k == UTF8PROC_CATEGORY_PC ||
                    c == 0x200C || c == 0x200D;
  return with_delta(base, k_word_add, k_word_remove, c);
}
// The CJK blocks of BertNormalizer's handle_chinese_chars.
constexpr bool is_chinese_char(char32_t c) noexcept {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Rust's char::to_lowercase, appended to out (U+0130 is the one code point with two).
inline void append_lower(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    return;
  }
  if (c == 0x130) {
    out += "i\xCC\x87";
    return;
  }
  const auto* end = std::end(k_lowercase_delta);
  const auto* it = std::lower_bound(std::begin(k_lowercase_delta), end, c,
                                    [](const std::uint32_t(&e)[2], char32_t v) { return e[0] < v; });
  append_cp(out, it != end && (*it)[0] == c
                     ? (*it)[1]
                     : static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

inline std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) append_lower(out, next_cp(s, i));
  return out;
}

enum class unicode_form : std::uint8_t { nfc, nfd, nfkc, nfkd };

// NFC / NFD / NFKC / NFKD. The code points the library's older tables leave alone (k_normalization_frozen) split
// the text: each is a starter there that neither decomposes nor composes, so normalizing the pieces between them
// apart and keeping them as they are is what the library does. Returns false when utf8proc fails (out of memory).
inline bool normalize(std::string_view s, unicode_form form, std::string& out) {
  if (is_ascii(s)) return out.assign(s), true;  // ASCII is its own normal form in all four
  int options = UTF8PROC_STABLE;
  if (form == unicode_form::nfc || form == unicode_form::nfkc)
    options |= UTF8PROC_COMPOSE;
  else
    options |= UTF8PROC_DECOMPOSE;
  if (form == unicode_form::nfkc || form == unicode_form::nfkd) options |= UTF8PROC_COMPAT;
  out.clear();
  auto run = [&](std::string_view piece) {
    if (piece.empty()) return true;
    utf8proc_uint8_t* buf = nullptr;
    const auto n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(piece.data()),
                     static_cast<utf8proc_ssize_t>(piece.size()), &buf, static_cast<utf8proc_option_t>(options));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> own(buf, &std::free);
    if (n < 0) return false;
    out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
    return true;
  };
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t at = i;
    const char32_t c = next_cp(s, i);
    if (c >= 0x898 && in_ranges(k_normalization_frozen, c)) {
      if (!run(s.substr(start, at - start))) return false;
      out.append(s.substr(at, i - at));
      start = i;
    }
  }
  return run(s.substr(start));
}

// Extended grapheme cluster boundaries (utf8proc's segmentation), as byte offsets: calls f(begin, end) per cluster.
template <class F>
void for_each_grapheme(std::string_view s, F&& f) {
  utf8proc_int32_t state = 0;
  std::size_t begin = 0;
  char32_t prev = 0;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t at = i;
    const char32_t c = next_cp(s, i);
    if (at > 0 && utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev),
                                                   static_cast<utf8proc_int32_t>(c), &state)) {
      f(begin, at);
      begin = at;
    }
    prev = c;
  }
  if (!s.empty()) f(begin, s.size());
}

}  // namespace jitembed::models::detail
