// The pre-tokenizers of tokenizer.json ("pre_tokenizer"): split the normalized pieces of a caption into the words
// the model sees. Types: Sequence, ByteLevel, Split (String / Regex, every behavior, invert), Whitespace,
// WhitespaceSplit, Punctuation, Digits, Metaspace, BertPreTokenizer, CharDelimiterSplit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/models/detail/hf_json.hpp"
#include "jitembed/models/detail/hf_normalizer.hpp"
#include "jitembed/models/detail/hf_regex.hpp"
#include "jitembed/models/detail/hf_unicode.hpp"

namespace jitembed::models::detail {

// A piece of the caption: text for the model, or an added token already matched (id >= 0). origin: the piece starts
// where the caption starts (Metaspace's prepend_scheme "first").
struct hf_piece {
  std::string text;
  std::int64_t id = -1;
  bool origin = false;
};

enum class split_behavior : std::uint8_t { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// (begin, end, is_match) spans covering a string, turned into the kept (begin, end) ranges of a behavior.
struct span {
  std::size_t b, e;
  bool match;
};
inline void apply_behavior(const std::vector<span>& in, split_behavior how,
                           std::vector<std::pair<std::size_t, std::size_t>>& out) {
  out.clear();
  bool prev = false;
  switch (how) {
    case split_behavior::removed:
      for (const auto& s : in)
        if (!s.match) out.emplace_back(s.b, s.e);
      return;
    case split_behavior::isolated:
      for (const auto& s : in) out.emplace_back(s.b, s.e);
      return;
    case split_behavior::contiguous:
      for (const auto& s : in) {
        if (s.match == prev && !out.empty())
          out.back().second = s.e;
        else
          out.emplace_back(s.b, s.e);
        prev = s.match;
      }
      return;
    case split_behavior::merged_with_previous:
      for (const auto& s : in) {
        if (s.match && !prev && !out.empty())
          out.back().second = s.e;
        else
          out.emplace_back(s.b, s.e);
        prev = s.match;
      }
      return;
    case split_behavior::merged_with_next:
      for (auto it = in.rbegin(); it != in.rend(); ++it) {
        if (it->match && !prev && !out.empty())
          out.back().first = it->b;
        else
          out.emplace_back(it->b, it->e);
        prev = it->match;
      }
      std::reverse(out.begin(), out.end());
      return;
  }
}

// Spans of a per-character predicate: each matching character alone, the runs between them not matching.
template <class Pred>
void char_spans(std::string_view s, Pred&& pred, std::vector<span>& out) {
  out.clear();
  std::size_t last = 0;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t at = i;
    if (pred(next_cp(s, i))) {
      if (last < at) out.push_back({last, at, false});
      out.push_back({at, i, true});
      last = i;
    }
  }
  if (last < s.size()) out.push_back({last, s.size(), false});
}

struct hf_pre_tokenizer {
  enum class kind : std::uint8_t {
    sequence,
    byte_level,
    split,
    whitespace,
    whitespace_split,
    punctuation,
    digits,
    metaspace,
    bert,
    delimiter
  };
  enum class prepend : std::uint8_t { always, first, never };
  kind k = kind::sequence;
  std::vector<hf_pre_tokenizer> children;
  hf_regex pattern;  // split; byte_level: GPT-2's regex
  split_behavior behavior = split_behavior::isolated;
  bool invert = false;               // split
  bool flag = false;                 // byte_level: add_prefix_space; digits: individual; metaspace: split
  bool use_regex = true;             // byte_level
  prepend scheme = prepend::always;  // metaspace
  std::string replacement;           // metaspace (one character); delimiter
  char32_t replacement_cp = 0;

  static result<hf_pre_tokenizer> parse(const hf_json& j, const json_at& at);

  // Splits every piece without an id, in place; scratch vectors are reused.
  result<void> apply(std::vector<hf_piece>& pieces) const {
    if (k == kind::sequence) {
      for (const auto& c : children) JITEMBED_TRY(c.apply(pieces));
      return {};
    }
    if (k == kind::bert) {  // whitespace removed, then punctuation isolated
      split_each(
          pieces, [](const std::string& s, std::vector<span>& sp) { return char_spans(s, is_whitespace, sp), true; },
          split_behavior::removed);
      split_each(
          pieces, [](const std::string& s, std::vector<span>& sp) { return char_spans(s, is_punctuation, sp), true; },
          split_behavior::isolated);
      return {};
    }
    bool ok = true;
    std::vector<hf_piece> out;
    out.reserve(pieces.size() * 2);
    std::vector<span> spans;
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    std::string buf;
    for (auto& p : pieces) {
      if (p.id >= 0) {
        out.push_back(std::move(p));
        continue;
      }
      ok = ok && split_one(p, out, spans, ranges, buf);
    }
    pieces.swap(out);
    if (!ok) return fail(errc::invalid_argument, "hf_tokenizer: a pre-tokenizer pattern failed to match (PCRE2 limit)");
    return {};
  }

