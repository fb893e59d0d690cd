// SentencePiece's precompiled_charsmap (the Precompiled normalizer): a Darts double-array trie of byte strings whose
// values point into a blob of NUL-terminated replacements, read as the spm_precompiled crate reads it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/utf8.hpp"
#include "jitembed/models/detail/hf_json.hpp"
#include "jitembed/models/detail/hf_unicode.hpp"

namespace jitembed::models::detail {

// Standard base64 (with or without padding); nullopt-like false on a character outside the alphabet.
inline bool base64_decode(std::string_view in, std::string& out) {
  static constexpr auto table = [] {
    std::array<std::int8_t, 256> t{};
    for (auto& v : t) v = -1;
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(a[i])] = static_cast<std::int8_t>(i);
    return t;
  }();
  out.clear();
  out.reserve(in.size() / 4 * 3);
  std::uint32_t acc = 0;
  int bits = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '=') {
      for (std::size_t k = i; k < in.size(); ++k)
        if (in[k] != '=') return false;
      break;
    }
    const int v = table[static_cast<unsigned char>(c)];
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

class precompiled_charsmap {
 public:
  static result<precompiled_charsmap> parse(std::string_view b64, const json_at& at) {
    std::string bytes;
    if (!base64_decode(b64, bytes)) return at.invalid("not base64");
    if (bytes.size() < 4) return at.invalid("shorter than its 4-byte trie size");
    std::uint32_t trie_size;
    std::memcpy(&trie_size, bytes.data(), 4);  // little-endian on every platform this builds for
    const std::size_t units = trie_size / 4;
    if (units > (bytes.size() - 4) / 4)
      return at.invalid("trie size " + std::to_string(trie_size) + " is past the end of the charsmap");
    precompiled_charsmap m;
    m.array_.resize(units);
    if (units) std::memcpy(m.array_.data(), bytes.data() + 4, units * 4);
    m.normalized_ = bytes.substr(4 + units * 4);
    if (!is_valid_utf8(m.normalized_)) return at.invalid("the replacement strings are not UTF-8");
    if (m.array_.empty()) return at.invalid("empty trie");
    return m;
  }

  // The replacement of the shortest key that prefixes chunk, if any (the crate takes the first of the results).
  std::optional<std::string_view> transform(std::string_view chunk) const {
    std::size_t pos = 0;
    std::uint32_t unit = array_[0];
    pos ^= offset(unit);
    for (const char ch : chunk) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == 0) break;
      pos ^= c;
      if (pos >= array_.size()) return std::nullopt;
      unit = array_[pos];
      if (label(unit) != c) return std::nullopt;
      pos ^= offset(unit);
      if (pos >= array_.size()) return std::nullopt;
      if ((unit >> 8) & 1u) {
        const std::size_t index = array_[pos] & 0x7FFFFFFFu;
        if (index >= normalized_.size()) return std::nullopt;
        const std::size_t end = normalized_.find('\0', index);
        return std::string_view(normalized_)
            .substr(index, (end == std::string::npos ? normalized_.size() : end) - index);
      }
    }
    return std::nullopt;
  }

  // Per grapheme cluster shorter than 6 bytes, its replacement; otherwise per code point.
  void normalize(std::string& s, std::string& scratch) const {
    scratch.clear();
    bool modified = false;
    for_each_grapheme(s, [&](std::size_t b, std::size_t e) {
      const std::string_view g(s.data() + b, e - b);
      if (g.size() < 6) {
        if (auto r = transform(g)) {
          scratch += *r;
          modified = true;
          return;
        }
      }
      for (std::size_t i = 0; i < g.size();) {
        const std::size_t n = cp_len(static_cast<unsigned char>(g[i]));
        const std::string_view c = g.substr(i, n);
        if (auto r = transform(c))
          scratch += *r, modified = true;
        else
          scratch += c;
        i += n;
      }
    });
    if (modified) s.swap(scratch);
  }

 private:
  static std::size_t offset(std::uint32_t unit) noexcept { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }
  static std::uint32_t label(std::uint32_t unit) noexcept { return unit & ((1u << 31) | 0xFFu); }

  std::vector<std::uint32_t> array_;
  std::string normalized_;
};

}  // namespace jitembed::models::detail
