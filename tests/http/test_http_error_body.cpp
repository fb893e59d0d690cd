// The HTTP layer's own error bodies escape through core's JSON string writer: one \uXXXX per code point
// (not per byte), invalid bytes as U+FFFD, ASCII-only bodies.
#include <doctest/doctest.h>

#include <string>

#include "jitembed/net/http/detail/wire.hpp"

using namespace jitembed;

TEST_CASE("http error body: UTF-8 messages round-trip, invalid bytes become U+FFFD") {
  const std::string msg = "http: bad target '/v2/models/caf\xC3\xA9/\xF0\x9F\x98\x80\"\\'";
  const auto r = net::http::detail::error_response(400, msg);
  CHECK(r.status == 400);
  CHECK(r.body == "{\"error\":\"http: bad target '/v2/models/caf\\u00E9/\\uD83D\\uDE00\\\"\\\\'\"}");
  // (the per-byte escaping of old wrote \u00c3\u00a9 for é, which a JSON reader turns into "Ã©")

  const auto bad = net::http::detail::error_response(400, "x\xFFy");
  CHECK(bad.body == "{\"error\":\"x\\uFFFDy\"}");
  for (char c = 0; c < 0x20; ++c) {  // control characters stay escaped: the body is one valid JSON line
    const auto b = net::http::detail::error_response(500, std::string("a") + c);
    for (char k : b.body) CHECK(static_cast<unsigned char>(k) >= 0x20);
  }
}
