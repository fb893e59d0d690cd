// HTTP Content-Encoding gzip / deflate on the infer route (what tritonclient's request_compression_algorithm
// and response_compression_algorithm send): request bodies inflated (bounded), answers deflated on
// Accept-Encoding, bad streams and unknown codings refused with a specific error; the same outputs as plain.
#include <doctest/doctest.h>

#include "server_test_util.hpp"

#include "jitembed/server/detail/content_encoding.hpp"

using namespace server_test;
namespace sd = jitembed::server::detail;

TEST_CASE("Content-Encoding gzip / deflate: inflated bodies, deflated answers, bounded and checked") {
  auto svc = server::service::create(text_config()).value();
  const std::vector<std::string_view> rows = {"a cat on a mat", "the sea at night", "x"};
  const auto e = bytes_request("text", rows);
  const auto plain = infer(svc, "text-embed", e);
  REQUIRE(plain.status == 200);
  const auto want = decode(plain);

  for (const auto coding : {sd::content_coding::gzip, sd::content_coding::deflate}) {
    CAPTURE(sd::to_string(coding));
    auto headers = e.headers;
    headers.emplace_back("Content-Encoding", std::string(sd::to_string(coding)));
    headers.emplace_back("Accept-Encoding", std::string(sd::to_string(coding)));
    const auto r = call(svc, "POST", "/v2/models/text-embed/infer", sd::deflate_body(e.body, coding).value(), headers);
    REQUIRE(r.status == 200);
    CHECK(r.header("Content-Encoding") == sd::to_string(coding));
    reply inflated = r;
    inflated.body = sd::inflate_body(r.body, coding, 1 << 26).value();
    const auto got = decode(inflated);
    REQUIRE(got.outputs.size() == want.outputs.size());
    for (std::size_t k = 0; k < got.outputs.size(); ++k) {
      CHECK(got.outputs[k].name == want.outputs[k].name);
      CHECK(std::string_view(reinterpret_cast<const char*>(got.outputs[k].data.data()), got.outputs[k].data.size()) ==
            std::string_view(reinterpret_cast<const char*>(want.outputs[k].data.data()), want.outputs[k].data.size()));
    }
  }

  // a gzip body that is not gzip, a truncated one, trailing bytes: 400 decode_failed
  auto h = e.headers;
  h.emplace_back("Content-Encoding", "gzip");
  const auto gz = sd::deflate_body(e.body, sd::content_coding::gzip).value();
  for (const std::string& bad : {std::string("not gzip at all"), gz.substr(0, gz.size() / 2), gz + "junk"}) {
    const auto r = call(svc, "POST", "/v2/models/text-embed/infer", bad, h);
    CHECK(r.status == 400);
    CHECK(r.body.find("decode_failed") != std::string::npos);
  }
  // a bomb: 64 MiB of zeros in a few KiB, past max_body_bytes (1 MiB here): 400 limit_exceeded, nothing decoded
  auto small = text_config();
  small.protocol.max_body_bytes = 1 << 20;
  auto svc2 = server::service::create(small).value();
  const auto bomb = sd::deflate_body(std::string(64 << 20, '\0'), sd::content_coding::gzip).value();
  CHECK(bomb.size() < (1 << 20));
  const auto r = call(svc2, "POST", "/v2/models/text-embed/infer", bomb, h);
  CHECK(r.status == 400);
  CHECK(r.body.find("limit_exceeded") != std::string::npos);
  // an unknown coding: 400 naming it; the service still serves
  auto hb = e.headers;
  hb.emplace_back("Content-Encoding", "br");
  const auto rb = call(svc, "POST", "/v2/models/text-embed/infer", e.body, hb);
  CHECK(rb.status == 400);
  CHECK(rb.body.find("'br'") != std::string::npos);
  CHECK(infer(svc, "text-embed", e).status == 200);

  CHECK(sd::pick_accept_encoding("br, deflate;q=0.5, gzip") == sd::content_coding::gzip);
  CHECK(sd::pick_accept_encoding("gzip;q=0, deflate") == sd::content_coding::deflate);
  CHECK(sd::pick_accept_encoding("identity") == sd::content_coding::identity);
}
