// The service behind jitembed::net::http::server on loopback, driven by http::client: the same bytes as a
// direct service::handle call, scatter/gather binary responses, auth and metrics over the wire.
#include <doctest/doctest.h>

#if defined(JITEMBED_HAS_HTTP)

#include <thread>

#include "jitembed/net/http/client.hpp"
#include "jitembed/net/http/server.hpp"
#include "server_test_util.hpp"

using namespace server_test;

TEST_CASE("server over HTTP: infer, metadata, auth and metrics on loopback equal direct calls") {
  server::server_config c;
  c.preprocess_threads = 2;
  c.auth_token = "tok";
  server::model_config m;
  m.name = "image-latent";
  m.params = nlohmann::json{{"image_bucket", 64}};
  c.models = {m};
  auto svc = server::service::create(c).value();
  auto srv_made = http::server::create(http::server_options{}, svc.as_handler());
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  http::client cl("127.0.0.1", port);
  const http::header_list auth = {{"Authorization", "Bearer tok"}};

  CHECK(cl.get("/v2/health/live").value().status == 200);
  CHECK(cl.get("/v2/models/image-latent").value().status == 401);
  auto meta = cl.get("/v2/models/image-latent", auth).value();
  CHECK(meta.status == 200);
  CHECK(nlohmann::json::parse(meta.body)["outputs"][0]["shape"] == nlohmann::json::array({-1, 4, 8, 8}));

  const std::string a = jpeg_bytes(100, 60, 5), b = jpeg_bytes(48, 48, 6);
  auto req = bytes_request("image", {a, b}, true, {}, ks::json{{"binary_data_output", true}});
  auto headers = req.headers;
  headers.insert(headers.end(), auth.begin(), auth.end());
  auto wire = cl.post("/v2/models/image-latent/infer", req.body, headers).value();
  REQUIRE(wire.status == 200);
  reply rw;
  rw.status = wire.status;
  rw.headers = wire.headers;
  rw.body = wire.body;
  for (auto p : wire.pieces) rw.body.append(reinterpret_cast<const char*>(p.data()), p.size());
  const auto direct = infer(svc, "image-latent", [&] {
    auto e = req;
    e.headers.insert(e.headers.end(), auth.begin(), auth.end());
    return e;
  }());
  REQUIRE(direct.status == 200);
  CHECK(rw.body == direct.body);
  CHECK(rw.header("Inference-Header-Content-Length") == direct.header("Inference-Header-Content-Length"));
  auto resp = decode(rw);
  CHECK(resp.outputs[0].shape == std::vector<std::int64_t>{2, 4, 8, 8});

  // Concurrent clients: all succeed.
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      http::client c2("127.0.0.1", port);
      for (int i = 0; i < 5; ++i) {
        auto r = c2.post("/v2/models/image-latent/infer", req.body, headers);
        if (r && r->status == 200) ++ok;
      }
    });
  for (auto& t : ts) t.join();
  CHECK(ok == 20);

  auto bad = cl.post("/v2/models/image-latent/infer", "{", auth).value();
  CHECK(bad.status == 400);
  CHECK(ks::parse_error_body(bad.body));
  auto metrics = cl.get("/metrics", auth).value();
  CHECK(metrics.status == 200);
  CHECK(metrics.body.find("jitembed_request_success_total{model=\"image-latent\",version=\"1\"} 22") != std::string::npos);
  srv.stop();
}

#endif
