// server::parse_model_spec: the "NAME[:k=v,...]" form of jitembed-server --model and jitembed.Server(models=).
#include <doctest/doctest.h>

#include "jitembed/server/model_spec.hpp"

using namespace jitembed;

TEST_CASE("parse_model_spec: name only keeps every default") {
  server::model_config d;
  d.max_batch_size = 48;
  d.queue_size = 7;
  auto m = server::parse_model_spec("text-embed", d);
  REQUIRE(m);
  CHECK(m->name == "text-embed");
  CHECK(m->version == "1");
  CHECK(m->max_batch_size == 48);
  CHECK(m->queue_size == 7);
  CHECK(m->params.empty());
}

TEST_CASE("parse_model_spec: batcher keys, version, policy and model parameters") {
  server::model_config d;
  d.queue_size = 7;
  auto m = server::parse_model_spec("image-latent:version=3,max_batch_size=32,idle_dispatch=false,sleep_us=200,image_bucket=64x64,version_policy=latest2");
  REQUIRE(m);
  CHECK(m->name == "image-latent");
  CHECK(m->version == "3");
  CHECK(m->max_batch_size == 32);
  CHECK_FALSE(m->idle_dispatch);
  CHECK(m->queue_size == 1024);  // the default model_config's, not touched
  CHECK(m->params["sleep_us"] == 200);  // digits become integers
  CHECK(m->params["image_bucket"] == "64x64");
  CHECK(m->policy.which == server::version_policy::kind::latest);
  CHECK(m->policy.num_versions == 2);
  auto k = server::parse_model_spec("t:queue_size=9", d);
  REQUIRE(k);
  CHECK(k->queue_size == 9);
}

TEST_CASE("parse_model_spec: bad specs are invalid_argument naming the spec") {
  for (const char* bad : {"", ":x=1", "m:novalue", "m:=3", "m:instances=0", "m:max_queue_delay_us=x", "m:version=",
                          "m:version_policy=newest"}) {
    auto m = server::parse_model_spec(bad);
    CAPTURE(bad);
    REQUIRE_FALSE(m);
    CHECK(m.code() == errc::invalid_argument);
    CHECK(m.error().message.find("--model '") != std::string::npos);
  }
}
