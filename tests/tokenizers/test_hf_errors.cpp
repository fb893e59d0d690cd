// hf_tokenizer on bad input: hostile or invalid tokenizer.json (wrong types, unknown component types, huge numbers,
// truncated files, deep nesting), invalid UTF-8, limits; and small hand-checked pipelines that need no reference.
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "jitembed/models/hf_tokenizer.hpp"

namespace {

using jitembed::errc;
using jitembed::models::hf_padding;
using jitembed::models::hf_tokenizer;
using jitembed::models::hf_truncation;

// A small WordPiece tokenizer; `extra` goes after the model (normalizer, pre_tokenizer, post_processor, ...).
std::string wordpiece(const std::string& extra = R"("pre_tokenizer": {"type": "WhitespaceSplit"})",
                      const std::string& model_extra = "") {
  return R"({"version": "1.0", "added_tokens": [{"id": 0, "content": "[UNK]", "special": true}, {"id": 1, "content": "[CLS]", "special": true},
             {"id": 2, "content": "[SEP]", "special": true}],
             "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                       "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "a": 3, "cat": 4, "##s": 5, "dog": 6, "x": 7})" +
         model_extra + "}" + (extra.empty() ? "" : ", " + extra) + "}";
}

errc code_of(const std::string& json) {
  auto t = hf_tokenizer::parse(json, "test.json");
  return t ? errc::ok : t.code();
}
std::string message_of(const std::string& json) {
  auto t = hf_tokenizer::parse(json, "test.json");
  return t ? std::string() : t.error().message;
}

}  // namespace

TEST_CASE("a small pipeline encodes as the library does") {
  auto t = hf_tokenizer::parse(wordpiece(R"("pre_tokenizer": {"type": "WhitespaceSplit"},
      "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]})"),
                               "test.json");
  REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.error().message));
  auto e = t->encode("cats a  dog zz");
  REQUIRE(e.has_value());
  CHECK(e->ids == std::vector<std::int64_t>{1, 4, 5, 3, 6, 0, 2});
  CHECK(e->attention_mask == std::vector<std::int64_t>(7, 1));
  auto p = t->encode_pair("a", "dog", true, {}, hf_padding{.length = 8, .pad_id = 9});
  REQUIRE(p.has_value());
  CHECK(p->ids == std::vector<std::int64_t>{1, 3, 2, 6, 2, 9, 9, 9});
  CHECK(p->type_ids == std::vector<std::int64_t>{0, 0, 0, 1, 1, 0, 0, 0});
  CHECK(p->attention_mask == std::vector<std::int64_t>{1, 1, 1, 1, 1, 0, 0, 0});
  // truncation leaves room for [CLS] and [SEP]
  auto tr = t->encode("a a a a a", true, hf_truncation{.max_length = 4});
  REQUIRE(tr.has_value());
  CHECK(tr->ids == std::vector<std::int64_t>{1, 3, 3, 2});
  CHECK(t->encode("a", true, hf_truncation{.max_length = 1}).code() ==
        errc::invalid_argument);  // no room for 2 specials
  CHECK(t->token_to_id("cat") == 4);
  CHECK(t->token_to_id("[SEP]") == 2);
  CHECK_FALSE(t->token_to_id("zebra").has_value());
  CHECK(t->file_hash().size() == 32);
  CHECK_FALSE(t->declared_truncation().has_value());
}

TEST_CASE("the file's truncation and padding sections are read") {
  auto t = hf_tokenizer::parse(
      wordpiece(R"("truncation": {"direction": "Right", "max_length": 77, "strategy": "OnlyFirst", "stride": 0},
      "padding": {"strategy": {"Fixed": 77}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 5, "pad_type_id": 0, "pad_token": "[PAD]"})"),
      "test.json");
  REQUIRE(t.has_value());
  REQUIRE(t->declared_truncation().has_value());
  CHECK(t->declared_truncation()->max_length == 77);
  CHECK(t->declared_truncation()->how == hf_truncation::strategy::only_first);
  REQUIRE(t->declared_padding().has_value());
  CHECK(t->declared_padding()->length == 77);
  CHECK(t->declared_padding()->pad_id == 5);
}

TEST_CASE("copies share the state and encode from several threads") {
  auto t = hf_tokenizer::parse(wordpiece(), "test.json");
  REQUIRE(t.has_value());
  const hf_tokenizer copy = *t;
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 2000; ++i) {
        auto e = (k % 2 ? copy : *t).encode("cats a dog");
        ok[static_cast<std::size_t>(k)] += e && e->ids == std::vector<std::int64_t>{4, 5, 3, 6};
      }
    });
  for (auto& th : threads) th.join();
  CHECK(ok == std::vector<int>(4, 2000));
  CHECK(copy.file_hash() == t->file_hash());
}

