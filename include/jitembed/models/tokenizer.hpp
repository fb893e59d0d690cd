// T5-style tokenization on libsentencepiece (no LibTorch): a caption -> the int64 [2, L] a T5 encoder export
// takes (row 0 token ids, EOS appended, padded with the pad id; row 1 the attention mask), by the rules of
// models::text_preprocess. Equal to transformers' T5Tokenizer(padding="max_length", truncation=True) and to
// the sentencepiece package's encode on the same model file. Component torch (external SentencePiece).
#pragma once

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/core/utf8.hpp"
#include "jitembed/models/preprocess.hpp"

namespace jitembed::models {

// A loaded SentencePiece model with the T5 rules. Cheap to copy (copies share the processor); encode() is
// safe to call from several threads (SentencePieceProcessor::Encode is const).
class t5_tokenizer {
 public:
  // Loads p.sentencepiece_model. Errors: not_found (no such file), io_error (unreadable), decode_failed (not
  // a SentencePiece model, or one without an EOS id when append_eos is set), invalid_argument
  // (max_length < 2); each message names the file.
  static result<t5_tokenizer> open(const text_preprocess& p) {
    const std::string file = p.sentencepiece_model.string();
    if (p.max_length < 2) return fail(errc::invalid_argument, "sentencepiece: max_length " + std::to_string(p.max_length) + " < 2");
    std::error_code ec;
    if (!std::filesystem::is_regular_file(p.sentencepiece_model, ec))
      return fail(errc::not_found, "sentencepiece: no model file " + file);
    std::ifstream in(p.sentencepiece_model, std::ios::binary);
    if (!in) return fail(errc::io_error, "sentencepiece: cannot read " + file);
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    auto sp = std::make_shared<sentencepiece::SentencePieceProcessor>();
    if (const auto st = sp->LoadFromSerializedProto(bytes); !st.ok())
      return fail(errc::decode_failed, "sentencepiece: " + file + " is not a SentencePiece model: " + st.ToString());
    if (p.append_eos && sp->eos_id() < 0)
      return fail(errc::decode_failed, "sentencepiece: " + file + " has no EOS piece (text_append_eos is true)");
    const int pad = sp->pad_id() >= 0 ? sp->pad_id() : 0;  // T5: pad 0
    hasher128 h(0x7370696563ull);
    h.update(as_bytes_view(std::string_view(bytes)));
    return t5_tokenizer(std::move(sp), p, pad, h.digest().to_hex());
  }

  // XXH3-128 hex of the model file's bytes (part of the preprocess key: a new vocabulary changes cache keys).
  std::string_view model_hash() const noexcept { return hash_; }
  const text_preprocess& settings() const noexcept { return p_; }

  // UTF-8 caption -> i64 [2, max_length]. Errors: limit_exceeded (more than max_decoded_bytes),
  // invalid_utf8 (validate_utf8's codes), invalid_argument (a caption longer than max_length with
  // truncation off), internal (SentencePiece fails).
  result<tensor> encode(bytes_view utf8, const decode_limits& limits = {}) const {
    if (utf8.size() > limits.max_decoded_bytes)
      return fail(errc::limit_exceeded, "sentencepiece: caption of " + std::to_string(utf8.size()) + " bytes > max_decoded_bytes " +
                                            std::to_string(limits.max_decoded_bytes));
    JITEMBED_TRY(validate_utf8(utf8));
    std::vector<int> ids;
    const std::string_view text(reinterpret_cast<const char*>(utf8.data()), utf8.size());
    if (const auto st = sp_->Encode(text, &ids); !st.ok()) return fail(errc::internal, "sentencepiece: encode failed: " + st.ToString());
    const auto L = static_cast<std::size_t>(p_.max_length);
    const std::size_t room = p_.append_eos ? L - 1 : L;
    if (ids.size() > room) {
      if (!p_.truncation)
        return fail(errc::invalid_argument, "sentencepiece: the caption has " + std::to_string(ids.size()) + " tokens > " +
                                                std::to_string(room) + " (text_truncation is false)");
      ids.resize(room);
    }
    if (p_.append_eos) ids.push_back(sp_->eos_id());
    tensor t = tensor::empty(shape{2, p_.max_length}, dtype::i64);
    auto* row = t.data<std::int64_t>();
    for (std::size_t i = 0; i < L; ++i) {
      row[i] = i < ids.size() ? ids[i] : pad_;
      row[L + i] = i < ids.size() ? 1 : 0;
    }
    return t;
  }
  result<tensor> encode(std::string_view utf8, const decode_limits& limits = {}) const { return encode(as_bytes_view(utf8), limits); }

 private:
  t5_tokenizer(std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp, text_preprocess p, int pad, std::string hash)
      : sp_(std::move(sp)), p_(std::move(p)), pad_(pad), hash_(std::move(hash)) {}
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp_;
  text_preprocess p_;
  int pad_ = 0;
  std::string hash_;
};

}  // namespace jitembed::models
