// The service's version_policy (Triton's latest N / all / specific): which versions a load keeps, that the
// ones it drops drain (in-flight requests finish) after the new one serves, routing of unversioned
// requests, the /config report, and the policy's JSON and flag forms.
#include <doctest/doctest.h>

#include <future>
#include <thread>

#include "../batching/eventually.hpp"
#include "server_test_util.hpp"

using namespace server_test;
using jitembed::server::model_config;
using jitembed::server::server_config;
using jitembed::server::service;
using jitembed::server::version_policy;
using jitembed::test::eventually;
using versions = std::vector<std::pair<std::string, std::string>>;

namespace {

model_config text(std::string version, version_policy p = {}, std::int64_t sleep_us = 0) {
  model_config m;
  m.name = "text-embed";
  m.version = std::move(version);
  m.max_queue_delay_us = 200;
  m.policy = std::move(p);
  m.params = nlohmann::json{{"text_dim", 16}, {"text_max_length", 16}};
  if (sleep_us) m.params["sleep_us"] = sleep_us;
  return m;
}

version_policy latest(std::size_t n) { return {.which = version_policy::kind::latest, .num_versions = n}; }
version_policy all() { return {.which = version_policy::kind::all}; }
version_policy specific(std::vector<std::string> v) { return {.which = version_policy::kind::specific, .versions = std::move(v)}; }

std::string served_version(service& s, const std::string& version = {}) {
  auto r = infer(s, "text-embed", bytes_request("text", {"which"}), version);
  REQUIRE(r.status == 200);
  return decode(r).model_version;
}

nlohmann::json config_policy(service& s) {
  auto r = call(s, "GET", "/v2/models/text-embed/config");
  REQUIRE(r.status == 200);
  return nlohmann::json::parse(r.body)["version_policy"];
}

// Rows admitted and not yet answered by one version (the jitembed_inflight_rows gauge).
bool has_inflight(service& s, const std::string& version) {
  return s.metrics().find("jitembed_inflight_rows{model=\"text-embed\",version=\"" + version + "\"} 1") != std::string::npos;
}

service make_service() {
  server_config c;
  c.preprocess_threads = 2;
  return service::create(c).value();
}

}  // namespace

