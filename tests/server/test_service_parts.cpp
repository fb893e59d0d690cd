// The parts of the service's core on their own: the route table, the bearer-token check, and the registry
// with the inference pipeline driven without any HTTP type (what a gRPC front end would do).
#include <doctest/doctest.h>

#include <future>
#include <string>
#include <vector>

#include "jitembed/models/reference_factory.hpp"
#include "jitembed/server/detail/auth.hpp"
#include "jitembed/server/detail/pipeline.hpp"
#include "jitembed/server/http/response.hpp"
#include "jitembed/server/detail/registry.hpp"
#include "jitembed/server/http/routes.hpp"
#include "server_test_util.hpp"

using namespace server_test;
namespace sd = jitembed::server::detail;
using jitembed::errc;
using jitembed::server::model_config;
using jitembed::server::server_config;

TEST_CASE("route table: literals, {captures}, a final **, methods in order added, HEAD as GET") {
  sd::route_table<int> t;
  t.add(sd::methods::get, "/v2/models/{model}", 1);
  t.add(sd::methods::get, "/v2/models/{model}/versions/{version}", 2);
  t.add(sd::methods::post, "/v2/models/{model}/infer", 3);
  t.add(sd::methods::post, "/v2/repository/**", 4);
  t.add(sd::methods::any, "/v2/repository/**", 5);
  sd::route_match m;
  const auto find = [&](std::string_view method, std::string_view target) {
    const int* h = t.find(method, sd::split_path(target), m);
    return h ? *h : 0;
  };
  CHECK(find("GET", "/v2/models/text-embed") == 1);
  CHECK(m["model"] == "text-embed");
  CHECK(m["version"].empty());
  CHECK(find("HEAD", "//v2/models/x/?q=1") == 1);  // empty segments and the query are dropped
  CHECK(m["model"] == "x");
  CHECK(find("GET", "/v2/models/x/versions/7") == 2);
  CHECK(m["version"] == "7");
  CHECK(find("POST", "/v2/models/x/infer") == 3);
  CHECK(find("GET", "/v2/models/x/infer") == 0);  // no GET route of that shape
  CHECK(find("POST", "/v2/models/x") == 0);
  CHECK(find("POST", "/v2/repository") == 4);  // ** matches no segment too
  CHECK(find("POST", "/v2/repository/index") == 4);
  CHECK(find("PUT", "/v2/repository/index") == 5);
  CHECK(find("GET", "/v2/repository/a/b/c") == 5);
  CHECK(find("GET", "/metrics") == 0);
  CHECK(m.params.empty());
}

TEST_CASE("bearer_auth: only 'Bearer <token>' passes, no token allows everything") {
  const sd::bearer_auth none("");
  CHECK_FALSE(none.enabled());
  CHECK(none.allows(""));
  const sd::bearer_auth auth("s3cret");
  CHECK(auth.enabled());
  CHECK(auth.allows("Bearer s3cret"));
  CHECK_FALSE(auth.allows("Bearer s3cre"));
  CHECK_FALSE(auth.allows("Bearer s3cret2"));
  CHECK_FALSE(auth.allows("bearer s3cret"));
  CHECK_FALSE(auth.allows("s3cret"));
  CHECK_FALSE(auth.allows(""));
}

TEST_CASE("registry + pipeline without HTTP: infer, unknown model, draining") {
  server_config cfg;
  cfg.preprocess_threads = 1;
  sd::model_registry registry(jitembed::models::reference_factory);
  sd::inference_pipeline pipeline(registry, cfg);
  REQUIRE(registry.load(model_config{.name = "text-embed", .params = {{"text_dim", 8}, {"text_max_length", 8}}}));
  CHECK(registry.versions_of("text-embed") == std::vector<std::string>{"1"});

  const auto run = [&](std::string model) {
    const auto e = bytes_request("text", {"a caption", "another"});
    std::promise<jitembed::result<sd::infer_output>> p;
    auto fut = p.get_future();
    http::request req{.headers = e.headers, .body = e.body};
    pipeline.infer(model, "", sd::body_decoder(std::move(req), cfg.protocol),
                   [&p](jitembed::result<sd::infer_output> r) { p.set_value(std::move(r)); });
    REQUIRE(fut.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    return fut.get();
  };
  auto ok = run("text-embed");
  REQUIRE(ok);
  const auto msg = ks::encode_response(**ok).value();
  const auto resp = ks::decode_response(msg.flatten(), msg.header_length).value();
  CHECK(resp.model_name == "text-embed");
  CHECK(resp.model_version == "1");
  REQUIRE_FALSE(resp.outputs.empty());
  CHECK(resp.outputs.front().shape.front() == 2);
  const auto st = registry.status();
  REQUIRE(st.size() == 1);
  CHECK(st[0].success == 1);
  CHECK(st[0].admitted_rows == 0);

  // a request the front end decoded itself (what a gRPC front end hands over): tensors view into `storage`
  {
    const auto e = bytes_request("text", {"x", "y", "z"});
    auto storage = std::make_shared<const std::string>(e.body);
    const auto hl = http::find_header(e.headers, "inference-header-content-length");
    auto req = ks::decode_request(*storage, std::stoull(std::string(hl))).value();
    std::promise<jitembed::result<sd::infer_output>> p;
    auto fut = p.get_future();
    pipeline.infer("text-embed", "1", std::move(req), storage,
                   [&p](jitembed::result<sd::infer_output> r) { p.set_value(std::move(r)); });
    REQUIRE(fut.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    auto r = fut.get();
    REQUIRE(r);
    CHECK((*r)->outputs.front().shape.front() == 3);
  }

  CHECK(run("no-such-model").code() == errc::not_found);
  registry.begin_drain();
  const auto drained = run("text-embed");
  CHECK(drained.code() == errc::unavailable);
  CHECK(registry.load(model_config{.name = "text-embed", .version = "2"}).code() == errc::unavailable);
  registry.shutdown();
  CHECK(registry.loaded().empty());
}
