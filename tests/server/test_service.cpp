// The service called directly through service::handle: every endpoint, inference with JPEG / MP4 / text /
// sample inputs equal to the in-process model, batching, hot swap under load, error statuses, auth, metrics.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "server_test_util.hpp"

using namespace server_test;
using jitembed::server::model_config;
using jitembed::server::server_config;
using jitembed::server::service;

namespace {

model_config small(std::string name, std::string version = "1") {
  model_config m;
  m.name = std::move(name);
  m.version = std::move(version);
  m.max_queue_delay_us = 500;
  m.params = nlohmann::json{{"image_bucket", 64}, {"video_bucket", 32}, {"video_frames", 4}, {"text_dim", 64}, {"text_max_length", 32}};
  return m;
}

server_config three_models() {
  server_config c;
  c.preprocess_threads = 2;
  c.models = {small("image-latent"), small("video-latent"), small("text-embed")};
  return c;
}

// The model's outputs for `raw`, computed in-process, stacked over rows in output order.
std::vector<std::pair<std::string, std::vector<std::byte>>> reference(const model_config& cfg, const std::vector<std::string>& raws) {
  auto m = server::reference_factory(cfg.name, cfg.params).value();
  std::vector<std::pair<std::string, std::vector<std::byte>>> out;
  for (const auto& meta : m.outputs()) out.emplace_back(meta.name, std::vector<std::byte>{});
  for (const auto& raw : raws) {
    auto pre = m.preprocess(bytes_view(reinterpret_cast<const std::byte*>(raw.data()), raw.size()), decode_limits{}).value();
    auto res = m.run(std::span<const tensor>(&pre, 1)).value();
    for (std::size_t k = 0; k < out.size(); ++k) {
      const auto& t = res[0][k].second;
      const auto* p = static_cast<const std::byte*>(t.data());
      out[k].second.insert(out[k].second.end(), p, p + t.nbytes());
    }
  }
  return out;
}

void check_equal_outputs(const ks::infer_response& resp, const model_config& cfg, const std::vector<std::string>& raws) {
  const auto ref = reference(cfg, raws);
  REQUIRE(resp.outputs.size() == ref.size());
  for (std::size_t k = 0; k < ref.size(); ++k) {
    const auto& t = resp.outputs[k];
    CHECK(t.name == ref[k].first);
    CHECK(t.shape.front() == static_cast<std::int64_t>(raws.size()));
    REQUIRE(t.data.size() == ref[k].second.size());
    CHECK(std::memcmp(t.data.data(), ref[k].second.data(), t.data.size()) == 0);
  }
}

}  // namespace

