// The added tokens of tokenizer.json ("added_tokens"): their ids (as the library assigns them: the model's id of the
// content, else the next free one), and their extraction from a caption before (normalized: false) and after
// (normalized: true) the normalizer, leftmost-longest, with single_word / lstrip / rstrip.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/models/detail/hf_json.hpp"
#include "jitembed/models/detail/hf_normalizer.hpp"
#include "jitembed/models/detail/hf_pre_tokenizer.hpp"
#include "jitembed/models/detail/hf_unicode.hpp"
#include "jitembed/models/detail/hf_vocab.hpp"

namespace jitembed::models::detail {

struct hf_added_token {
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
  bool operator==(const hf_added_token&) const = default;
};

class hf_added_vocabulary {
 public:
  // model_id: the model's id of a token, if any; model_size: its vocabulary size (where new ids start).
  static result<hf_added_vocabulary> parse(const hf_json* list, const json_at& at,
                                           const std::function<std::optional<std::int32_t>(std::string_view)>& model_id,
                                           std::size_t model_size, const hf_normalizer* normalizer) {
    hf_added_vocabulary v;
    if (list == nullptr) return v;
    JITEMBED_TRY(array_of(*list, at));
    std::int64_t next_id = static_cast<std::int64_t>(model_size);
    std::map<std::int32_t, hf_added_token> by_id;  // the library's added_tokens_map_r
    std::map<std::int32_t, std::string> normalized_form;
    std::string scratch;
    for (std::size_t i = 0; i < list->size(); ++i) {
      const hf_json& e = (*list)[i];
      const json_at ea = at[i];
      JITEMBED_TRY(object_of(e, ea));
      hf_added_token t;
      JITEMBED_ASSIGN_OR_RETURN(t.content, required_string(e, "content", ea));
      JITEMBED_ASSIGN_OR_RETURN(t.special, optional_bool(e, "special", ea, false));
      JITEMBED_ASSIGN_OR_RETURN(t.single_word, optional_bool(e, "single_word", ea, false));
      JITEMBED_ASSIGN_OR_RETURN(t.lstrip, optional_bool(e, "lstrip", ea, false));
      JITEMBED_ASSIGN_OR_RETURN(t.rstrip, optional_bool(e, "rstrip", ea, false));
      JITEMBED_ASSIGN_OR_RETURN(t.normalized, optional_bool(e, "normalized", ea, !t.special));
      if (t.content.empty()) continue;
      const auto known = find_id(v.ids_, t.content);
      if (known && by_id[*known] == t) continue;
      std::int32_t id;
      if (known)
        id = *known;
      else if (const auto m = model_id(t.content))
        id = *m;
      else {
        if (next_id > 0x7FFFFFFF) return ea.error(errc::limit_exceeded, "too many added tokens");
        id = static_cast<std::int32_t>(next_id++);
      }
      if (t.normalized && normalizer) {
        std::string s = t.content;
        JITEMBED_TRY(normalizer->apply(s, scratch));
        if (s != t.content) normalized_form[id] = std::move(s);
      }
      v.ids_[t.content] = id;
      by_id[id] = std::move(t);
    }
    for (const auto& [id, t] : by_id) {
      const auto it = normalized_form.find(id);
      const std::string& pattern = t.normalized && it != normalized_form.end() ? it->second : t.content;
      auto& table = t.normalized ? v.normalized_ : v.raw_;
      if (pattern.empty() || table.find_exact(pattern)) continue;  // a duplicate pattern: the first is kept
      table.add(pattern, id, t);
    }
    return v;
  }

  std::optional<std::int32_t> token_to_id(std::string_view s) const { return find_id(ids_, s); }
  bool empty() const noexcept { return ids_.empty(); }

