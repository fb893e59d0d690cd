// The immutable state behind models::hf_tokenizer: tokenizer.json parsed into its parts, and one sequence encoded
// (added tokens, normalizer, pre-tokenizer, model) before truncation and post-processing.
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/models/detail/hf_added_vocabulary.hpp"
#include "jitembed/models/detail/hf_bpe.hpp"
#include "jitembed/models/detail/hf_json.hpp"
#include "jitembed/models/detail/hf_normalizer.hpp"
#include "jitembed/models/detail/hf_post_processor.hpp"
#include "jitembed/models/detail/hf_pre_tokenizer.hpp"
#include "jitembed/models/detail/hf_unigram.hpp"
#include "jitembed/models/detail/hf_wordpiece.hpp"
#include "jitembed/models/hf_encoding.hpp"

namespace jitembed::models::detail {

inline constexpr std::size_t k_max_json_depth = 128;

// The deepest nesting of arrays and objects in a JSON text (strings skipped): refused past k_max_json_depth before
// parsing, so that neither the parser nor the component parsers recurse without bound on a hostile file.
inline std::size_t json_depth(std::string_view s) noexcept {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : s) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

struct hf_tokenizer_state {
  std::string source;
  std::string file_hash;
  std::optional<hf_normalizer> normalizer;
  std::optional<hf_pre_tokenizer> pre_tokenizer;
  std::variant<hf_bpe, hf_wordpiece, hf_unigram> model;
  std::optional<hf_post_processor> post;
  hf_added_vocabulary added;
  std::optional<hf_truncation> truncation;
  std::optional<hf_padding> padding;

  static result<hf_tokenizer_state> parse(std::string_view text, std::string source) {
    if (json_depth(text) > k_max_json_depth)
      return fail(errc::limit_exceeded,
                  "hf_tokenizer: " + source + ": JSON nested deeper than " + std::to_string(k_max_json_depth));
    try {
      hf_json j;
      try {
        j = hf_json::parse(text);
      } catch (const nlohmann::json::parse_error& e) {
        return fail(errc::decode_failed, "hf_tokenizer: " + source + ": not JSON: " + e.what());
      }
      return from_json(j, std::move(source), text);
    } catch (const std::bad_alloc&) {
      return fail(errc::resource_exhausted, "hf_tokenizer: " + source + ": out of memory while parsing");
    } catch (const nlohmann::json::exception& e) {
      return fail(errc::decode_failed, "hf_tokenizer: " + source + ": " + e.what());
    }
  }

  std::optional<std::int64_t> token_to_id(std::string_view token) const {
    if (const auto id = added.token_to_id(token)) return *id;
    const auto id = std::visit([&](const auto& m) { return find_id(m.vocab(), token); }, model);
    if (id) return *id;
    return std::nullopt;
  }

  // One sequence up to the model: ids, type ids all type_id. limit (0: none): stop tokenizing pieces once this many
  // tokens are there, from the right end (right) or the left, as the library does when truncation is on.
  result<hf_seq> encode_sequence(std::string_view text, std::int64_t type_id, std::size_t limit, bool right) const {
    std::vector<hf_piece> pieces;
    JITEMBED_TRY(added.extract_and_normalize(text, normalizer ? &*normalizer : nullptr, pieces));
    if (pre_tokenizer) JITEMBED_TRY(pre_tokenizer->apply(pieces));
    hf_seq out;
    std::vector<std::vector<std::int64_t>> parts(pieces.size());
    std::size_t total = 0;
    const std::size_t n = pieces.size();
    std::size_t lo = 0, hi = n;  // the pieces kept
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = right ? k : n - 1 - k;
      auto& p = pieces[i];
      if (p.id >= 0) {
        parts[i].push_back(p.id);
        ++total;
        continue;
      }
      JITEMBED_TRY(std::visit([&](const auto& m) { return m.tokenize(p.text, parts[i]); }, model));
      total += parts[i].size();
      if (limit != 0 && total >= limit) {
        if (right)
          hi = i + 1;
        else
          lo = i;
        break;
      }
    }
    for (std::size_t i = lo; i < hi; ++i) out.ids.insert(out.ids.end(), parts[i].begin(), parts[i].end());
    out.type_ids.assign(out.ids.size(), type_id);
    return out;
  }

