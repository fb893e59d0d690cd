// hf_tokenizer against the Python tokenizers library, caption for caption: the reference make_corpus.py writes
// (ctest fixture tokenizers/reference) for CLIP, GPT-2, Llama-3, BERT, T5 and the pipelines that cover the rest.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "jitembed/models/hf_tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using jitembed::models::hf_padding;
using jitembed::models::hf_tokenizer;
using jitembed::models::hf_truncation;

#ifndef JITEMBED_TOKENIZERS_REFERENCE
#define JITEMBED_TOKENIZERS_REFERENCE ""
#endif

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct reader {
  std::string data;
  std::size_t at = 0;
  template <class T>
  T get() {
    T v{};
    REQUIRE(at + sizeof(T) <= data.size());
    std::memcpy(&v, data.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  template <class T>
  std::vector<T> array(std::size_t n) {
    REQUIRE(at + n * sizeof(T) <= data.size());
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), data.data() + at, n * sizeof(T));
    at += n * sizeof(T);
    return v;
  }
};

const fs::path& reference_dir() {
  static const fs::path dir = JITEMBED_TOKENIZERS_REFERENCE;
  return dir;
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> captions = [] {
    reader r{slurp(reference_dir() / "corpus.bin")};
    std::vector<std::string> out;
    REQUIRE_MESSAGE(r.data.size() >= 12,
                    "no reference corpus in " << reference_dir() << " (ctest -R tokenizers/reference)");
    REQUIRE(r.data.compare(0, 8, "JTKCORP1") == 0);
    r.at = 8;
    const auto n = r.get<std::uint32_t>();
    for (std::uint32_t i = 0; i < n; ++i) {
      const auto len = r.get<std::uint32_t>();
      REQUIRE(r.at + len <= r.data.size());
      out.emplace_back(r.data.substr(r.at, len));
      r.at += len;
    }
    return out;
  }();
  return captions;
}

std::string escaped(const std::string& s) {
  std::ostringstream o;
  for (const unsigned char c : s.substr(0, 300)) {
    if (c < 0x20 || c == 0x7F)
      o << "\\x" << std::hex << static_cast<int>(c) << std::dec;
    else
      o << c;
  }
  if (s.size() > 300) o << "...(" << s.size() << " bytes)";
  return o.str();
}

template <class T>
std::string list(const std::vector<T>& v) {
  std::ostringstream o;
  o << "[";
  for (std::size_t i = 0; i < v.size(); ++i) o << (i ? " " : "") << static_cast<std::int64_t>(v[i]);
  return o.str() + "]";
}

// Every caption of every case whose name starts with prefix: ids, type ids and mask equal, or both fail.
void check_cases(const std::string& prefix) {
  const auto manifest = nlohmann::json::parse(slurp(reference_dir() / "cases.json"));
  const auto& captions = corpus();
  int cases = 0;
  for (const auto& c : manifest["cases"]) {
    const std::string name = c["name"];
    if (name.rfind(prefix, 0) != 0) continue;
    ++cases;
    CAPTURE(name);
    auto tok = hf_tokenizer::open(reference_dir() / (c["tokenizer"].get<std::string>() + ".json"));
    REQUIRE_MESSAGE(tok.has_value(), (tok ? "" : tok.error().message));
    hf_truncation tr;
    if (!c["truncation"].is_null()) {
      tr.max_length = c["truncation"]["max_length"];
      tr.how = c["truncation"]["strategy"] == "only_first" ? hf_truncation::strategy::only_first
                                                           : hf_truncation::strategy::longest_first;
    }
    hf_padding pad;
    if (!c["padding"].is_null()) {
      pad.length = c["padding"]["length"];
      pad.pad_id = c["padding"]["pad_id"];
      pad.pad_type_id = c["padding"]["pad_type_id"];
    }
    const bool add = c["add_special_tokens"], pair = c["pair"];
    reader r{slurp(reference_dir() / c["file"].get<std::string>())};
    const auto n = r.get<std::uint32_t>();
    const auto first = r.array<std::uint32_t>(n);
    const auto second = pair ? r.array<std::uint32_t>(n) : std::vector<std::uint32_t>();
    const auto failed = r.array<std::uint8_t>(n);
    const auto offsets = r.array<std::uint64_t>(n + 1);
    const auto ids = r.array<std::uint32_t>(offsets[n]);
    const auto types = r.array<std::uint8_t>(offsets[n]);
    const auto mask = r.array<std::uint8_t>(offsets[n]);
    std::size_t mismatches = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::string& a = captions.at(first[i]);
      auto got = pair ? tok->encode_pair(a, captions.at(second[i]), add, tr, pad) : tok->encode(a, add, tr, pad);
      const auto b = offsets[i], e = offsets[i + 1];
      const std::vector<std::int64_t> want_ids(ids.begin() + static_cast<std::ptrdiff_t>(b),
                                               ids.begin() + static_cast<std::ptrdiff_t>(e));
      const std::vector<std::int64_t> want_types(types.begin() + static_cast<std::ptrdiff_t>(b),
                                                 types.begin() + static_cast<std::ptrdiff_t>(e));
      const std::vector<std::int64_t> want_mask(mask.begin() + static_cast<std::ptrdiff_t>(b),
                                                mask.begin() + static_cast<std::ptrdiff_t>(e));
      const bool same = failed[i] ? !got.has_value()
                                  : got.has_value() && got->ids == want_ids && got->type_ids == want_types &&
                                        got->attention_mask == want_mask;
      if (same) continue;
      if (++mismatches > 1) continue;  // the first is reported in full, the rest counted
      std::ostringstream o;
      o << name << " caption " << first[i] << ": \"" << escaped(a) << "\"";
      if (pair) o << " + \"" << escaped(captions.at(second[i])) << "\"";
      o << "\n  expected "
        << (failed[i] ? std::string("an error")
                      : list(want_ids) + " types " + list(want_types) + " mask " + list(want_mask));
      o << "\n  got      "
        << (got ? list(got->ids) + " types " + list(got->type_ids) + " mask " + list(got->attention_mask)
                : got.error().message);
      FAIL_CHECK(o.str());
    }
    CHECK_MESSAGE(mismatches == 0, name << ": " << mismatches << " of " << n << " captions differ");
  }
  CHECK_MESSAGE(cases > 0, "no reference case named " << prefix << "* in " << reference_dir());
}

}  // namespace

TEST_CASE("agreement: CLIP (byte-level BPE, </w>, CLIP's normalizer and Split regex)") { check_cases("clip"); }
TEST_CASE("agreement: GPT-2 style byte-level BPE") { check_cases("gpt2"); }
TEST_CASE("agreement: Llama-3 style BPE (Split regex, ignore_merges, BOS template)") { check_cases("llama3"); }
TEST_CASE("agreement: BERT WordPiece (singles, pairs, truncation)") { check_cases("bert"); }
TEST_CASE("agreement: T5 Unigram (Precompiled, Nmt + NFKC, Metaspace schemes, byte_fallback)") { check_cases("t5"); }
TEST_CASE("agreement: other normalizers, pre-tokenizers, post-processors and added-token flags") {
  check_cases("sink");
}
