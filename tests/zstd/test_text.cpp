// UTF-8 validation table, text codec and token codec round trips and their error codes.
#include <doctest/doctest.h>

#include <zstd.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "jitembed/codec/text.hpp"

using namespace jitembed;
using namespace jitembed::codec;

namespace {
struct bad_case {
  std::string bytes;
  std::size_t offset;
  const char* what;
};

byte_buffer plain_zstd(std::string_view s) {
  byte_buffer f(ZSTD_compressBound(s.size()));
  f.resize(ZSTD_compress(f.data(), f.size(), s.data(), s.size(), 3));
  return f;
}
}  // namespace

TEST_CASE("validate_utf8 accepts valid UTF-8") {
  const std::string valid[] = {
      "",
      "plain ascii",
      "caf\xC3\xA9",                              // U+00E9
      "\xE2\x82\xAC 5",                           // U+20AC
      "\xF0\x9D\x84\x9E",                         // U+1D11E
      "\xF4\x8F\xBF\xBF",                         // U+10FFFF, the largest
      "\xED\x9F\xBF",                             // U+D7FF, just below the surrogates
      "\xEE\x80\x80",                             // U+E000, just above them
      "\xC2\x80\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBF\xF0\x90\x80\x80",  // range edges
      std::string(40, 'a') + "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E" + std::string(33, 'b'),
      std::string("nul\0inside", 10),
  };
  for (const auto& s : valid) {
    CAPTURE(s);
    CHECK(validate_utf8(s).has_value());
  }
}

TEST_CASE("validate_utf8 rejects with the byte offset") {
  const std::vector<bad_case> cases = {
      {"\x80", 0, "unexpected continuation byte 0x80"},
      {"ab\xBF", 2, "unexpected continuation byte 0xBF"},
      {"ab\xC0\x80", 2, "overlong 2-byte lead 0xC0"},
      {"\xC1\xBF", 0, "overlong 2-byte lead 0xC1"},
      {"\xE0\x80\x80", 0, "overlong 3-byte sequence, lead 0xE0"},
      {"x\xE0\x9F\xBF", 1, "overlong 3-byte sequence, lead 0xE0"},
      {"\xF0\x80\x80\x80", 0, "overlong 4-byte sequence, lead 0xF0"},
      {"\xF0\x8F\xBF\xBF", 0, "overlong 4-byte sequence, lead 0xF0"},
      {"ok\xED\xA0\x80", 2, "surrogate code point, lead 0xED"},  // U+D800
      {"\xED\xBF\xBF", 0, "surrogate code point, lead 0xED"},    // U+DFFF
      {"\xF4\x90\x80\x80", 0, "code point above U+10FFFF, lead 0xF4"},  // U+110000
      {"\xF5\x80\x80\x80", 0, "code point above U+10FFFF, lead 0xF5"},
      {"\xFF", 0, "code point above U+10FFFF, lead 0xFF"},
      {"abc\xE2\x82", 3, "truncated sequence, lead 0xE2"},
      {"\xF0\x9F", 0, "truncated sequence, lead 0xF0"},
      {"\xC3", 0, "truncated sequence, lead 0xC3"},
      {"\xC3\x41", 1, "invalid continuation byte 0x41"},
      {"\xE2\x82\x41", 2, "invalid continuation byte 0x41"},
      {"\xF0\x9F\x98\xC3", 3, "invalid continuation byte 0xC3"},
      {std::string(40, 'a') + "\xC0\x80", 40, "overlong 2-byte lead 0xC0"},  // after the ASCII fast path
      {std::string(37, 'a') + "\xE2\x82\xAC" + std::string(20, 'z') + "\xED\xB0\x80", 60, "surrogate code point, lead 0xED"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.bytes);
    auto r = validate_utf8(c.bytes);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.code() == errc::invalid_utf8);
    CHECK(r.error().message == std::string("utf8: ") + c.what + " at offset " + std::to_string(c.offset));
  }
}

TEST_CASE("validate_utf8 agrees with a reference decoder on random byte strings") {
  // Reference: decode code points the slow way and check ranges.
  auto reference = [](const std::string& s) {
    std::size_t i = 0;
    while (i < s.size()) {
      const auto c = static_cast<unsigned char>(s[i]);
      std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (!len || i + len > s.size()) return false;
      std::uint32_t cp = len == 1 ? c : c & (0x7f >> len);
      for (std::size_t k = 1; k < len; ++k) {
        const auto d = static_cast<unsigned char>(s[i + k]);
        if ((d & 0xC0) != 0x80) return false;
        cp = cp << 6 | (d & 0x3f);
      }
      const std::uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
      if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
      i += len;
    }
    return true;
  };
  std::mt19937 rng(3);
  int valid = 0;
  for (int n = 0; n < 20000; ++n) {
    std::string s(rng() % 24, '\0');
    for (auto& ch : s) {
      const unsigned r = rng();
      ch = static_cast<char>(r % 3 == 0 ? (r >> 8) % 0x80 : r % 3 == 1 ? 0x80 + (r >> 8) % 0x40 : 0xC0 + (r >> 8) % 0x40);
    }
    const bool ref = reference(s);
    valid += ref;
    if (validate_utf8(s).has_value() != ref) {
      CAPTURE(s);
      CHECK(validate_utf8(s).has_value() == ref);
    }
  }
  CHECK(valid > 100);
}

