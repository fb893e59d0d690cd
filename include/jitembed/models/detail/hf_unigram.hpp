// The Unigram model of tokenizer.json (SentencePiece's): the Viterbi best segmentation over the vocabulary's scores,
// unknown characters fused into one unk piece (unk_id), and with byte_fallback those pieces spelled as <0xNN> tokens.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/models/detail/hf_json.hpp"
#include "jitembed/models/detail/hf_unicode.hpp"
#include "jitembed/models/detail/hf_vocab.hpp"

namespace jitembed::models::detail {

class hf_unigram {
 public:
  static result<hf_unigram> parse(const hf_json& j, const json_at& at) {
    hf_unigram m;
    JITEMBED_ASSIGN_OR_RETURN(const hf_json* vocab, required(j, "vocab", at));
    JITEMBED_TRY(array_of(*vocab, at["vocab"]));
    m.scores_.reserve(vocab->size());
    m.ids_.reserve(vocab->size());
    for (std::size_t i = 0; i < vocab->size(); ++i) {
      const hf_json& e = (*vocab)[i];
      const json_at ea = at["vocab"][i];
      if (!e.is_array() || e.size() != 2) return ea.invalid("a Unigram piece is [\"piece\", score]");
      JITEMBED_ASSIGN_OR_RETURN(const std::string piece, string_of(e[0], ea[0]));
      JITEMBED_ASSIGN_OR_RETURN(const double score, number_of(e[1], ea[1]));
      if (!std::isfinite(score)) return ea[1].invalid("the score is not finite");
      m.ids_[piece] = static_cast<std::int32_t>(i);  // the last of equal pieces wins, as in the library
      m.scores_.push_back(score);
      m.min_score_ = std::min(m.min_score_, score);
    }
    for (const auto& [piece, id] : m.ids_) m.trie_.insert(piece, id);
    if (const hf_json* u = member(j, "unk_id")) {
      JITEMBED_ASSIGN_OR_RETURN(const auto id, uint_of(*u, at["unk_id"], 0x7FFFFFFF));
      if (vocab->empty()) return at["vocab"].invalid("empty vocabulary with an unk_id");
      if (id >= vocab->size())
        return at["unk_id"].invalid("unk_id " + std::to_string(id) + " is not in the vocabulary");
      m.unk_ = static_cast<std::int32_t>(id);
    }
    JITEMBED_ASSIGN_OR_RETURN(m.byte_fallback_, optional_bool(j, "byte_fallback", at, false));
    return m;
  }

  const vocab_map& vocab() const noexcept { return ids_; }
  std::size_t size() const noexcept { return scores_.size(); }

  result<void> tokenize(std::string_view s, std::vector<std::int64_t>& out) const {
    if (s.empty()) return {};
    struct node {
      double score = 0;
      std::int64_t start = -1;
      std::int32_t id = 0;
    };
    const double unk_score = min_score_ - 10.0;
    std::vector<node> best(s.size() + 1);
    for (std::size_t at = 0; at < s.size();) {
      const double here = best[at].score;
      const std::size_t mblen = cp_len(static_cast<unsigned char>(s[at]));
      bool single = false;
      trie_.prefixes(s.substr(at), [&](std::size_t len, std::int32_t id) {
        node& t = best[at + len];
        const double cand = scores_[static_cast<std::size_t>(id)] + here;
        if (t.start < 0 || cand > t.score) t = {cand, static_cast<std::int64_t>(at), id};
        single = single || len == mblen;
      });
      if (!single) {
        if (!unk_)
          return fail(errc::invalid_argument, "hf_tokenizer: Unigram has no unk_id and a character has no piece");
        node& t = best[at + mblen];
        const double cand = unk_score + here;
        if (t.start < 0 || cand > t.score) t = {cand, static_cast<std::int64_t>(at), *unk_};
      }
      at += mblen;
    }
    // Back from the end; consecutive unk pieces fused into one.
    std::vector<std::pair<std::size_t, std::size_t>> pieces;  // byte ranges, reversed
    std::size_t end = s.size();
    std::size_t unk_end = 0;
    bool in_unk = false;
    while (end > 0) {
      const node& n = best[end];
      const auto start = static_cast<std::size_t>(n.start);
      if (unk_ && n.id == *unk_) {
        if (!in_unk) unk_end = end, in_unk = true;
      } else {
        if (in_unk) pieces.emplace_back(end, unk_end), in_unk = false;
        pieces.emplace_back(start, end);
      }
      end = start;
    }
    if (in_unk) pieces.emplace_back(0, unk_end);
    char name[8];
    for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
      const std::string_view piece = s.substr(it->first, it->second - it->first);
      if (const auto id = find_id(ids_, piece)) {
        out.push_back(*id);
        continue;
      }
      if (byte_fallback_) {
        const std::size_t first = out.size();
        bool all = true;
        for (const char c : piece) {
          std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned>(static_cast<unsigned char>(c)));
          const auto id = find_id(ids_, name);
          if (!id) {
            all = false;
            break;
          }
          out.push_back(*id);
        }
        if (all) continue;
        out.resize(first);
      }
      if (!unk_)
        return fail(errc::invalid_argument, "hf_tokenizer: Unigram has no unk_id and a piece is not in the vocabulary");
      out.push_back(*unk_);
    }
    return {};
  }

 private:
  vocab_map ids_;
  std::vector<double> scores_;
  byte_trie trie_;
  double min_score_ = INFINITY;
  std::optional<std::int32_t> unk_;
  bool byte_fallback_ = false;
};

}  // namespace jitembed::models::detail