 private:
  static result<hf_tokenizer_state> from_json(const hf_json& j, std::string source, std::string_view text) {
    hf_tokenizer_state s;
    s.source = std::move(source);
    s.file_hash = xxh3_128(as_bytes_view(text)).to_hex();
    const json_at root{&s.source, ""};
    JITEMBED_TRY(object_of(j, root));
    if (const hf_json* v = member(j, "version")) {
      JITEMBED_ASSIGN_OR_RETURN(const std::string version, string_of(*v, root["version"]));
      if (version != "1.0")
        return root["version"].error(errc::unsupported_version, "unknown tokenizer version '" + version + "'");
    }
    if (const hf_json* n = member(j, "normalizer")) {
      JITEMBED_ASSIGN_OR_RETURN(auto norm, hf_normalizer::parse(*n, root["normalizer"]));
      s.normalizer = std::move(norm);
    }
    if (const hf_json* p = member(j, "pre_tokenizer")) {
      JITEMBED_ASSIGN_OR_RETURN(auto pre, hf_pre_tokenizer::parse(*p, root["pre_tokenizer"]));
      s.pre_tokenizer = std::move(pre);
    }
    if (const hf_json* p = member(j, "post_processor")) {
      JITEMBED_ASSIGN_OR_RETURN(auto post, hf_post_processor::parse(*p, root["post_processor"]));
      s.post = std::move(post);
    }
    JITEMBED_ASSIGN_OR_RETURN(const hf_json* m, required(j, "model", root));
    const json_at ma = root["model"];
    JITEMBED_TRY(object_of(*m, ma));
    std::string type;
    if (const hf_json* t = member(*m, "type")) {
      JITEMBED_ASSIGN_OR_RETURN(type, string_of(*t, ma["type"]));
    } else {  // files without the tag: what the fields say, as the library's untagged fallback does
      type = member(*m, "merges")                              ? "BPE"
             : member(*m, "max_input_chars_per_word")          ? "WordPiece"
             : member(*m, "vocab") && (*m)["vocab"].is_array() ? "Unigram"
                                                               : "";
    }
    std::size_t model_size = 0;
    if (type == "BPE") {
      JITEMBED_ASSIGN_OR_RETURN(auto bpe, hf_bpe::parse(*m, ma));
      model_size = bpe.vocab().size();
      s.model = std::move(bpe);
    } else if (type == "WordPiece") {
      JITEMBED_ASSIGN_OR_RETURN(auto wp, hf_wordpiece::parse(*m, ma));
      model_size = wp.vocab().size();
      s.model = std::move(wp);
    } else if (type == "Unigram") {
      JITEMBED_ASSIGN_OR_RETURN(auto uni, hf_unigram::parse(*m, ma));
      model_size = uni.size();
      s.model = std::move(uni);
    } else {
      return unsupported(ma, "model", type.empty() ? "(none)" : type);
    }
    const auto model_id = [&s](std::string_view t) {
      return std::visit([&](const auto& mm) { return find_id(mm.vocab(), t); }, s.model);
    };
    JITEMBED_ASSIGN_OR_RETURN(
        s.added, hf_added_vocabulary::parse(member(j, "added_tokens"), root["added_tokens"], model_id, model_size,
                                            s.normalizer ? &*s.normalizer : nullptr));
    if (const hf_json* t = member(j, "truncation")) {
      JITEMBED_ASSIGN_OR_RETURN(s.truncation, parse_truncation(*t, root["truncation"]));
    }
    if (const hf_json* p = member(j, "padding")) {
      JITEMBED_ASSIGN_OR_RETURN(s.padding, parse_padding(*p, root["padding"]));
    }
    return s;
  }

  static result<std::optional<hf_truncation>> parse_truncation(const hf_json& t, const json_at& at) {
    JITEMBED_TRY(object_of(t, at));
    hf_truncation tr;
    JITEMBED_ASSIGN_OR_RETURN(const hf_json* max, required(t, "max_length", at));
    JITEMBED_ASSIGN_OR_RETURN(const auto m, uint_of(*max, at["max_length"]));
    tr.max_length = static_cast<std::size_t>(m);
    JITEMBED_ASSIGN_OR_RETURN(const auto strategy, optional_string(t, "strategy", at));
    const std::string st = strategy.value_or("LongestFirst");
    if (st == "LongestFirst")
      tr.how = hf_truncation::strategy::longest_first;
    else if (st == "OnlyFirst")
      tr.how = hf_truncation::strategy::only_first;
    else if (st == "OnlySecond")
      tr.how = hf_truncation::strategy::only_second;
    else
      return at["strategy"].invalid("unknown truncation strategy '" + st + "'");
    JITEMBED_ASSIGN_OR_RETURN(const auto dir, optional_string(t, "direction", at));
    if (dir && *dir != "Right" && *dir != "Left") return at["direction"].invalid("unknown direction '" + *dir + "'");
    tr.direction = dir && *dir == "Left" ? hf_truncation::side::left : hf_truncation::side::right;
    return std::optional<hf_truncation>(tr);
  }

  static result<std::optional<hf_padding>> parse_padding(const hf_json& p, const json_at& at) {
    JITEMBED_TRY(object_of(p, at));
    hf_padding pad;
    if (const hf_json* s = member(p, "strategy")) {
      if (s->is_object()) {
        JITEMBED_ASSIGN_OR_RETURN(const hf_json* fixed, required(*s, "Fixed", at["strategy"]));
        JITEMBED_ASSIGN_OR_RETURN(const auto n, uint_of(*fixed, at["strategy"]["Fixed"]));
        pad.length = static_cast<std::size_t>(n);
      } else if (!(s->is_string() && s->get<std::string>() == "BatchLongest")) {
        return at["strategy"].invalid("expected \"BatchLongest\" or {\"Fixed\": n}");
      }
    }
    if (const hf_json* v = member(p, "pad_id")) {
      JITEMBED_ASSIGN_OR_RETURN(pad.pad_id, uint_of(*v, at["pad_id"]));
    }
    if (const hf_json* v = member(p, "pad_type_id")) {
      JITEMBED_ASSIGN_OR_RETURN(pad.pad_type_id, uint_of(*v, at["pad_type_id"]));
    }
    if (const hf_json* v = member(p, "pad_to_multiple_of")) {
      JITEMBED_ASSIGN_OR_RETURN(pad.pad_to_multiple_of, uint_of(*v, at["pad_to_multiple_of"]));
    }
    JITEMBED_ASSIGN_OR_RETURN(const auto dir, optional_string(p, "direction", at));
    if (dir && *dir != "Right" && *dir != "Left") return at["direction"].invalid("unknown direction '" + *dir + "'");
    pad.direction = dir && *dir == "Left" ? hf_padding::side::left : hf_padding::side::right;
    return std::optional<hf_padding>(pad);
  }
};

}  // namespace jitembed::models::detail