TEST_CASE("invalid UTF-8 and limits are errors") {
  auto t = hf_tokenizer::parse(wordpiece(), "test.json");
  REQUIRE(t.has_value());
  auto bad = t->encode(std::string("ca\xC0\x80t"));
  CHECK(bad.code() == errc::invalid_utf8);
  CHECK(bad.error().message == "utf8: overlong 2-byte lead 0xC0 at offset 2");
  CHECK(t->encode_pair("a", std::string("\xFF")).code() == errc::invalid_utf8);
  jitembed::decode_limits small;
  small.max_decoded_bytes = 4;
  CHECK(t->encode("cats a dog", true, {}, {}, small).code() == errc::limit_exceeded);
  small = {};
  small.max_elements = 100;
  CHECK(t->encode("a", true, {}, hf_padding{.length = 1000}, small).code() == errc::limit_exceeded);
  CHECK(t->encode("").value().ids.empty());
}

TEST_CASE("hostile and invalid tokenizer.json files are specific errors") {
  CHECK(code_of("") == errc::decode_failed);
  CHECK(code_of(wordpiece().substr(0, 120)) == errc::decode_failed);  // truncated file
  CHECK(message_of("[1, 2]") == "hf_tokenizer: test.json: (root): expected an object, got array");
  CHECK(message_of(R"({"version": "1.0"})") == "hf_tokenizer: test.json: model: missing field");
  CHECK(code_of(R"({"version": "2.0", "model": {}})") == errc::unsupported_version);
  // unknown component types name the type
  CHECK(message_of(R"({"model": {"type": "WordLevel", "vocab": {}, "unk_token": "x"}})") ==
        "hf_tokenizer: test.json: model: unsupported model type 'WordLevel'");
  CHECK(code_of(wordpiece(R"("normalizer": {"type": "Shout"})")) == errc::invalid_argument);
  CHECK(message_of(
            wordpiece(R"("pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "UnicodeScripts"}]})")) ==
        "hf_tokenizer: test.json: pre_tokenizer.pretokenizers[0]: unsupported pre_tokenizer type 'UnicodeScripts'");
  CHECK(code_of(wordpiece(R"("post_processor": {"type": "Nope"})")) == errc::invalid_argument);
  // wrong types, huge numbers
  CHECK(message_of(wordpiece("", R"(, "max_input_chars_per_word": "many")"))
            .find("max_input_chars_per_word: expected a non-negative integer") != std::string::npos);
  CHECK(code_of(R"({"model": {"type": "WordPiece", "vocab": {"a": 99999999999999}}})") == errc::limit_exceeded);
  CHECK(code_of(R"({"model": {"type": "WordPiece", "vocab": {"a": -1}}})") == errc::decode_failed);
  CHECK(code_of(R"({"model": {"type": "WordPiece", "vocab": {"a": 1.5}}})") == errc::decode_failed);
  CHECK(code_of(R"({"model": {"type": "Unigram", "vocab": [["a", "high"]]}})") == errc::decode_failed);
  CHECK(code_of(R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]], "unk_id": 5}})") == errc::decode_failed);
  // BPE: merges must be in the vocabulary, dropout must be off
  CHECK(message_of(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})") ==
        "hf_tokenizer: test.json: model.merges[0]: merged token 'ab' is not in the vocabulary");
  CHECK(code_of(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b c"]}})") == errc::decode_failed);
  CHECK(code_of(R"({"model": {"type": "BPE", "vocab": {}, "merges": [], "dropout": 0.1}})") == errc::invalid_argument);
  // regexes that do not compile, template tokens that are not declared
  CHECK(
      code_of(wordpiece(
          R"("pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated", "invert": false})")) ==
      errc::decode_failed);
  CHECK(
      code_of(wordpiece(
          R"("post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}],
                              "pair": [], "special_tokens": {}})")) == errc::decode_failed);
  CHECK(code_of(wordpiece(R"("normalizer": {"type": "Precompiled", "precompiled_charsmap": "!!notbase64"})")) ==
        errc::decode_failed);
  CHECK(code_of(wordpiece(R"("normalizer": {"type": "Precompiled", "precompiled_charsmap": "/////w=="})")) ==
        errc::decode_failed);
  // nesting deep enough to exhaust a recursive parser's stack
  CHECK(code_of(std::string(100000, '[') + std::string(100000, ']')) == errc::limit_exceeded);
  std::string seq = R"({"type": "Lowercase"})";
  for (int i = 0; i < 200; ++i) seq = R"({"type": "Sequence", "normalizers": [)" + seq + "]}";
  CHECK(code_of(wordpiece(R"("normalizer": )" + seq)) == errc::limit_exceeded);
  // files
  CHECK(hf_tokenizer::open("/nonexistent/tokenizer.json").code() == errc::not_found);
}

TEST_CASE("a model without the unk token it needs fails the encode, not the process") {
  auto t =
      hf_tokenizer::parse(R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"a": 0}}})", "test.json");
  REQUIRE(t.has_value());
  CHECK(t->encode("a").value().ids == std::vector<std::int64_t>{0});
  CHECK(t->encode("b").code() == errc::invalid_argument);
  auto u = hf_tokenizer::parse(R"({"model": {"type": "Unigram", "vocab": [["a", -1.0]]}})", "test.json");
  REQUIRE(u.has_value());
  CHECK(u->encode("aa").value().ids == std::vector<std::int64_t>{0, 0});
  CHECK(u->encode("ab").code() == errc::invalid_argument);
}
