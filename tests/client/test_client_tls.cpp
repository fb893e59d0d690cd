// The JIT client over HTTPS: real embeddings from the jitembed service behind a TLS port (bearer token,
// keep-alive reuse), certificate failures that fail fast with io_error, mixed http/https endpoint lists, and
// plain/TLS mix-ups that fail bounded in time.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "client_test_util.hpp"
#include "jitembed/models/text_embed.hpp"

using namespace client_test;
namespace cl = jitembed::client;

namespace {

std::vector<std::string> tls_rows(std::size_t n, std::size_t seed) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back("tls-row-" + std::to_string(seed) + "-" + std::to_string(i));
  return out;
}

cl::client_options tls_options_for(std::vector<std::string> urls, std::string ca) {
  cl::client_options o;
  o.endpoints.list = std::move(urls);
  o.request_timeout = 5s;
  o.tls_ca_file = std::move(ca);
  o.shared_memory.enabled = false;  // these count connections: no registration call among them
  return o;
}

double tls_seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_CASE("https: the real service over TLS gives local mode's embeddings, with a bearer token, on one connection") {
  const auto& pki = tls_test::files();
  models::text_embed_options to;
  auto model = models::text_embed::create(to).value();
  server::server_config sc;
  sc.preprocess_threads = 2;
  sc.auth_token = "s3cret";
  server::model_config mc;
  mc.name = "text-embed";
  sc.models = {mc};
  auto svc = server::service::create(sc).value();
  http::server_options so;
  so.tls_cert_file = pki.cert;
  so.tls_key_file = pki.key;
  auto srv = http::server::create(so, svc.as_handler()).value();
  const std::string url = "https://127.0.0.1:" + std::to_string(srv.port());

  cl::client_options lo;
  lo.local_models = {model};
  lo.local_threads = 1;
  auto local = cl::jit_client::create(lo).value();
  auto ro = tls_options_for({url}, pki.ca_cert);
  ro.auth_token = "s3cret";
  ro.hedge.enabled = false;
  auto remote = cl::jit_client::create(ro).value();

  const std::vector<std::string> captions = {"a cat on a mat", "two dogs", "", "the sea at night"};
  cl::embed_request req;
  req.model = "text-embed";
  req.input = "text";
  for (const auto& s : captions) req.rows.push_back(as_bytes_view(s));
  auto l = local.embed(req).get();
  auto r = remote.embed(req).get();
  REQUIRE(l);
  REQUIRE_MESSAGE(r, (r ? std::string() : r.error().message));
  CHECK(r->endpoint == url);
  REQUIRE(l->outputs.size() == r->outputs.size());
  for (std::size_t k = 0; k < l->outputs.size(); ++k) {
    REQUIRE(l->outputs[k].second.nbytes() == r->outputs[k].second.nbytes());
    CHECK(std::memcmp(l->outputs[k].second.data(), r->outputs[k].second.data(), l->outputs[k].second.nbytes()) == 0);
  }
  // Metadata over TLS too (the synchronous client), with the token.
  auto id = remote.identity("text-embed");
  REQUIRE_MESSAGE(id, (id ? std::string() : id.error().message));
  CHECK(id->fingerprint == std::string(model.version()));

  // Keep-alive over TLS: twenty more requests, one after the other, on the connection already open.
  const auto accepted = srv.stats().connections_accepted;
  for (int i = 0; i < 20; ++i) REQUIRE(remote.embed(req).get());
  CHECK(srv.stats().connections_accepted == accepted);
  CHECK(srv.stats().tls_handshake_failures == 0);

  // Without the token: refused by the service (over TLS, after a good handshake), never retried.
  auto no_token = cl::jit_client::create(tls_options_for({url}, pki.ca_cert)).value();
  req.rows.resize(1);  // one row: a 4xx on several is resent row by row
  auto denied = no_token.embed(req).get();
  REQUIRE_FALSE(denied);
  CHECK(denied.error().message.find("unauthorized") != std::string::npos);
  CHECK(no_token.stats().retries == 0);
  CHECK(no_token.stats().tls_failures == 0);
  srv.stop(1s);
}