TEST_CASE("server: health, server metadata, model metadata, config, ready, repository index") {
  auto s = service::create(three_models()).value();
  CHECK(call(s, "GET", "/v2/health/live").status == 200);
  CHECK(call(s, "GET", "/v2/health/ready").status == 200);
  auto meta = call(s, "GET", "/v2");
  REQUIRE(meta.status == 200);
  auto mj = nlohmann::json::parse(meta.body);
  CHECK(mj["name"] == "jitembed");
  CHECK(mj["extensions"].size() >= 2);

  auto m = call(s, "GET", "/v2/models/image-latent");
  REQUIRE(m.status == 200);
  auto j = nlohmann::json::parse(m.body);
  CHECK(j["name"] == "image-latent");
  CHECK(j["versions"] == nlohmann::json::array({"1"}));
  CHECK(j["inputs"][0]["name"] == "image");
  CHECK(j["inputs"][0]["datatype"] == "BYTES");
  CHECK(j["outputs"][0]["name"] == "latent");
  CHECK(j["outputs"][0]["datatype"] == "FP32");
  CHECK(j["outputs"][0]["shape"] == nlohmann::json::array({-1, 4, 8, 8}));
  CHECK(call(s, "GET", "/v2/models/image-latent/versions/1").status == 200);
  CHECK(call(s, "GET", "/v2/models/image-latent/versions/7").status == 404);
  CHECK(call(s, "GET", "/v2/models/nope").status == 404);
  CHECK(call(s, "GET", "/v2/models/text-embed/ready").status == 200);
  CHECK(call(s, "GET", "/v2/models/nope/ready").status == 404);

  auto c = call(s, "GET", "/v2/models/text-embed/config");
  REQUIRE(c.status == 200);
  auto cj = nlohmann::json::parse(c.body);
  CHECK(cj["name"] == "text-embed");
  CHECK(cj["platform"] == "jitembed");
  CHECK(cj["max_batch_size"] == 256);
  CHECK(cj["input"][0]["name"] == "text");
  CHECK(cj["input"][0]["data_type"] == "TYPE_STRING");
  CHECK(cj["input"][0]["dims"] == nlohmann::json::array({1}));
  CHECK(cj["output"].size() == 3);
  CHECK(cj["output"][1]["name"] == "mask");
  CHECK(cj["output"][1]["data_type"] == "TYPE_UINT8");
  CHECK(cj["dynamic_batching"]["max_queue_delay_microseconds"] == 500);

  auto idx = call(s, "POST", "/v2/repository/index");
  REQUIRE(idx.status == 200);
  CHECK(nlohmann::json::parse(idx.body).size() == 3);
  auto all_stats = call(s, "GET", "/v2/models/stats");
  REQUIRE(all_stats.status == 200);
  CHECK(nlohmann::json::parse(all_stats.body)["model_stats"].size() == 3);
  CHECK(call(s, "GET", "/v2/models/nope/stats").status == 404);
  CHECK(call(s, "GET", "/v2/nothing/here").status == 404);
  CHECK(call(s, "GET", "/other").status == 404);
}

TEST_CASE("server: image infer (JPEG rows of different sizes) equals the model in-process, binary and JSON outputs") {
  auto s = service::create(three_models()).value();
  const std::vector<std::string> jpegs = {jpeg_bytes(80, 120, 1), jpeg_bytes(64, 64, 2), jpeg_bytes(200, 90, 3)};
  std::vector<std::string_view> rows(jpegs.begin(), jpegs.end());

  // tritonclient's default: binary outputs requested.
  auto r = infer(s, "image-latent", bytes_request("image", rows, true, {}, ks::json{{"binary_data_output", true}}));
  REQUIRE(r.status == 200);
  CHECK_FALSE(r.header("Inference-Header-Content-Length").empty());
  auto resp = decode(r);
  CHECK(resp.model_name == "image-latent");
  CHECK(resp.model_version == "1");
  CHECK(resp.id == "req-1");
  REQUIRE(resp.outputs.size() == 1);
  CHECK(resp.outputs[0].binary);
  CHECK(resp.outputs[0].shape == std::vector<std::int64_t>{3, 4, 8, 8});
  check_equal_outputs(resp, small("image-latent"), jpegs);

  // Binary input but no binary output asked for: JSON data, same values.
  auto rj = infer(s, "image-latent", bytes_request("image", rows));
  REQUIRE(rj.status == 200);
  CHECK(rj.header("Inference-Header-Content-Length").empty());
  auto respj = decode(rj);
  CHECK_FALSE(respj.outputs[0].binary);
  check_equal_outputs(respj, small("image-latent"), jpegs);

  // Explicit version route.
  CHECK(infer(s, "image-latent", bytes_request("image", rows), "1").status == 200);
}

