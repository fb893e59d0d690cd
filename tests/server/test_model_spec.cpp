// server::parse_model_spec: the "NAME[:k=v,...]" form of jitembed-server --model and jitembed.Server(models=).
#include <doctest/doctest.h>

#include "jitembed/server/model_spec.hpp"
#include "jitembed/server/split_parameters.hpp"

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

TEST_CASE("serving keys: one table read alike by the spec, the JSON configuration and Triton's string parameters") {
  int keys = 0;
  server::for_each_serving_key([&](std::string_view k, auto field) {
    ++keys;
    CAPTURE(k);
    CHECK(server::is_serving_key(k));
    using T = std::remove_cvref_t<decltype(std::declval<server::model_config&>().*field)>;
    const bool flag = std::is_same_v<T, bool>;
    const std::string text = flag ? "false" : "3";
    // The spec's k=v, the configuration's typed value and a load request's string value give one field value.
    auto spec = server::parse_model_spec("m:" + std::string(k) + "=" + text);
    REQUIRE(spec);
    auto typed = server::serving_value(k, nlohmann::json(text));
    REQUIRE(typed);
    CHECK(typed->is_boolean() == flag);
    nlohmann::json cfg = {{"name", "m"}};
    cfg[std::string(k)] = *typed;
    auto parsed = server::model_config::parse(cfg);
    REQUIRE(parsed);
    CHECK((*spec).*field == (*parsed).*field);
    CHECK((*spec).*field != server::model_config{}.*field);  // the value took, it is not the default
    auto bad = server::serving_value(k, nlohmann::json("x"));
    REQUIRE_FALSE(bad);
    CHECK(bad.code() == errc::invalid_argument);
    CHECK(bad.error().message ==
          "parameter '" + std::string(k) + (flag ? "' is not true or false" : "' is not a non-negative integer"));
  });
  CHECK(keys == 7);
  CHECK_FALSE(server::is_serving_key("work"));
  CHECK_FALSE(server::is_serving_key("version"));
  CHECK(server::serving_value("work", nlohmann::json("1")).error().message == "'work' is not a serving key");
  CHECK(*server::serving_value("queue_size", nlohmann::json(5)) == 5);  // typed values pass as they are
  auto neg = server::serving_value("queue_size", nlohmann::json("-1"));
  CHECK_FALSE(neg);
  // An unknown key is still refused by the strict configuration parse.
  CHECK(server::model_config::parse({{"name", "m"}, {"queue_sise", 1}}).error().message == "config: unknown key models[].queue_sise");
}

TEST_CASE("split_parameters: the serving-key table decides each key's side, reserved keys go to neither") {
  nlohmann::json params = {{"work", 3}, {"sleep_us", "10"}, {"version", "2"}, {"version_policy", "all"}};
  std::size_t keys = 0;
  server::for_each_serving_key([&](std::string_view k, auto) { params[std::string(k)] = std::to_string(keys++); });
  const auto split = server::split_parameters(params, {"version", "version_policy"});
  CHECK(split.serving.size() == keys);
  server::for_each_serving_key([&](std::string_view k, auto) { CHECK(split.serving.contains(std::string(k))); });
  CHECK(split.serving["queue_size"] == params["queue_size"]);  // values as given: serving_value types them
  CHECK(split.model == nlohmann::json{{"work", 3}, {"sleep_us", "10"}});
  // Without reserved keys the version fields are model parameters like any other non-serving key.
  CHECK(server::split_parameters(params).model.size() == 4);
  CHECK(server::split_parameters(nlohmann::json::array({1})).model.empty());
  // The --model spec splits through it: a serving key sets the batcher, the rest are the model's.
  auto m = server::parse_model_spec("e:queue_size=5,work=2,idle_dispatch=false");
  REQUIRE(m);
  CHECK(m->queue_size == 5);
  CHECK_FALSE(m->idle_dispatch);
  CHECK(m->params == nlohmann::json{{"work", 2}});
}