 private:
  template <class SpansOf>
  static void split_each(std::vector<hf_piece>& pieces, SpansOf&& spans_of, split_behavior how) {
    std::vector<hf_piece> out;
    out.reserve(pieces.size() * 2);
    std::vector<span> spans;
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    for (auto& p : pieces) {
      if (p.id >= 0) {
        out.push_back(std::move(p));
        continue;
      }
      spans_of(p.text, spans);
      apply_behavior(spans, how, ranges);
      emit(p, ranges, out);
    }
    pieces.swap(out);
  }
  static void emit(const hf_piece& p, const std::vector<std::pair<std::size_t, std::size_t>>& ranges,
                   std::vector<hf_piece>& out) {
    for (const auto& [b, e] : ranges)
      if (e > b) out.push_back({p.text.substr(b, e - b), -1, p.origin && b == 0});
  }

  bool regex_spans(const std::string& s, std::vector<span>& spans) const {
    spans.clear();
    std::size_t last = 0;
    const bool ok = pattern.for_each_match(s, [&](std::size_t b, std::size_t e) {
      if (last != b) spans.push_back({last, b, invert});
      spans.push_back({b, e, !invert});
      last = e;
    });
    if (last != s.size()) spans.push_back({last, s.size(), invert});
    return ok;
  }

