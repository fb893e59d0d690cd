// The WordPiece model of tokenizer.json: greedy longest match from the left, continuing_subword_prefix on pieces after
// the first, the unk_token for a word with an unmatchable rest or longer than max_input_chars_per_word characters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/models/detail/hf_bpe.hpp"
#include "jitembed/models/detail/hf_json.hpp"
#include "jitembed/models/detail/hf_unicode.hpp"
#include "jitembed/models/detail/hf_vocab.hpp"

namespace jitembed::models::detail {

class hf_wordpiece {
 public:
  static result<hf_wordpiece> parse(const hf_json& j, const json_at& at) {
    hf_wordpiece m;
    JITEMBED_ASSIGN_OR_RETURN(const hf_json* vocab, required(j, "vocab", at));
    JITEMBED_TRY(hf_bpe::parse_vocab(*vocab, at["vocab"], m.vocab_));
    JITEMBED_ASSIGN_OR_RETURN(const auto unk, optional_string(j, "unk_token", at));
    JITEMBED_ASSIGN_OR_RETURN(const auto prefix, optional_string(j, "continuing_subword_prefix", at));
    m.unk_ = unk.value_or("[UNK]");
    m.prefix_ = prefix.value_or("##");
    if (const hf_json* n = member(j, "max_input_chars_per_word")) {
      JITEMBED_ASSIGN_OR_RETURN(const auto v, uint_of(*n, at["max_input_chars_per_word"], ~std::uint64_t{0}));
      m.max_chars_ = static_cast<std::size_t>(v);
    }
    return m;
  }

  const vocab_map& vocab() const noexcept { return vocab_; }

  result<void> tokenize(std::string_view word, std::vector<std::int64_t>& out) const {
    std::size_t chars = 0;
    for (const char c : word) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    const std::size_t first = out.size();
    if (chars <= max_chars_) {
      std::string sub;
      std::size_t start = 0;
      bool bad = false;
      while (start < word.size()) {
        std::size_t end = word.size();
        std::optional<std::int32_t> found;
        while (start < end) {
          sub.clear();
          if (start > 0) sub += prefix_;
          sub.append(word.substr(start, end - start));
          if ((found = find_id(vocab_, sub))) break;
          do --end;  // back one code point
          while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
        }
        if (!found) {
          bad = true;
          break;
        }
        out.push_back(*found);
        start = end;
      }
      if (!bad) return {};
      out.resize(first);
    }
    const auto id = find_id(vocab_, unk_);
    if (!id)
      return fail(errc::invalid_argument, "hf_tokenizer: WordPiece unk_token '" + unk_ + "' is not in the vocabulary");
    out.push_back(*id);
    return {};
  }

 private:
  vocab_map vocab_;
  std::string unk_, prefix_;
  std::size_t max_chars_ = 100;
};

}  // namespace jitembed::models::detail
