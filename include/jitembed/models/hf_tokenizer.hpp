// A Hugging Face tokenizer.json read in C++ (component tokenizers): caption -> token ids, attention mask and type ids,
// token for token what the Python `tokenizers` library gives (docs/models.md, "Hugging Face tokenizers").
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/utf8.hpp"
#include "jitembed/models/detail/hf_tokenizer_state.hpp"
#include "jitembed/models/hf_encoding.hpp"

namespace jitembed::models {

// A loaded tokenizer.json. Cheap to copy (copies share the immutable state); encode() may be called from several
// threads at once (per-call scratch, a sharded bounded word cache).
class hf_tokenizer {
 public:
  // Reads and parses a tokenizer.json. Errors: not_found (no such file), io_error (unreadable), and parse()'s.
  static result<hf_tokenizer> open(const std::filesystem::path& tokenizer_json) {
    const std::string name = tokenizer_json.string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(tokenizer_json, ec))
      return fail(errc::not_found, "hf_tokenizer: no file " + name);
    std::ifstream in(tokenizer_json, std::ios::binary);
    if (!in) return fail(errc::io_error, "hf_tokenizer: cannot read " + name);
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (in.bad()) return fail(errc::io_error, "hf_tokenizer: cannot read " + name);
    return parse(bytes, name);
  }

  // Parses tokenizer.json text; source_name goes into messages. Errors: decode_failed (not JSON, a wrong type, a
  // missing field, an id or merge not in the vocabulary, a regex that does not compile: the message names the JSON
  // path), invalid_argument (a normalizer / pre_tokenizer / model / post_processor type this library does not
  // implement, BPE dropout), limit_exceeded (a number out of range).
  static result<hf_tokenizer> parse(std::string_view json, std::string_view source_name) {
    JITEMBED_ASSIGN_OR_RETURN(auto state, detail::hf_tokenizer_state::parse(json, std::string(source_name)));
    hf_tokenizer t;
    t.state_ = std::make_shared<const detail::hf_tokenizer_state>(std::move(state));
    return t;
  }

  // One caption. Errors: limit_exceeded (more bytes than limits.max_decoded_bytes, or padding beyond
  // limits.max_elements), invalid_utf8 (the core's validation), invalid_argument (truncation that leaves no room for
  // the special tokens, only_first / only_second truncation of a sequence too short, a model without the unk token
  // it needs).
  result<hf_encoding> encode(std::string_view utf8, bool add_special_tokens = true,
                             const hf_truncation& truncation = {}, const hf_padding& padding = {},
                             const decode_limits& limits = {}) const {
    return run(utf8, nullptr, add_special_tokens, truncation, padding, limits);
  }
  // A pair of captions (the second gets type id 1 where the post-processor says so).
  result<hf_encoding> encode_pair(std::string_view a, std::string_view b, bool add_special_tokens = true,
                                  const hf_truncation& truncation = {}, const hf_padding& padding = {},
                                  const decode_limits& limits = {}) const {
    return run(a, &b, add_special_tokens, truncation, padding, limits);
  }

  // The id of a token of the vocabulary or of the added tokens.
  std::optional<std::int64_t> token_to_id(std::string_view token) const { return state_->token_to_id(token); }
  // XXH3-128 hex of the file's bytes: part of cache keys (a new vocabulary changes the embeddings).
  std::string_view file_hash() const noexcept { return state_->file_hash; }
  // What the file's own "truncation" / "padding" sections declare (BatchLongest padding: length 0).
  const std::optional<hf_truncation>& declared_truncation() const noexcept { return state_->truncation; }
  const std::optional<hf_padding>& declared_padding() const noexcept { return state_->padding; }

 private:
  hf_tokenizer() = default;