TEST_CASE("server: text infer, requested outputs only, and video infer equal the model in-process") {
  auto s = service::create(three_models()).value();
  const std::vector<std::string> texts = {"a photo of a cat", "", "ünïcode caption that is longer than thirty-two bytes for sure"};
  std::vector<std::string_view> rows(texts.begin(), texts.end());
  auto r = infer(s, "text-embed", bytes_request("text", rows, true, {}, ks::json{{"binary_data_output", true}}));
  REQUIRE(r.status == 200);
  auto resp = decode(r);
  check_equal_outputs(resp, small("text-embed"), texts);
  CHECK(resp.find_output("sequence")->shape == std::vector<std::int64_t>{3, 32, 64});
  CHECK(resp.find_output("mask")->type == ks::datatype::uint8);

  ks::requested_output pooled;
  pooled.name = "pooled";
  pooled.binary_data = true;
  auto rp = infer(s, "text-embed", bytes_request("text", rows, /*binary=*/false, {pooled}));  // JSON input
  REQUIRE(rp.status == 200);
  auto pr = decode(rp);
  REQUIRE(pr.outputs.size() == 1);
  CHECK(pr.outputs[0].name == "pooled");
  CHECK(pr.outputs[0].shape == std::vector<std::int64_t>{3, 64});

  const std::vector<std::string> clips = {mp4_bytes(1), mp4_bytes(2)};
  std::vector<std::string_view> vrows(clips.begin(), clips.end());
  auto rv = infer(s, "video-latent", bytes_request("video", vrows));
  REQUIRE(rv.status == 200);
  auto vresp = decode(rv);
  CHECK(vresp.outputs[0].shape == std::vector<std::int64_t>{2, 4, 1, 4, 4});
  check_equal_outputs(vresp, small("video-latent"), clips);
}

TEST_CASE("server: sample inputs (jitembed records) feed the field of the model's kind") {
  auto s = service::create(three_models()).value();
  const std::string jpeg = jpeg_bytes(70, 50, 9);
  const std::string caption = "a record caption, long enough to be compressed by zstd? maybe, maybe not, let us make it longer";
  format::record_builder b;
  REQUIRE(b.add_image("jpg", bytes_view(reinterpret_cast<const std::byte*>(jpeg.data()), jpeg.size())));
  REQUIRE(b.add_text("caption", caption));
  const auto rec = b.finish().value();
  format::record_builder b2;  // an image-only record: text-embed has nothing to embed in it
  REQUIRE(b2.add_image("jpg", bytes_view(reinterpret_cast<const std::byte*>(jpeg.data()), jpeg.size())));
  const auto rec2 = b2.finish().value();

  auto ri = infer(s, "image-latent", bytes_request("sample", {sv(rec), sv(rec)}));
  REQUIRE(ri.status == 200);
  check_equal_outputs(decode(ri), small("image-latent"), {jpeg, jpeg});
  auto rt = infer(s, "text-embed", bytes_request("sample", {sv(rec)}));
  REQUIRE(rt.status == 200);
  check_equal_outputs(decode(rt), small("text-embed"), {caption});

  auto missing = infer(s, "text-embed", bytes_request("sample", {sv(rec2)}));
  CHECK(missing.status == 400);
  CHECK(ks::parse_error_body(missing.body).value().find("no text field") != std::string::npos);
  auto garbage = infer(s, "image-latent", bytes_request("sample", {"not a record"}));
  CHECK(garbage.status == 400);
}