  // The caption cut into added tokens and normalized text pieces (the library's extract_and_normalize).
  result<void> extract_and_normalize(std::string_view caption, const hf_normalizer* normalizer,
                                     std::vector<hf_piece>& out) const {
    out.clear();
    std::vector<match> found;
    raw_.find(caption, found);
    std::string scratch;
    for (const auto& m : found) {
      if (m.e <= m.b) continue;
      if (m.id >= 0) {
        out.push_back({std::string(caption.substr(m.b, m.e - m.b)), m.id, false});
        continue;
      }
      std::string text(caption.substr(m.b, m.e - m.b));
      if (normalizer) JITEMBED_TRY(normalizer->apply(text, scratch));
      if (normalized_.size() == 0) {
        if (!text.empty()) out.push_back({std::move(text), -1, m.b == 0});
        continue;
      }
      std::vector<match> inner;
      normalized_.find(text, inner);
      for (const auto& n : inner)
        if (n.e > n.b) out.push_back({text.substr(n.b, n.e - n.b), n.id, m.b == 0 && n.b == 0 && n.id < 0});
    }
    return {};
  }

 private:
  struct match {
    std::size_t b, e;
    std::int32_t id;  // -1: text between tokens
  };
  // The tokens of one trie (raw or normalized) with their flags.
  class table {
   public:
    void add(const std::string& pattern, std::int32_t id, const hf_added_token& t) {
      trie_.insert(pattern, static_cast<std::int32_t>(tokens_.size()));
      tokens_.push_back({id, t});
    }
    bool find_exact(std::string_view pattern) const {
      bool hit = false;
      trie_.prefixes(pattern, [&](std::size_t len, std::int32_t) { hit = hit || len == pattern.size(); });
      return hit;
    }
    std::size_t size() const noexcept { return tokens_.size(); }

    // Leftmost-longest non-overlapping matches of s, with the library's single_word / lstrip / rstrip rules, as
    // a cover of s: text spans (id -1) and token spans.
    void find(std::string_view s, std::vector<match>& out) const {
      out.clear();
      std::size_t start_offset = 0;
      for (std::size_t pos = 0; !tokens_.empty() && pos < s.size();) {
        if (!trie_.may_start(static_cast<unsigned char>(s[pos]))) {
          ++pos;
          continue;
        }
        std::size_t best_len = 0;
        std::int32_t best = -1;
        trie_.prefixes(s.substr(pos), [&](std::size_t len, std::int32_t v) { best_len = len, best = v; });
        if (best < 0) {
          ++pos;
          continue;
        }
        std::size_t start = pos, stop = pos + best_len;
        pos = stop;  // the next search starts after the raw match, whatever the flags do with it
        const auto& [id, tok] = tokens_[static_cast<std::size_t>(best)];
        if (tok.single_word) {
          const bool start_space = start == 0 || !ends_with_word(s.substr(0, start));
          const bool stop_space = stop == s.size() || !starts_with_word(s.substr(stop));
          if (!start_space || !stop_space) continue;
        }
        if (tok.lstrip) {
          std::size_t b = start;
          while (b > 0) {
            std::size_t lead = b - 1;
            while (lead > 0 && (static_cast<unsigned char>(s[lead]) & 0xC0) == 0x80) --lead;
            std::size_t i = lead;
            if (!is_whitespace(next_cp(s, i))) break;
            b = lead;
          }
          start = std::max(b, start_offset);
        }
        if (tok.rstrip) {
          while (stop < s.size()) {
            std::size_t i = stop;
            if (!is_whitespace(next_cp(s, i))) break;
            stop = i;
          }
        }
        if (start_offset < start) out.push_back({start_offset, start, -1});
        out.push_back({start, stop, id});
        start_offset = stop;
      }
      if (start_offset != s.size() || s.empty()) out.push_back({start_offset, s.size(), -1});
    }

   private:
    static bool ends_with_word(std::string_view s) {
      std::size_t lead = s.size() - 1;
      while (lead > 0 && (static_cast<unsigned char>(s[lead]) & 0xC0) == 0x80) --lead;
      return is_word(next_cp(s, lead));
    }
    static bool starts_with_word(std::string_view s) {
      std::size_t i = 0;
      return is_word(next_cp(s, i));
    }
    struct entry {
      std::int32_t id;
      hf_added_token token;
    };
    byte_trie trie_;
    std::vector<entry> tokens_;
  };

  vocab_map ids_;
  table raw_, normalized_;
};

}  // namespace jitembed::models::detail