TEST_CASE("version_policy latest 1 (default): loading v2 serves v2 at once, v1's in-flight request finishes, then v1 is unloaded") {
  server_config c;
  c.preprocess_threads = 2;
  auto s = service::create(c).value();
  REQUIRE(s.load(text("1", {}, 300'000)));  // each v1 batch takes 300 ms
  const auto req = bytes_request("text", {"in flight"});
  auto slow = send(s, "POST", "/v2/models/text-embed/infer", req.body, req.headers);
  REQUIRE(eventually([&] { return has_inflight(s, "1"); }));
  // load() returns after v1 drained; run it aside to watch the switch happen before the drain ends.
  auto loading = std::async(std::launch::async, [&] { return s.load(text("2")); });
  REQUIRE(eventually([&] { return s.loaded() == versions{{"text-embed", "2"}}; }));
  if (slow.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    // v1 is still draining: new unversioned requests already go to v2, explicit v1 ones are 404.
    CHECK(served_version(s) == "2");
    CHECK(infer(s, "text-embed", bytes_request("text", {"x"}), "1").status == 404);
  }
  REQUIRE(loading.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  REQUIRE(loading.get());
  REQUIRE(slow.wait_for(std::chrono::seconds(0)) == std::future_status::ready);  // load waited for it
  const auto r = slow.get();
  REQUIRE(r.status == 200);
  CHECK(decode(r).model_version == "1");
  CHECK(s.loaded() == versions{{"text-embed", "2"}});
  CHECK(served_version(s) == "2");
  CHECK(config_policy(s) == nlohmann::json{{"latest", {{"num_versions", 1}}}});
  // An older version than the one kept is refused, and changes nothing.
  auto old = s.load(text("1"));
  REQUIRE_FALSE(old);
  CHECK(old.code() == jitembed::errc::invalid_argument);
  CHECK(old.error().message.find("version_policy latest 1") != std::string::npos);
  CHECK(s.loaded() == versions{{"text-embed", "2"}});
  // An in-place reload of the kept version stays allowed.
  REQUIRE(s.load(text("2")));
  CHECK(s.loaded() == versions{{"text-embed", "2"}});
}

TEST_CASE("version_policy latest 1 under load: a chain of loads, zero failed requests, one version left") {
  server_config c;
  c.preprocess_threads = 2;
  auto s = service::create(c).value();
  REQUIRE(s.load(text("1", {}, 2000)));
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0}, total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      while (!stop) {
        auto r = infer(s, "text-embed", bytes_request("text", {"a", "b"}));
        ++total;
        if (r.status != 200) ++failures;
      }
    });
  for (int v = 2; v <= 4; ++v) {
    const int before = total;
    REQUIRE(eventually([&] { return total >= before + 3; }));  // requests in flight across each swap
    REQUIRE(s.load(text(std::to_string(v), {}, 2000)));
  }
  const int before = total;
  REQUIRE(eventually([&] { return total >= before + 3; }));
  stop = true;
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(s.loaded() == versions{{"text-embed", "4"}});
}

TEST_CASE("version_policy latest 2 keeps the two highest versions, unversioned requests go to the highest") {
  auto s = make_service();
  REQUIRE(s.load(text("1", latest(2))));
  REQUIRE(s.load(text("2", latest(2))));
  CHECK(s.loaded() == versions{{"text-embed", "1"}, {"text-embed", "2"}});
  REQUIRE(s.load(text("10", latest(2))));  // numeric order: 10 > 2
  CHECK(s.loaded() == versions{{"text-embed", "2"}, {"text-embed", "10"}});
  CHECK(served_version(s) == "10");
  CHECK(served_version(s, "2") == "2");
  CHECK(infer(s, "text-embed", bytes_request("text", {"x"}), "1").status == 404);
  CHECK(s.load(text("1", latest(2))).code() == jitembed::errc::invalid_argument);
  REQUIRE(s.load(text("3", latest(2))));
  CHECK(s.loaded() == versions{{"text-embed", "3"}, {"text-embed", "10"}});
  CHECK(config_policy(s) == nlohmann::json{{"latest", {{"num_versions", 2}}}});
  // A manual unload leaves the other version, and no policy re-adds anything.
  REQUIRE(s.unload("text-embed", "10"));
  CHECK(s.loaded() == versions{{"text-embed", "3"}});
  CHECK(served_version(s) == "3");
}

TEST_CASE("version_policy all keeps every version, in any load order, a load with latest 1 then drops the others") {
  auto s = make_service();
  REQUIRE(s.load(text("1", all())));
  REQUIRE(s.load(text("3", all())));
  REQUIRE(s.load(text("2", all())));
  CHECK(s.loaded() == versions{{"text-embed", "1"}, {"text-embed", "2"}, {"text-embed", "3"}});
  CHECK(served_version(s) == "3");
  CHECK(served_version(s, "1") == "1");
  CHECK(config_policy(s) == nlohmann::json{{"all", nlohmann::json::object()}});
  auto meta = nlohmann::json::parse(call(s, "GET", "/v2/models/text-embed").body);
  CHECK(meta["versions"] == nlohmann::json::array({"1", "2", "3"}));
  // The last load's policy is the model's policy.
  REQUIRE(s.load(text("4")));
  CHECK(s.loaded() == versions{{"text-embed", "4"}});
  CHECK(config_policy(s) == nlohmann::json{{"latest", {{"num_versions", 1}}}});
}

TEST_CASE("version_policy specific keeps the listed versions only and refuses the others") {
  auto s = make_service();
  const auto p = specific({"1", "3"});
  REQUIRE(s.load(text("1", p)));
  auto r2 = s.load(text("2", p));
  REQUIRE_FALSE(r2);
  CHECK(r2.code() == jitembed::errc::invalid_argument);
  CHECK(r2.error().message.find("specific [1, 3]") != std::string::npos);
  REQUIRE(s.load(text("3", p)));
  CHECK(s.loaded() == versions{{"text-embed", "1"}, {"text-embed", "3"}});
  CHECK(served_version(s) == "3");
  CHECK(config_policy(s) == nlohmann::json{{"specific", {{"versions", {1, 3}}}}});
  // Narrowing the list drops a version at the next load.
  REQUIRE(s.load(text("3", specific({"3"}))));
  CHECK(s.loaded() == versions{{"text-embed", "3"}});
}

TEST_CASE("version_policy over HTTP: the repository load parameter in flag and Triton form, reported by /config") {
  auto s = make_service();
  auto l1 = call(s, "POST", "/v2/repository/models/text-embed/load",
                 R"({"parameters": {"version": "1", "text_dim": "16", "version_policy": "latest2"}})");
  REQUIRE(l1.status == 200);
  auto l2 = call(s, "POST", "/v2/repository/models/text-embed/load",
                 R"({"parameters": {"version": "2", "text_dim": "16", "version_policy": {"latest": {"num_versions": 2}}}})");
  REQUIRE(l2.status == 200);
  CHECK(s.loaded() == versions{{"text-embed", "1"}, {"text-embed", "2"}});
  CHECK(config_policy(s) == nlohmann::json{{"latest", {{"num_versions", 2}}}});
  // The versioned config route reports the model's policy too.
  auto vc = nlohmann::json::parse(call(s, "GET", "/v2/models/text-embed/versions/1/config").body);
  CHECK(vc["version_policy"] == nlohmann::json{{"latest", {{"num_versions", 2}}}});
  // Default policy (latest 1): v3 replaces both.
  REQUIRE(call(s, "POST", "/v2/repository/models/text-embed/load", R"({"parameters": {"version": "3", "text_dim": "16"}})").status == 200);
  CHECK(s.loaded() == versions{{"text-embed", "3"}});
  // Refused: 400 with errc invalid_argument; a malformed policy too.
  auto old = call(s, "POST", "/v2/repository/models/text-embed/load", R"({"parameters": {"version": "2", "text_dim": "16"}})");
  CHECK(old.status == 400);
  CHECK(nlohmann::json::parse(old.body)["errc"] == "invalid_argument");
  CHECK(call(s, "POST", "/v2/repository/models/text-embed/load", R"({"parameters": {"version": "4", "version_policy": "newest"}})").status == 400);
  CHECK(s.loaded() == versions{{"text-embed", "3"}});
}

TEST_CASE("version_policy in the JSON configuration and the flag form") {
  using jitembed::server::version_policy;
  using jitembed::server::parse_version_policy;
  CHECK(jitembed::server::model_config::parse(nlohmann::json{{"name", "m"}}).value().policy == latest(1));
  CHECK(jitembed::server::model_config::parse(nlohmann::json::parse(R"({"name": "m", "version_policy": {"latest": {"num_versions": 3}}})")).value().policy == latest(3));
  CHECK(jitembed::server::model_config::parse(nlohmann::json::parse(R"({"name": "m", "version_policy": {"all": {}}})")).value().policy == all());
  CHECK(jitembed::server::model_config::parse(nlohmann::json::parse(R"({"name": "m", "version_policy": {"specific": {"versions": [1, "7"]}}})")).value().policy ==
        specific({"1", "7"}));
  CHECK(jitembed::server::model_config::parse(nlohmann::json::parse(R"({"name": "m", "version_policy": "specific:2+5"})")).value().policy == specific({"2", "5"}));
  for (const char* bad : {R"({"latest": {"num_versions": 0}})", R"({"latest": {"n": 1}})", R"({"newest": {}})", R"({"specific": {"versions": []}})",
                          R"({"all": {}, "latest": {}})", R"([1])", R"("latest0")"}) {
    auto r = jitembed::server::model_config::parse(nlohmann::json{{"name", "m"}, {"version_policy", nlohmann::json::parse(bad)}}, "models[0]");
    REQUIRE_FALSE(r);
    CHECK(r.code() == jitembed::errc::invalid_argument);
    CHECK(r.error().message.find("models[0].version_policy") != std::string::npos);
    CHECK(version_policy::parse(nlohmann::json::parse(bad), "m").code() == jitembed::errc::invalid_argument);
  }
  CHECK(version_policy::parse(nlohmann::json::parse(R"({"all": {}})"), "m").value() == all());
  CHECK(parse_version_policy("latest").value() == latest(1));
  CHECK(parse_version_policy("latest2").value() == latest(2));
  CHECK(parse_version_policy("latest:5").value() == latest(5));
  CHECK(parse_version_policy("all").value() == all());
  CHECK(parse_version_policy("specific:1").value() == specific({"1"}));
  for (const char* bad : {"", "latest:", "latest-1", "latestx", "specific:", "specific:1++2", "some"}) CHECK_FALSE(parse_version_policy(bad));
  CHECK(jitembed::server::to_json(specific({"1", "b"})) == nlohmann::json::parse(R"({"specific": {"versions": [1, "b"]}})"));
}