TEST_CASE("server: bad requests are 400 / 404 / 405 with KServe error bodies") {
  auto s = service::create(three_models()).value();
  const std::string jpeg = jpeg_bytes(32, 32, 4);

  auto bad_body = call(s, "POST", "/v2/models/image-latent/infer", "{not json");
  CHECK(bad_body.status == 400);
  CHECK(ks::parse_error_body(bad_body.body));

  ks::infer_request fr;
  const std::vector<float> vals = {1.0f, 2.0f};
  fr.inputs.push_back(ks::infer_tensor::from_values("image", {2, 1}, vals));
  auto fm = ks::encode_request(fr).value();
  auto wrong_type = call(s, "POST", "/v2/models/image-latent/infer", fm.flatten(),
                         {{"Inference-Header-Content-Length", std::to_string(*fm.header_length)}});
  CHECK(wrong_type.status == 400);
  CHECK(ks::parse_error_body(wrong_type.body).value() == "input 'image' has datatype FP32, expected BYTES or UINT8");

  auto bad_jpeg = infer(s, "image-latent", bytes_request("image", {jpeg, "definitely not a jpeg"}));
  CHECK(bad_jpeg.status == 400);
  auto wrong_name = infer(s, "image-latent", bytes_request("text", {"hello"}));
  CHECK(wrong_name.status == 400);
  CHECK(ks::parse_error_body(wrong_name.body).value().find("unexpected input 'text'") != std::string::npos);
  ks::requested_output nope;
  nope.name = "nope";
  CHECK(infer(s, "image-latent", bytes_request("image", {jpeg}, true, {nope})).status == 400);
  CHECK(call(s, "POST", "/v2/models/image-latent/infer", "{\"inputs\":[]}").status == 400);
  auto bad_hl = call(s, "POST", "/v2/models/image-latent/infer", "{}", {{"Inference-Header-Content-Length", "12x"}});
  CHECK(bad_hl.status == 400);

  auto unknown = infer(s, "no-such-model", bytes_request("image", {jpeg}));
  CHECK(unknown.status == 404);
  CHECK(ks::parse_error_body(unknown.body).value() == "Request for unknown model: 'no-such-model' is not found");
  CHECK(infer(s, "image-latent", bytes_request("image", {jpeg}), "3").status == 404);
  CHECK(call(s, "POST", "/v2/models/image-latent").status == 405);
  CHECK(call(s, "GET", "/v2/repository/index").status == 405);

  // Failures are counted.
  auto st = nlohmann::json::parse(call(s, "GET", "/v2/models/image-latent/stats").body);
  CHECK(st["model_stats"][0]["inference_stats"]["fail"]["count"].get<int>() >= 4);
}

TEST_CASE("server: a full queue is 503 (tiny queue, slow model via work)") {
  server_config c;
  c.preprocess_threads = 4;
  auto m = small("text-embed");
  m.params["work"] = 20;
  m.params["text_dim"] = 256;
  m.queue_size = 1;
  m.max_batch_size = 1;
  m.max_queue_delay_us = 0;
  c.models = {m};
  auto s = service::create(c).value();
  std::vector<std::string_view> rows(8, "slow text");  // 1 runs, 1 waits, the rest find the queue full
  auto r = infer(s, "text-embed", bytes_request("text", rows));
  CHECK(r.status == 503);
  CHECK(ks::parse_error_body(r.body).value() == "queue full (max_queue_size 1)");
  CHECK(ks::parse_error_code(r.body) == errc::unavailable);
  CHECK(r.header("Retry-After") == "1");
  // Once the backlog is gone a small request succeeds again.
  auto ok = infer(s, "text-embed", bytes_request("text", {"fast"}));
  CHECK(ok.status == 200);
}

