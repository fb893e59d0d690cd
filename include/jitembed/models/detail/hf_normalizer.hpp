// The normalizers of tokenizer.json ("normalizer"): parsed once into a tree, applied to a string in place.
// Types: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Strip, Replace (String / Regex), Prepend,
// BertNormalizer, Nmt, Precompiled (SentencePiece's charsmap), ByteLevel. Anything else: invalid_argument naming the
// type.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/models/detail/hf_json.hpp"
#include "jitembed/models/detail/hf_precompiled.hpp"
#include "jitembed/models/detail/hf_regex.hpp"
#include "jitembed/models/detail/hf_unicode.hpp"

namespace jitembed::models::detail {

// GPT-2's byte -> printable code point table (bytes_char in the library).
inline const char32_t* byte_to_unicode() noexcept {
  static const auto table = [] {
    std::array<char32_t, 256> t{};
    char32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? static_cast<char32_t>(b) : 256 + n++;
    }
    return t;
  }();
  return table.data();
}
// The UTF-8 of byte_to_unicode()[b] for every byte, precomputed: the hot loop of byte-level models appends these.
inline const std::string* byte_level_strings() noexcept {
  static const auto table = [] {
    std::array<std::string, 256> t;
    for (int b = 0; b < 256; ++b) append_cp(t[b], byte_to_unicode()[b]);
    return t;
  }();
  return table.data();
}
inline void append_byte_level(std::string& out, std::string_view s) {
  const std::string* t = byte_level_strings();
  for (const char c : s) out += t[static_cast<unsigned char>(c)];
}

struct hf_normalizer {
  enum class kind : std::uint8_t {
    sequence,
    nfc,
    nfd,
    nfkc,
    nfkd,
    lowercase,
    strip_accents,
    strip,
    replace,
    prepend,
    bert,
    nmt,
    precompiled,
    byte_level
  };
  kind k = kind::sequence;
  std::vector<hf_normalizer> children;  // sequence
  bool left = false, right = false;     // strip; bert: clean_text (left), lowercase (right)
  bool chinese = false;                 // bert: handle_chinese_chars
  std::optional<bool> strip_accents;    // bert
  hf_regex pattern;                     // replace
  std::string content;                  // replace: content; prepend: the prefix
  std::shared_ptr<const precompiled_charsmap> charsmap;