  bool split_one(hf_piece& p, std::vector<hf_piece>& out, std::vector<span>& spans,
                 std::vector<std::pair<std::size_t, std::size_t>>& ranges, std::string& buf) const {
    switch (k) {
      case kind::byte_level: {
        if (flag && !p.text.empty() && p.text[0] != ' ') p.text.insert(0, " ");
        const std::size_t first = out.size();
        if (use_regex) {
          if (!regex_spans(p.text, spans)) return false;
          apply_behavior(spans, split_behavior::isolated, ranges);
          emit(p, ranges, out);
        } else if (!p.text.empty()) {
          out.push_back(std::move(p));
        }
        for (std::size_t i = first; i < out.size(); ++i) {
          buf.clear();
          append_byte_level(buf, out[i].text);
          out[i].text.swap(buf);
        }
        return true;
      }
      case kind::split: {
        if (!regex_spans(p.text, spans)) return false;
        break;
      }
      case kind::whitespace: {  // \w+|[^\w\s]+ kept, whitespace removed
        spans.clear();
        const std::string& s = p.text;
        for (std::size_t i = 0; i < s.size();) {
          std::size_t j = i;
          const char32_t c = next_cp(s, j);
          const int cls = is_word(c) ? 1 : is_whitespace(c) ? 0 : 2;
          while (j < s.size()) {
            std::size_t n = j;
            const char32_t d = next_cp(s, n);
            if ((is_word(d) ? 1 : is_whitespace(d) ? 0 : 2) != cls) break;
            j = n;
          }
          spans.push_back({i, j, cls == 0});  // the whitespace runs are the "matches" (Invert of the word regex)
          i = j;
        }
        apply_behavior(spans, split_behavior::removed, ranges);
        emit(p, ranges, out);
        return true;
      }
      case kind::whitespace_split:
        char_spans(p.text, is_whitespace, spans);
        break;
      case kind::punctuation:
        char_spans(p.text, is_punctuation, spans);
        break;
      case kind::digits:
        char_spans(p.text, is_numeric, spans);
        break;
      case kind::delimiter:
        char_spans(
            p.text, [this](char32_t c) { return c == replacement_cp; }, spans);
        break;
      case kind::metaspace: {
        buf.clear();
        for (const char c : p.text) {
          if (c == ' ')
            buf += replacement;
          else
            buf.push_back(c);
        }
        const bool starts = buf.compare(0, replacement.size(), replacement) == 0;
        if (!starts && !buf.empty() && (scheme == prepend::always || (scheme == prepend::first && p.origin)))
          buf.insert(0, replacement);
        p.text.swap(buf);
        if (!flag) {
          if (!p.text.empty()) out.push_back(std::move(p));
          return true;
        }
        char_spans(
            p.text, [this](char32_t c) { return c == replacement_cp; }, spans);
        apply_behavior(spans, split_behavior::merged_with_next, ranges);
        emit(p, ranges, out);
        return true;
      }
      case kind::sequence:
      case kind::bert:
        break;
    }
    apply_behavior(spans, behavior, ranges);
    emit(p, ranges, out);
    return true;
  }
};

inline result<split_behavior> parse_behavior(const hf_json& j, const json_at& at) {
  JITEMBED_ASSIGN_OR_RETURN(const std::string b, string_of(j, at));
  if (b == "Removed") return split_behavior::removed;
  if (b == "Isolated") return split_behavior::isolated;
  if (b == "MergedWithPrevious") return split_behavior::merged_with_previous;
  if (b == "MergedWithNext") return split_behavior::merged_with_next;
  if (b == "Contiguous") return split_behavior::contiguous;
  return at.invalid("unknown split behavior '" + b + "'");
}

inline result<hf_pre_tokenizer> hf_pre_tokenizer::parse(const hf_json& j, const json_at& at) {
  JITEMBED_ASSIGN_OR_RETURN(const std::string type, type_of(j, at));
  hf_pre_tokenizer p;
  if (type == "Sequence") {
    JITEMBED_ASSIGN_OR_RETURN(const hf_json* list, required(j, "pretokenizers", at));
    JITEMBED_TRY(array_of(*list, at["pretokenizers"]));
    for (std::size_t i = 0; i < list->size(); ++i) {
      JITEMBED_ASSIGN_OR_RETURN(auto c, parse((*list)[i], at["pretokenizers"][i]));
      p.children.push_back(std::move(c));
    }
  } else if (type == "ByteLevel") {
    p.k = kind::byte_level;
    JITEMBED_ASSIGN_OR_RETURN(p.flag, optional_bool(j, "add_prefix_space", at, true));
    JITEMBED_ASSIGN_OR_RETURN(p.use_regex, optional_bool(j, "use_regex", at, true));
    JITEMBED_ASSIGN_OR_RETURN(
        p.pattern, hf_regex::compile(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
                                     false, at.path));
  } else if (type == "Split") {
    p.k = kind::split;
    JITEMBED_ASSIGN_OR_RETURN(p.pattern, hf_normalizer::parse_pattern(j, at));
    JITEMBED_ASSIGN_OR_RETURN(const hf_json* b, required(j, "behavior", at));
    JITEMBED_ASSIGN_OR_RETURN(p.behavior, parse_behavior(*b, at["behavior"]));
    JITEMBED_ASSIGN_OR_RETURN(const hf_json* inv, required(j, "invert", at));
    JITEMBED_ASSIGN_OR_RETURN(p.invert, bool_of(*inv, at["invert"]));
  } else if (type == "Whitespace") {
    p.k = kind::whitespace;
  } else if (type == "WhitespaceSplit") {
    p.k = kind::whitespace_split;
    p.behavior = split_behavior::removed;
  } else if (type == "BertPreTokenizer") {
    p.k = kind::bert;
  } else if (type == "Punctuation") {
    p.k = kind::punctuation;
    if (const hf_json* b = member(j, "behavior")) {
      JITEMBED_ASSIGN_OR_RETURN(p.behavior, parse_behavior(*b, at["behavior"]));
    }
  } else if (type == "Digits") {
    p.k = kind::digits;
    JITEMBED_ASSIGN_OR_RETURN(p.flag, optional_bool(j, "individual_digits", at, false));
    p.behavior = p.flag ? split_behavior::isolated : split_behavior::contiguous;
  } else if (type == "Metaspace" || type == "CharDelimiterSplit") {
    const bool meta = type == "Metaspace";
    p.k = meta ? kind::metaspace : kind::delimiter;
    p.behavior = split_behavior::removed;
    JITEMBED_ASSIGN_OR_RETURN(p.replacement, required_string(j, meta ? "replacement" : "delimiter", at));
    std::size_t i = 0;
    if (p.replacement.empty() || (p.replacement_cp = next_cp(p.replacement, i), i != p.replacement.size()))
      return at[meta ? "replacement" : "delimiter"].invalid("expected one character");
    if (meta) {
      JITEMBED_ASSIGN_OR_RETURN(p.flag, optional_bool(j, "split", at, true));
      JITEMBED_ASSIGN_OR_RETURN(const bool add_prefix_space, optional_bool(j, "add_prefix_space", at, true));
      JITEMBED_ASSIGN_OR_RETURN(const auto scheme, optional_string(j, "prepend_scheme", at));
      const std::string s = scheme.value_or("always");
      if (s == "always")
        p.scheme = prepend::always;
      else if (s == "first")
        p.scheme = prepend::first;
      else if (s == "never")
        p.scheme = prepend::never;
      else
        return at["prepend_scheme"].invalid("unknown prepend_scheme '" + s + "'");
      if (!add_prefix_space) {
        if (p.scheme != prepend::never)
          return at["add_prefix_space"].invalid("add_prefix_space does not match declared prepend_scheme");
      }
    }
  } else {
    return unsupported(at, "pre_tokenizer", type);
  }
  return p;
}

}  // namespace jitembed::models::detail