TEST_CASE("server: concurrent requests are batched (stats and metrics show batches > 1)") {
  server_config c;
  c.preprocess_threads = 2;
  auto m = small("text-embed");
  m.max_queue_delay_us = 20000;
  m.idle_dispatch = false;  // Triton's rule: every batch waits for the delay, so batches surely form
  m.max_batch_size = 16;
  c.models = {m};
  auto s = service::create(c).value();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 3; ++i) {
        const std::string text = "caption " + std::to_string(t) + "/" + std::to_string(i);
        if (infer(s, "text-embed", bytes_request("text", {text})).status == 200) ++ok;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(ok == 24);
  // One request of 6 rows: 6 batcher items.
  std::vector<std::string_view> six(6, "row");
  REQUIRE(infer(s, "text-embed", bytes_request("text", six)).status == 200);

  auto st = nlohmann::json::parse(call(s, "GET", "/v2/models/text-embed/stats").body);
  const auto& ms = st["model_stats"][0];
  CHECK(ms["name"] == "text-embed");
  CHECK(ms["version"] == "1");
  CHECK(ms["inference_count"] == 30);
  CHECK(ms["inference_stats"]["success"]["count"] == 25);
  std::uint64_t rows_in_batches = 0, max_batch = 0;
  for (const auto& b : ms["batch_stats"]) {
    rows_in_batches += b["batch_size"].get<std::uint64_t>() * b["compute_infer"]["count"].get<std::uint64_t>();
    max_batch = std::max(max_batch, b["batch_size"].get<std::uint64_t>());
  }
  CHECK(rows_in_batches == 30);  // the warm-up batch bypasses the batcher
  CHECK(max_batch > 1);
  CHECK(ms["execution_count"].get<std::uint64_t>() < 30);

  const std::string metrics = call(s, "GET", "/metrics").body;
  CHECK(metrics.find("jitembed_request_success_total{model=\"text-embed\",version=\"1\"} 25") != std::string::npos);
  CHECK(metrics.find("jitembed_request_failure_total{model=\"text-embed\",version=\"1\"} 0") != std::string::npos);
  CHECK(metrics.find("jitembed_batch_size_count{model=\"text-embed\",version=\"1\"}") != std::string::npos);
  CHECK(metrics.find("jitembed_queue_duration_us_total") != std::string::npos);
  CHECK(metrics.find("jitembed_compute_duration_us_total") != std::string::npos);
  CHECK(metrics.find("jitembed_pending_requests{model=\"text-embed\",version=\"1\"} ") != std::string::npos);
  // The batcher counts a batch in flight until its runner thread has delivered it: the gauge reaches 0 soon.
  bool drained = false;
  for (int i = 0; i < 200 && !drained; ++i) {
    drained = call(s, "GET", "/metrics").body.find("jitembed_pending_requests{model=\"text-embed\",version=\"1\"} 0\n") != std::string::npos;
    if (!drained) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(drained);
}

TEST_CASE("server: hot swap under load: load version 2, unload version 1, zero failures, v1 then v2") {
  server_config c;
  c.preprocess_threads = 2;
  c.models = {small("text-embed", "1")};
  c.models[0].policy = {.which = jitembed::server::version_policy::kind::latest, .num_versions = 2};  // v1 stays until unloaded
  auto s = service::create(c).value();
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0}, total{0};
  std::vector<std::vector<std::string>> seen(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      while (!stop) {
        auto r = infer(s, "text-embed", bytes_request("text", {"swap", "me"}));
        ++total;
        if (r.status != 200) {
          ++failures;
          continue;
        }
        seen[t].push_back(decode(r).model_version);
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto v2 = small("text-embed", "2");
  v2.policy = c.models[0].policy;
  REQUIRE(s.load(v2));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(s.unload("text-embed", "1"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // An in-place reload of version 2 (warm, switch, drain) under the same load.
  REQUIRE(s.load(v2));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  stop = true;
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(total > 8);
  for (const auto& v : seen) {
    REQUIRE_FALSE(v.empty());
    CHECK(std::is_sorted(v.begin(), v.end()));  // "1"... then "2"...
    CHECK(v.back() == "2");
  }
  CHECK(s.loaded() == std::vector<std::pair<std::string, std::string>>{{"text-embed", "2"}});
}

TEST_CASE("server: repository load / unload over HTTP with parameters") {
  server_config c;
  c.preprocess_threads = 1;
  auto s = service::create(c).value();
  CHECK(call(s, "GET", "/v2/models/text-embed").status == 404);
  auto l = call(s, "POST", "/v2/repository/models/text-embed/load",
                R"({"parameters": {"version": "3", "text_dim": "32", "max_batch_size": "4", "text_max_length": 16}})");
  REQUIRE(l.status == 200);
  auto cj = nlohmann::json::parse(call(s, "GET", "/v2/models/text-embed/config").body);
  CHECK(cj["max_batch_size"] == 4);
  CHECK(cj["output"][2]["dims"] == nlohmann::json::array({32}));
  auto r = infer(s, "text-embed", bytes_request("text", {"hi"}));
  REQUIRE(r.status == 200);
  CHECK(decode(r).model_version == "3");
  CHECK(call(s, "POST", "/v2/repository/models/unknown-model/load").status == 404);
  CHECK(call(s, "POST", "/v2/repository/models/text-embed/load", R"({"parameters": {"text_dim": "x"}})").status == 400);
  CHECK(call(s, "POST", "/v2/repository/models/text-embed/load", "[1]").status == 400);
  CHECK(call(s, "POST", "/v2/repository/models/text-embed/unload").status == 200);
  CHECK(call(s, "GET", "/v2/models/text-embed").status == 404);
  CHECK(call(s, "POST", "/v2/repository/models/text-embed/unload").status == 404);
}

TEST_CASE("server: bearer token required on every route but health") {
  server_config c = three_models();
  c.auth_token = "s3cret";
  auto s = service::create(c).value();
  CHECK(call(s, "GET", "/v2/health/live").status == 200);
  CHECK(call(s, "GET", "/v2/health/ready").status == 200);
  CHECK(call(s, "GET", "/v2").status == 401);
  CHECK(call(s, "GET", "/metrics").status == 401);
  CHECK(call(s, "GET", "/v2/models/text-embed", {}, {{"Authorization", "Bearer wrong"}}).status == 401);
  CHECK(call(s, "GET", "/v2/models/text-embed", {}, {{"authorization", "Bearer s3cret"}}).status == 200);
  auto e = bytes_request("text", {"x"});
  CHECK(infer(s, "text-embed", e).status == 401);
  e.headers.emplace_back("Authorization", "Bearer s3cret");
  CHECK(infer(s, "text-embed", e).status == 200);
  CHECK(call(s, "POST", "/v2/repository/models/text-embed/unload").status == 401);
}

TEST_CASE("server: shut down service answers 503") {
  auto s = service::create(three_models()).value();
  s.shutdown();
  CHECK(call(s, "GET", "/v2/health/ready").status == 503);
  auto r = infer(s, "text-embed", bytes_request("text", {"x"}));
  CHECK(r.status == 503);
  CHECK(ks::parse_error_code(r.body) == errc::unavailable);
  CHECK(r.header("Retry-After") == "1");
  CHECK(call(s, "GET", "/v2/models/text-embed/ready").status == 503);
  CHECK(s.load(small("text-embed")).code() == errc::unavailable);
}

TEST_CASE("server: server_config from JSON is strict") {
  auto j = nlohmann::json::parse(R"({"host": "0.0.0.0", "port": 9000, "auth_token": "t",
      "models": [{"name": "image-latent", "version": 2, "instances": 2, "max_batch_size": 8,
                  "max_queue_delay_us": 100, "queue_size": 10, "params": {"work": 1}}]})");
  auto c = server::server_config::parse(j);
  REQUIRE(c);
  CHECK(c->host == "0.0.0.0");
  CHECK(c->port == 9000);
  REQUIRE(c->models.size() == 1);
  CHECK(c->models[0].version == "2");
  CHECK(c->models[0].instances == 2);
  CHECK(c->models[0].params["work"] == 1);
  auto bad_key = server::server_config::parse(nlohmann::json::parse(R"({"prot": 1})"));
  CHECK(bad_key.code() == errc::invalid_argument);
  CHECK(bad_key.error().message == "config: unknown key config.prot");
  auto bad_port = server::server_config::parse(nlohmann::json::parse(R"({"port": 70000})"));
  CHECK(bad_port.error().message == "config: config.port = 70000 is out of range");
  auto bad_model = server::server_config::parse(nlohmann::json::parse(R"({"models": [{"name": "x", "instances": 0}]})"));
  CHECK(bad_model.error().message == "config: models[0].instances 0 not in [1, 1024]");
  CHECK(server::server_config::open("/nonexistent/x.json").code() == errc::io_error);
}