TEST_CASE("text round trips") {
  const std::string caption = "A caf\xC3\xA9 in Z\xC3\xBCrich at dusk, \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E signage, \xF0\x9F\x8C\x83";
  auto enc = encode_text(caption, 5);
  REQUIRE(enc.has_value());
  auto dec = decode_text(*enc, decode_limits{});
  REQUIRE(dec.has_value());
  CHECK(*dec == caption);
  // A plain zstd frame: interoperable.
  std::string ref(caption.size(), '\0');
  CHECK(ZSTD_decompress(ref.data(), ref.size(), enc->data(), enc->size()) == caption.size());
  CHECK(ref == caption);

  const text_codec tc;
  const tensor_view v(caption.data(), dtype::u8, shape{static_cast<std::int64_t>(caption.size())});
  auto buf = encode_to_buffer(tc, v);
  REQUIRE(buf.has_value());
  auto t = tc.decode(*buf, decode_limits{});
  REQUIRE(t.has_value());
  CHECK(t->dtype() == dtype::u8);
  CHECK(as_string_view(t->bytes()) == caption);

  auto empty = encode_text("");
  REQUIRE(empty.has_value());
  CHECK(decode_text(*empty, decode_limits{}).value().empty());
}

TEST_CASE("text errors") {
  const std::string bad = "ok then \xED\xA0\x80";
  CHECK(encode_text(bad).code() == errc::invalid_utf8);
  const tensor_view v(bad.data(), dtype::u8, shape{static_cast<std::int64_t>(bad.size())});
  byte_buffer out(256);
  auto e = text_codec().encode(v, out);
  CHECK(e.code() == errc::invalid_utf8);
  CHECK(e.error().message == "utf8: surrogate code point, lead 0xED at offset 8");
  // Untrusted frame holding invalid UTF-8.
  const auto f = plain_zstd(bad);
  CHECK(decode_text(f, decode_limits{}).code() == errc::invalid_utf8);
  CHECK(text_codec().decode(f, decode_limits{}).code() == errc::invalid_utf8);
  // Limits.
  const std::string big(100000, 'x');
  auto eb = encode_text(big);
  REQUIRE(eb.has_value());
  decode_limits lim;
  lim.max_decoded_bytes = 4096;
  CHECK(decode_text(*eb, lim).code() == errc::limit_exceeded);
  // Wrong tensors, short buffers, garbage.
  std::vector<std::int32_t> ints(4);
  CHECK(text_codec().max_encoded_size(tensor_view(ints.data(), dtype::i32, shape{4})).code() == errc::dtype_mismatch);
  CHECK(text_codec().encode(tensor_view(big.data(), dtype::u8, shape{100, 1000}), out).code() == errc::invalid_argument);
  CHECK(text_codec().encode(tensor_view(big.data(), dtype::u8, shape{100000}), mutable_bytes(out).first(8)).code() ==
        errc::buffer_too_small);
  const std::string junk = "definitely not zstd";
  CHECK(decode_text(as_bytes_view(junk), decode_limits{}).code() == errc::decode_failed);
}

TEST_CASE_TEMPLATE("token ids round trip, shuffled", T, std::int32_t, std::int64_t) {
  std::mt19937 rng(8);
  std::vector<T> ids(5003);
  for (auto& id : ids) id = static_cast<T>(rng() % 50257);
  const tensor_view v(ids.data(), dtype_of_v<T>, shape{static_cast<std::int64_t>(ids.size())});
  auto enc = encode_tokens(v);
  REQUIRE(enc.has_value());
  auto dec = decode_tokens(*enc, dtype_of_v<T>, decode_limits{});
  REQUIRE(dec.has_value());
  CHECK(dec->dtype() == dtype_of_v<T>);
  CHECK(dec->shape() == shape{static_cast<std::int64_t>(ids.size())});
  CHECK(std::memcmp(dec->data(), ids.data(), ids.size() * sizeof(T)) == 0);
  // Shuffling pays off against plain zstd of the same ids.
  const auto plain = plain_zstd(std::string_view(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(T)));
  MESSAGE((sizeof(T) * 8) << "-bit ids: shuffled " << enc->size() << " B, plain " << plain.size() << " B");
  CHECK(enc->size() < plain.size());

  decode_limits lim;
  lim.max_elements = 5000;  // counted in tokens, not bytes
  CHECK(decode_tokens(*enc, dtype_of_v<T>, lim).code() == errc::limit_exceeded);
  lim.max_elements = 5003;
  CHECK(decode_tokens(*enc, dtype_of_v<T>, lim).has_value());
}

TEST_CASE("token errors") {
  std::vector<float> f(8);
  CHECK(encode_tokens(tensor_view(f.data(), dtype::f32, shape{8})).code() == errc::dtype_mismatch);
  std::vector<std::int32_t> m(8);
  CHECK(encode_tokens(tensor_view(m.data(), dtype::i32, shape{2, 4})).code() == errc::invalid_argument);
  auto ok = encode_tokens(tensor_view(m.data(), dtype::i32, shape{8}));
  REQUIRE(ok.has_value());
  CHECK(decode_tokens(*ok, dtype::f32, decode_limits{}).code() == errc::dtype_mismatch);
  const auto seven = plain_zstd("1234567");
  auto r = decode_tokens(seven, dtype::i32, decode_limits{});
  CHECK(r.code() == errc::corrupt_data);
  CHECK(r.error().message == "tokens: decoded 7 bytes, not a multiple of 4 (i32)");
  CHECK(decode_tokens(seven, dtype::i64, decode_limits{}).code() == errc::corrupt_data);
}