  result<hf_encoding> run(std::string_view a, const std::string_view* b, bool add_special, const hf_truncation& tr,
                          const hf_padding& pad, const decode_limits& limits) const {
    for (const std::string_view* s : {static_cast<const std::string_view*>(&a), b}) {
      if (s == nullptr) continue;
      if (s->size() > limits.max_decoded_bytes)
        return fail(errc::limit_exceeded, "hf_tokenizer: caption of " + std::to_string(s->size()) +
                                              " bytes > max_decoded_bytes " + std::to_string(limits.max_decoded_bytes));
      JITEMBED_TRY(validate_utf8(*s));
    }
    if (pad.length > limits.max_elements || pad.pad_to_multiple_of > limits.max_elements)
      return fail(errc::limit_exceeded, "hf_tokenizer: padding length " +
                                            std::to_string(std::max(pad.length, pad.pad_to_multiple_of)) +
                                            " > max_elements " + std::to_string(limits.max_elements));
    const std::size_t added = state_->post ? state_->post->added_tokens(b != nullptr) : 0;
    std::size_t budget = tr.max_length;
    if (tr.max_length != 0 && add_special && added > 0) {
      if (tr.max_length < added)
        return fail(errc::invalid_argument, "hf_tokenizer: max_length " + std::to_string(tr.max_length) +
                                                " leaves no room for the " + std::to_string(added) +
                                                " special tokens the post-processor adds");
      budget = tr.max_length - added;
    }
    const bool right = tr.direction == hf_truncation::side::right;
    std::vector<detail::hf_seq> encs;
    const std::size_t limit_a =
        tr.max_length != 0 && tr.how != hf_truncation::strategy::only_second ? tr.max_length : 0;
    JITEMBED_ASSIGN_OR_RETURN(auto ea, state_->encode_sequence(a, 0, limit_a, right));
    encs.push_back(std::move(ea));
    if (b != nullptr) {
      JITEMBED_ASSIGN_OR_RETURN(auto eb, state_->encode_sequence(*b, 1, tr.max_length, right));
      encs.push_back(std::move(eb));
    }
    if (tr.max_length != 0) JITEMBED_TRY(truncate(encs, budget, tr));
    if (state_->post) state_->post->process(encs, add_special);
    hf_encoding out;
    for (auto& e : encs) {
      out.ids.insert(out.ids.end(), e.ids.begin(), e.ids.end());
      out.type_ids.insert(out.type_ids.end(), e.type_ids.begin(), e.type_ids.end());
    }
    out.attention_mask.assign(out.ids.size(), 1);
    std::size_t target = std::max(pad.length, out.ids.size());
    if (pad.length == 0) target = out.ids.size();
    if (pad.pad_to_multiple_of > 0 && target % pad.pad_to_multiple_of != 0)
      target += pad.pad_to_multiple_of - target % pad.pad_to_multiple_of;
    if (target > out.ids.size()) {
      const std::size_t n = target - out.ids.size();
      const bool at_end = pad.direction == hf_padding::side::right;
      out.ids.insert(at_end ? out.ids.end() : out.ids.begin(), n, pad.pad_id);
      out.type_ids.insert(at_end ? out.type_ids.end() : out.type_ids.begin(), n, pad.pad_type_id);
      out.attention_mask.insert(at_end ? out.attention_mask.end() : out.attention_mask.begin(), n, 0);
    }
    return out;
  }

  // The library's truncate_encodings (stride only shapes the overflowing parts, which are not returned).
  static result<void> truncate(std::vector<detail::hf_seq>& encs, std::size_t max, const hf_truncation& tr) {
    const bool right = tr.direction == hf_truncation::side::right;
    auto cut = [right](detail::hf_seq& e, std::size_t n) {
      if (e.ids.size() <= n) return;
      if (right) {
        e.ids.resize(n), e.type_ids.resize(n);
      } else {
        e.ids.erase(e.ids.begin(), e.ids.end() - static_cast<std::ptrdiff_t>(n));
        e.type_ids.erase(e.type_ids.begin(), e.type_ids.end() - static_cast<std::ptrdiff_t>(n));
      }
    };
    std::size_t total = 0;
    for (const auto& e : encs) total += e.ids.size();
    if (total <= max) return {};
    const std::size_t to_remove = total - max;
    if (tr.how == hf_truncation::strategy::longest_first) {
      if (encs.size() == 1) return cut(encs[0], max), result<void>();
      std::size_t n1 = encs[0].ids.size(), n2 = encs[1].ids.size();
      const bool swap = n1 > n2;
      if (swap) std::swap(n1, n2);
      n2 = n1 > max ? n1 : std::max(n1, max - n1);
      if (n1 + n2 > max) n1 = max / 2, n2 = n1 + max % 2;
      if (swap) std::swap(n1, n2);
      cut(encs[0], n1), cut(encs[1], n2);
      return {};
    }
    const std::size_t which = tr.how == hf_truncation::strategy::only_first ? 0 : 1;
    if (which >= encs.size())
      return fail(errc::invalid_argument, "hf_tokenizer: only_second truncation of a single sequence");
    const std::size_t len = encs[which].ids.size();
    if (len <= to_remove)
      return fail(errc::invalid_argument, "hf_tokenizer: the sequence to truncate is too short to respect max_length " +
                                              std::to_string(tr.max_length));
    cut(encs[which], len - to_remove);
    return {};
  }

  std::shared_ptr<const detail::hf_tokenizer_state> state_;
};

}  // namespace jitembed::models
