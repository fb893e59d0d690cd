// as_handler() shares ownership of the service's state: a handler copy kept after the service is destroyed
// still answers (503 unavailable, like a draining service) instead of touching freed memory. Run under ASan
// (build/asan) to see the difference.
#include <doctest/doctest.h>

#include <future>
#include <optional>
#include <utility>

#include "server_test_util.hpp"

using namespace server_test;
using jitembed::server::model_config;
using jitembed::server::server_config;
using jitembed::server::service;

TEST_CASE("a handler kept after its service is destroyed answers 503 unavailable, not a dangling call") {
  const auto req = bytes_request("text", {"row"});
  jitembed::net::http::handler kept;
  {
    auto s = service::create(text_config()).value();
    kept = s.as_handler();
    CHECK(call_handler(kept, "POST", "/v2/models/text-embed/infer", req.body, req.headers).status == 200);
  }  // the service is destroyed: drained and unloaded; `kept` still owns its state
  const auto r = call_handler(kept, "POST", "/v2/models/text-embed/infer", req.body, req.headers);
  CHECK(r.status == 503);
  CHECK(r.header("Retry-After") == "1");
  CHECK(nlohmann::json::parse(r.body).at("errc") == "unavailable");
  CHECK(call_handler(kept, "GET", "/v2/health/ready").status == 503);
  CHECK(call_handler(kept, "GET", "/v2/models/text-embed/ready").status == 503);
  CHECK(call_handler(kept, "GET", "/v2/health/live").status == 200);
  // a copy of the copy, and the last one dropped: the state goes with it
  auto copy = kept;
  kept = nullptr;
  CHECK(call_handler(copy, "POST", "/v2/models/text-embed/infer", req.body, req.headers).status == 503);
}

TEST_CASE("a handler of a moved-from and destroyed service keeps serving through the service it moved into") {
  const auto req = bytes_request("text", {"row"});
  std::optional<service> first(service::create(text_config()).value());
  const auto h = first->as_handler();
  service second = std::move(*first);
  first.reset();  // the moved-from shell goes; the state lives in `second`
  CHECK(call_handler(h, "POST", "/v2/models/text-embed/infer", req.body, req.headers).status == 200);
  second.shutdown();
  CHECK(call_handler(h, "POST", "/v2/models/text-embed/infer", req.body, req.headers).status == 503);
}
