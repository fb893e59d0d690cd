// The one UTF-8 validator, JSON string writer and little-endian helper of core: round trips and every kind
// of invalid sequence (overlong, surrogate, truncated, above U+10FFFF, stray and bad continuation bytes).
#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "jitembed/core/byte_order.hpp"
#include "jitembed/core/json_string.hpp"
#include "jitembed/core/preprocess_params.hpp"
#include "jitembed/core/utf8.hpp"

using namespace jitembed;

namespace {

// Standard UTF-8 encoder, written independently of the decoder under test.
std::string encode(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string message(std::string_view s) {
  auto r = validate_utf8(s);
  REQUIRE_FALSE(r);
  CHECK(r.code() == errc::invalid_utf8);
  CHECK_FALSE(is_valid_utf8(s));
  return r.error().message;
}

}  // namespace

TEST_CASE("utf8: every scalar value round-trips through next_code_point") {
  for (std::uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x3000 ? 1 : 97)) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string s = encode(cp);
    std::size_t i = 0;
    REQUIRE(next_code_point(s, i) == static_cast<std::int32_t>(cp));
    CHECK(i == s.size());
    CHECK(is_valid_utf8(s));
    CHECK(validate_utf8(s));
  }
  for (std::uint32_t cp : {0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xD7FFu, 0xE000u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    const std::string s = "a" + encode(cp) + "b";
    CHECK(is_valid_utf8(s));
  }
  // longer than the 16-byte ASCII fast path, with the multi-byte sequence after it
  CHECK(validate_utf8(std::string(40, 'x') + "\xC3\xA9" + std::string(17, 'y')));
}

TEST_CASE("utf8: invalid sequences are rejected with the offset and the byte") {
  SUBCASE("overlong") {
    CHECK(message("ab\xC0\xAF") == "utf8: overlong 2-byte lead 0xC0 at offset 2");
    CHECK(message("\xC1\xBF") == "utf8: overlong 2-byte lead 0xC1 at offset 0");
    CHECK(message("\xE0\x80\xAF") == "utf8: overlong 3-byte sequence, lead 0xE0 at offset 0");
    CHECK(message("\xF0\x8F\xBF\xBF") == "utf8: overlong 4-byte sequence, lead 0xF0 at offset 0");
  }
  SUBCASE("surrogates") {
    CHECK(message("\xED\xA0\x80") == "utf8: surrogate code point, lead 0xED at offset 0");
    CHECK(message("x\xED\xBF\xBF") == "utf8: surrogate code point, lead 0xED at offset 1");
    CHECK(is_valid_utf8("\xED\x9F\xBF"));  // U+D7FF
  }
  SUBCASE("above U+10FFFF") {
    CHECK(message("\xF4\x90\x80\x80") == "utf8: code point above U+10FFFF, lead 0xF4 at offset 0");
    CHECK(message("\xF5\x80\x80\x80") == "utf8: code point above U+10FFFF, lead 0xF5 at offset 0");
    CHECK(message("\xFF") == "utf8: code point above U+10FFFF, lead 0xFF at offset 0");
  }
  SUBCASE("truncated") {
    CHECK(message("abc\xE2\x82") == "utf8: truncated sequence, lead 0xE2 at offset 3");
    CHECK(message("\xF0\x9F\x98") == "utf8: truncated sequence, lead 0xF0 at offset 0");
    CHECK(message("\xC3") == "utf8: truncated sequence, lead 0xC3 at offset 0");
  }
  SUBCASE("continuation bytes") {
    CHECK(message("a\x80") == "utf8: unexpected continuation byte 0x80 at offset 1");
    CHECK(message("\xE2\x28\xA1") == "utf8: invalid continuation byte 0x28 at offset 1");
    CHECK(message("\xF0\x9F\x98\x41") == "utf8: invalid continuation byte 0x41 at offset 3");
  }
  std::size_t i = 0;
  CHECK(next_code_point("\xED\xA0\x80", i) == -1);
  CHECK(i == 0);
}

TEST_CASE("json_string: ASCII output, escapes by name, \\uXXXX of code points, surrogate pairs") {
  CHECK(json_string("plain") == "\"plain\"");
  CHECK(json_string("q\"b\\s/") == "\"q\\\"b\\\\s/\"");
  CHECK(json_string("\b\f\n\r\t\x01\x1f") == "\"\\b\\f\\n\\r\\t\\u0001\\u001F\"");
  // one escape per code point, not per byte (the HTTP layer once wrote \u00C3\u00A9 for é)
  CHECK(json_string("caf\xC3\xA9") == "\"caf\\u00E9\"");
  CHECK(json_string("\xE2\x82\xAC") == "\"\\u20AC\"");
  CHECK(json_string("\xF0\x9F\x98\x80") == "\"\\uD83D\\uDE00\"");
  // invalid bytes become U+FFFD with the replace policy, and fail with the fail policy
  CHECK(json_string("a\xFF" "b") == "\"a\\uFFFDb\"");
  CHECK(json_string("\xC0\xAF") == "\"\\uFFFD\\uFFFD\"");
  std::string out;
  CHECK_FALSE(append_json_string(out, "a\xED\xA0\x80"));
  out.clear();
  CHECK(append_json_string(out, "ok"));
  CHECK(out == "\"ok\"");
}

TEST_CASE("json_string round-trips every code point through a JSON \\u decoder") {
  // decode what json_string wrote (\\uXXXX and surrogate pairs) and compare with the input code point
  auto parse_u = [](std::string_view s, std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = s[at + k];
      v = v * 16 + static_cast<std::uint32_t>(c <= '9' ? c - '0' : c - 'A' + 10);
    }
    return v;
  };
  for (std::uint32_t cp = 0x80; cp <= 0x10FFFF; cp += 331) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string j = json_string(encode(cp));
    std::uint32_t got = parse_u(j, 3);
    if (got >= 0xD800 && got <= 0xDBFF) got = 0x10000 + ((got - 0xD800) << 10) + (parse_u(j, 9) - 0xDC00);
    REQUIRE(got == cp);
  }
}

TEST_CASE("byte_order: little-endian loads and stores of every width") {
  std::array<std::byte, 8> b{};
  store_le(b.data(), std::uint32_t{0x11223344});
  CHECK(b[0] == std::byte{0x44});
  CHECK(b[3] == std::byte{0x11});
  CHECK(load_le<std::uint32_t>(b.data()) == 0x11223344u);
  store_le(b.data(), std::uint64_t{0x0102030405060708ull});
  CHECK(b[0] == std::byte{0x08});
  CHECK(b[7] == std::byte{0x01});
  CHECK(load_le<std::uint64_t>(b.data()) == 0x0102030405060708ull);
  CHECK(load_le<std::uint16_t>(b.data() + 1) == 0x0607u);  // unaligned
  store_le(b.data() + 3, std::int16_t{-2});
  CHECK(load_le<std::int16_t>(b.data() + 3) == -2);
  unsigned char u[4] = {0xEF, 0xBE, 0xAD, 0xDE};
  CHECK(load_le<std::uint32_t>(u) == 0xDEADBEEFu);
  for (std::uint64_t v : {0ull, 1ull, 0xFFull, 0x8000000000000000ull, ~0ull}) {
    store_le(b.data(), v);
    CHECK(load_le<std::uint64_t>(b.data()) == v);
  }
}

TEST_CASE("preprocess_params lives in core") {
  CHECK(preprocess_params{}.set("frame_stride", 4).set("bucket", 256).str() == "bucket=256;frame_stride=4;");
  CHECK(preprocess_params{}.set("a;b", "x=y").str() == "a\\;b=x\\=y;");
}
