// service as a movable value (docs/api.md): service::create loads the configured models in one step; a
// handler taken before a move keeps serving after it; status() reports each version's load.
#include <doctest/doctest.h>

#include <future>
#include <utility>

#include "../batching/eventually.hpp"
#include "server_test_util.hpp"

using namespace server_test;
using jitembed::server::model_config;
using jitembed::server::server_config;
using jitembed::server::service;
using jitembed::test::eventually;

TEST_CASE("service::create loads and warms the configured models, or fails with the first model's error") {
  auto s = service::create(text_config());
  REQUIRE(s);
  CHECK(s->loaded() == std::vector<std::pair<std::string, std::string>>{{"text-embed", "1"}});
  CHECK(call(*s, "GET", "/v2/models/text-embed/ready").status == 200);

  auto bad = text_config();
  bad.models.push_back(model_config{.name = "no-such-model"});
  auto f = service::create(bad);
  REQUIRE_FALSE(f);
  CHECK(f.code() == jitembed::errc::not_found);

  auto bad_params = text_config();
  bad_params.models[0].params["text_dim"] = "wide";
  CHECK(service::create(bad_params).code() == jitembed::errc::invalid_argument);

  // batching settings the batcher refuses fail the load with invalid_argument (model_instance::create
  // returns it)
  auto no_instances = text_config();
  no_instances.models[0].instances = 0;
  auto z = service::create(no_instances);
  REQUIRE_FALSE(z);
  CHECK(z.code() == jitembed::errc::invalid_argument);
}

TEST_CASE("a handler taken before a move serves after it, the moved-into service owns the models") {
  auto made = service::create(text_config());
  REQUIRE(made);
  const auto handler = made->as_handler();
  service s = std::move(*made);
  const auto req = bytes_request("text", {"after the move"});
  const auto r = call_handler(handler, "POST", "/v2/models/text-embed/infer", req.body, req.headers);
  CHECK(r.status == 200);
  CHECK(s.loaded().size() == 1);
  auto t = service::create(server_config{}).value();
  t = std::move(s);  // the empty service t held is shut down, t now serves text-embed
  CHECK(call_handler(handler, "POST", "/v2/models/text-embed/infer", req.body, req.headers).status == 200);
  CHECK(t.ready());
}

TEST_CASE("status() reports admitted and running rows of a busy model, then its counters") {
  auto s = service::create(text_config(200'000)).value();  // each batch takes 200 ms
  const auto st0 = s.status();
  REQUIRE(st0.size() == 1);
  CHECK(st0[0].name == "text-embed");
  CHECK(st0[0].version == "1");
  CHECK(st0[0].admitted_rows == 0);
  CHECK(st0[0].max_inflight_rows == jitembed::server::default_inflight_rows(1024));
  const auto req = bytes_request("text", {"a", "b", "c"});
  auto pending = send(s, "POST", "/v2/models/text-embed/infer", req.body, req.headers);
  REQUIRE(eventually([&] {
    const auto st = s.status();
    return st.size() == 1 && st[0].admitted_rows == 3 && st[0].running_rows + st[0].queued_rows == 3;
  }));
  REQUIRE(pending.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  CHECK(pending.get().status == 200);
  const auto st1 = s.status();
  REQUIRE(st1.size() == 1);
  CHECK(st1[0].admitted_rows == 0);
  CHECK(st1[0].queued_rows == 0);
  CHECK(st1[0].success == 1);
  CHECK(st1[0].failure == 0);
}

TEST_CASE("create loads the versions of a model oldest first: latest 1 keeps the newest whatever the listed order") {
  auto c = text_config();
  c.models[0].version = "2";
  auto v1 = c.models[0];
  v1.version = "1";
  c.models.push_back(v1);  // listed after v2
  auto s = service::create(c);
  REQUIRE(s);
  CHECK(s->loaded() == std::vector<std::pair<std::string, std::string>>{{"text-embed", "2"}});
}