TEST_CASE("https: a certificate that does not verify fails at once with io_error, the server unharmed") {
  const auto& pki = tls_test::files();
  fake_server tls_srv(always_ok(), true);
  auto bad = cl::jit_client::create(tls_options_for({tls_srv.url()}, pki.wrong_ca_cert)).value();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = bad.embed(request("m", tls_rows(2, 1))).get();
  REQUIRE_FALSE(r);
  CHECK(r.code() == errc::io_error);
  CHECK(r.error().message.find("TLS handshake with " + tls_srv.url() + " failed: certificate verify failed") !=
        std::string::npos);
  CHECK(tls_seconds_since(t0) < 2.5);  // not retried with backoff until the 5 s deadline
  CHECK(bad.stats().tls_failures == 1);
  CHECK(tls_srv.requests() == 0);

  // The system's CA paths do not hold the test CA either.
  auto system = cl::jit_client::create(tls_options_for({tls_srv.url()}, "")).value();
  CHECK(system.embed(request("m", tls_rows(1, 2))).get().code() == errc::io_error);

  auto good = cl::jit_client::create(tls_options_for({tls_srv.url()}, pki.ca_cert)).value();
  auto rows = tls_rows(3, 3);
  auto ok = good.embed(request("m", rows)).get();
  REQUIRE_MESSAGE(ok, (ok ? std::string() : ok.error().message));
  CHECK(matches_fake(*ok, rows));

  // A CA file that cannot be read fails create().
  auto missing = cl::jit_client::create(tls_options_for({tls_srv.url()}, pki.dir + "/nope.pem"));
  CHECK(missing.code() == errc::io_error);
  CHECK(missing.error().message.find("nope.pem") != std::string::npos);
}

TEST_CASE("https: mixed http and https endpoints, one whose certificate fails is skipped") {
  const auto& pki = tls_test::files();
  fake_server plain(always_ok());
  fake_server tls_srv(always_ok(), true);
  auto c = cl::jit_client::create(tls_options_for({plain.url(), tls_srv.url()}, pki.ca_cert)).value();
  for (int i = 0; i < 60; ++i) {
    auto rows = tls_rows(2, 100 + i);
    auto r = c.embed(request("m", rows)).get();
    REQUIRE_MESSAGE(r, (r ? std::string() : r.error().message));
    CHECK(matches_fake(*r, rows));
  }
  CHECK(plain.requests() > 0);
  CHECK(tls_srv.requests() > 0);
  CHECK(tls_srv.server_stats().connections_accepted <= 2);  // kept alive (a hedge may open a second one)

  // The same list trusting another CA: every request ends on the plain endpoint.
  auto skip = cl::jit_client::create(tls_options_for({tls_srv.url(), plain.url()}, pki.wrong_ca_cert)).value();
  const auto before = plain.requests();
  for (int i = 0; i < 10; ++i) {
    auto r = skip.embed(request("m", tls_rows(1, 200 + i))).get();
    REQUIRE_MESSAGE(r, (r ? std::string() : r.error().message));
    CHECK(r->endpoint == plain.url());
  }
  CHECK(plain.requests() == before + 10);
  CHECK(skip.stats().tls_failures >= 1);
}

TEST_CASE("https: https:// to a plain port and http:// to a TLS port fail bounded in time") {
  const auto& pki = tls_test::files();
  fake_server plain(always_ok());
  fake_server tls_srv(always_ok(), true);
  auto o = tls_options_for({"https://127.0.0.1:" + std::to_string(plain.port())}, pki.ca_cert);
  auto c = cl::jit_client::create(o).value();
  auto t0 = std::chrono::steady_clock::now();
  auto r = c.embed(request("m", tls_rows(1, 1))).get();
  REQUIRE_FALSE(r);
  CHECK(r.code() == errc::io_error);
  CHECK(r.error().message.find("TLS handshake") != std::string::npos);
  CHECK(tls_seconds_since(t0) < 2.5);
  CHECK(plain.requests() == 0);

  // A plain client on the TLS port: the server drops each connection after the failed handshake; the client
  // treats that as a connection failure (retried, bounded by retry.max_attempts), never as an answer.
  auto p = cl::jit_client::create(tls_options_for({"http://127.0.0.1:" + std::to_string(tls_srv.port())}, "")).value();
  t0 = std::chrono::steady_clock::now();
  auto pr = p.embed(request("m", tls_rows(1, 2))).get();
  REQUIRE_FALSE(pr);
  CHECK(pr.code() == errc::io_error);
  CHECK(tls_seconds_since(t0) < 3.0);
  CHECK(tls_srv.requests() == 0);
  CHECK(tls_srv.server_stats().tls_handshake_failures >= 1);
  // Both still serve their own kind.
  auto good = cl::jit_client::create(tls_options_for({plain.url(), tls_srv.url()}, pki.ca_cert)).value();
  for (int i = 0; i < 4; ++i) REQUIRE(good.embed(request("m", tls_rows(1, 10 + i))).get());
}