  static result<hf_normalizer> parse(const hf_json& j, const json_at& at) {
    JITEMBED_ASSIGN_OR_RETURN(const std::string type, type_of(j, at));
    hf_normalizer n;
    if (type == "Sequence") {
      JITEMBED_ASSIGN_OR_RETURN(const hf_json* list, required(j, "normalizers", at));
      JITEMBED_TRY(array_of(*list, at["normalizers"]));
      for (std::size_t i = 0; i < list->size(); ++i) {
        JITEMBED_ASSIGN_OR_RETURN(auto c, parse((*list)[i], at["normalizers"][i]));
        n.children.push_back(std::move(c));
      }
    } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
      n.k = type == "NFC" ? kind::nfc : type == "NFD" ? kind::nfd : type == "NFKC" ? kind::nfkc : kind::nfkd;
    } else if (type == "Lowercase") {
      n.k = kind::lowercase;
    } else if (type == "StripAccents") {
      n.k = kind::strip_accents;
    } else if (type == "Nmt") {
      n.k = kind::nmt;
    } else if (type == "ByteLevel") {
      n.k = kind::byte_level;
    } else if (type == "Strip") {
      n.k = kind::strip;
      JITEMBED_ASSIGN_OR_RETURN(n.left, optional_bool(j, "strip_left", at, true));
      JITEMBED_ASSIGN_OR_RETURN(n.right, optional_bool(j, "strip_right", at, true));
    } else if (type == "Prepend") {
      n.k = kind::prepend;
      JITEMBED_ASSIGN_OR_RETURN(n.content, required_string(j, "prepend", at));
    } else if (type == "Replace") {
      n.k = kind::replace;
      JITEMBED_ASSIGN_OR_RETURN(n.pattern, parse_pattern(j, at));
      JITEMBED_ASSIGN_OR_RETURN(n.content, required_string(j, "content", at));
    } else if (type == "BertNormalizer") {
      n.k = kind::bert;
      JITEMBED_ASSIGN_OR_RETURN(n.left, optional_bool(j, "clean_text", at, true));
      JITEMBED_ASSIGN_OR_RETURN(n.chinese, optional_bool(j, "handle_chinese_chars", at, true));
      JITEMBED_ASSIGN_OR_RETURN(n.right, optional_bool(j, "lowercase", at, true));
      if (const hf_json* s = member(j, "strip_accents")) {
        JITEMBED_ASSIGN_OR_RETURN(bool v, bool_of(*s, at["strip_accents"]));
        n.strip_accents = v;
      }
    } else if (type == "Precompiled") {
      n.k = kind::precompiled;
      JITEMBED_ASSIGN_OR_RETURN(const std::string b64, required_string(j, "precompiled_charsmap", at));
      JITEMBED_ASSIGN_OR_RETURN(auto map, precompiled_charsmap::parse(b64, at["precompiled_charsmap"]));
      n.charsmap = std::make_shared<const precompiled_charsmap>(std::move(map));
    } else {
      return unsupported(at, "normalizer", type);
    }
    return n;
  }

  // The pattern of Replace and Split: {"String": s} (exact) or {"Regex": r}.
  static result<hf_regex> parse_pattern(const hf_json& j, const json_at& at) {
    JITEMBED_ASSIGN_OR_RETURN(const hf_json* p, required(j, "pattern", at));
    JITEMBED_TRY(object_of(*p, at["pattern"]));
    if (const hf_json* s = member(*p, "String")) {
      JITEMBED_ASSIGN_OR_RETURN(const std::string lit, string_of(*s, at["pattern"]["String"]));
      return hf_regex::compile(lit, true, at["pattern"]["String"].path);
    }
    if (const hf_json* r = member(*p, "Regex")) {
      JITEMBED_ASSIGN_OR_RETURN(const std::string re, string_of(*r, at["pattern"]["Regex"]));
      return hf_regex::compile(re, false, at["pattern"]["Regex"].path);
    }
    return at["pattern"].invalid("expected {\"String\": ...} or {\"Regex\": ...}");
  }

  // Normalizes s in place; scratch is reused storage. Fails only when PCRE2 or utf8proc fail.
  result<void> apply(std::string& s, std::string& scratch) const {
    switch (k) {
      case kind::sequence:
        for (const auto& c : children) JITEMBED_TRY(c.apply(s, scratch));
        return {};
      case kind::nfc:
      case kind::nfd:
      case kind::nfkc:
      case kind::nfkd: {
        const auto form = k == kind::nfc    ? unicode_form::nfc
                          : k == kind::nfd  ? unicode_form::nfd
                          : k == kind::nfkc ? unicode_form::nfkc
                                            : unicode_form::nfkd;
        if (is_ascii(s)) return {};
        if (!normalize(s, form, scratch))
          return fail(errc::resource_exhausted, "hf_tokenizer: utf8proc could not normalize the text");
        s.swap(scratch);
        return {};
      }
      case kind::lowercase:
        s = lowercase(s);
        return {};
      case kind::strip_accents:
        return filter(s, scratch, [](char32_t c) { return !is_combining_mark(c); }), result<void>();
      case kind::strip:
        strip(s, left, right);
        return {};
      case kind::prepend:
        if (!s.empty()) s.insert(0, content);
        return {};
      case kind::replace:
        return replace_all(s, scratch);
      case kind::bert:
        return bert(s, scratch);
      case kind::nmt:
        nmt(s, scratch);
        return {};
      case kind::precompiled:
        charsmap->normalize(s, scratch);
        return {};
      case kind::byte_level:
        scratch.clear();
        append_byte_level(scratch, s);
        s.swap(scratch);
        return {};
    }
    return {};
  }

  // Rust's lstrip / rstrip on char::is_whitespace.
  static void strip(std::string& s, bool l, bool r) {
    std::size_t b = 0, e = s.size();
    if (l) {
      while (b < e) {
        std::size_t i = b;
        if (!is_whitespace(next_cp(s, i))) break;
        b = i;
      }
    }
    if (r) {
      while (e > b) {
        std::size_t start = e - 1;
        while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        std::size_t i = start;
        if (!is_whitespace(next_cp(s, i))) break;
        e = start;
      }
    }
    s = s.substr(b, e - b);
  }

 private:
  template <class Keep>
  static void filter(std::string& s, std::string& scratch, Keep&& keep) {
    scratch.clear();
    for (std::size_t i = 0; i < s.size();) {
      const std::size_t at = i;
      if (keep(next_cp(s, i))) scratch.append(s, at, i - at);
    }
    s.swap(scratch);
  }

  result<void> replace_all(std::string& s, std::string& scratch) const {
    scratch.clear();
    std::size_t last = 0;
    const bool ok = pattern.for_each_match(s, [&](std::size_t b, std::size_t e) {
      scratch.append(s, last, b - last);
      scratch += content;
      last = e;
    });
    if (!ok) return fail(errc::invalid_argument, "hf_tokenizer: Replace: the pattern failed to match (PCRE2 limit)");
    scratch.append(s, last, std::string::npos);
    s.swap(scratch);
    return {};
  }

  result<void> bert(std::string& s, std::string& scratch) const {
    if (left) {  // clean_text: drop NUL, U+FFFD and controls, whitespace -> ' '
      scratch.clear();
      for (std::size_t i = 0; i < s.size();) {
        const std::size_t at = i;
        const char32_t c = next_cp(s, i);
        if (c == 0 || c == 0xFFFD || is_control(c)) continue;
        if (is_whitespace(c))
          scratch.push_back(' ');
        else
          scratch.append(s, at, i - at);
      }
      s.swap(scratch);
    }
    if (chinese) {
      scratch.clear();
      for (std::size_t i = 0; i < s.size();) {
        const std::size_t at = i;
        const char32_t c = next_cp(s, i);
        if (is_chinese_char(c))
          scratch.push_back(' '), scratch.append(s, at, i - at), scratch.push_back(' ');
        else
          scratch.append(s, at, i - at);
      }
      s.swap(scratch);
    }
    if (strip_accents.value_or(right)) {
      if (!is_ascii(s)) {
        if (!normalize(s, unicode_form::nfd, scratch))
          return fail(errc::resource_exhausted, "hf_tokenizer: utf8proc could not normalize the text");
        s.swap(scratch);
        filter(s, scratch, [](char32_t c) { return !is_nonspacing_mark(c); });
      }
    }
    if (right) s = lowercase(s);
    return {};
  }

  static void nmt(std::string& s, std::string& scratch) {
    scratch.clear();
    for (std::size_t i = 0; i < s.size();) {
      const std::size_t at = i;
      const char32_t c = next_cp(s, i);
      if ((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F)
        continue;
      const bool space = c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 ||
                         (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 || c == 0x2581 || c == 0xFEFF ||
                         c == 0xFFFD;
      if (space)
        scratch.push_back(' ');
      else
        scratch.append(s, at, i - at);
    }
    s.swap(scratch);
  }
};

}  // namespace jitembed::models::detail
