// net/http over TLS: HTTPS round trips and keep-alive reuse, certificate and host checks, plain and TLS peers
// on the wrong port, the handshake deadline, and the server's certificate / key file errors.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>

#include "batching/eventually.hpp"
#include "http/http_test_util.hpp"
#include "jitembed/net/http.hpp"
#include "tls_test_util.hpp"

namespace http = jitembed::net::http;
using namespace std::chrono_literals;
using jitembed::errc;

namespace {

void echo_tls(http::request&& req, http::responder respond) {
  http::response r;
  r.body = req.method + " " + req.target + "|" + req.body;
  respond(std::move(r));
}

http::server_options tls_options() {
  const auto& f = tls_test::files();
  http::server_options o;
  o.tls_cert_file = f.cert;
  o.tls_key_file = f.key;
  o.header_timeout = 1000ms;
  o.idle_timeout = 5000ms;
  return o;
}

http::client_options tls_client(const std::string& ca) {
  http::client_options o;
  o.tls = true;
  o.tls_ca_file = ca;
  o.connect_timeout = 3000ms;
  o.io_timeout = 3000ms;
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_CASE("https: round trips, keep-alive reuse over TLS, large bodies, IP and DNS names") {
  auto srv = http::server::create(tls_options(), echo_tls).value();
  CHECK(srv.tls());
  CHECK(srv.url().rfind("https://127.0.0.1:", 0) == 0);
  http::client c("127.0.0.1", srv.port(), tls_client(tls_test::files().ca_cert));
  for (int i = 0; i < 5; ++i) {
    auto r = c.post("/echo/" + std::to_string(i), "body-" + std::to_string(i));
    REQUIRE_MESSAGE(r, (r ? std::string() : r.error().message));
    CHECK(r->status == 200);
    CHECK(r->body == "POST /echo/" + std::to_string(i) + "|body-" + std::to_string(i));
  }
  CHECK(c.connections_opened() == 1);  // one TLS connection, reused
  CHECK(srv.stats().connections_accepted == 1);
  CHECK(srv.stats().tls_handshake_failures == 0);

  const std::string big(3 << 20, 'x');  // many TLS records each way
  auto r = c.post("/big", big);
  REQUIRE(r);
  CHECK(r->body.size() == big.size() + std::string("POST /big|").size());

  // The certificate names localhost too (SNI + host name check).
  http::client by_name("localhost", srv.port(), tls_client(tls_test::files().ca_cert));
  auto n = by_name.get("/by-name");
  REQUIRE_MESSAGE(n, (n ? std::string() : n.error().message));
  CHECK(n->body == "GET /by-name|");
  srv.stop(1s);
}

TEST_CASE("https: a certificate that does not verify is io_error naming the reason, the server is unharmed") {
  const auto& f = tls_test::files();
  auto srv = http::server::create(tls_options(), echo_tls).value();
  const auto t0 = std::chrono::steady_clock::now();
  http::client wrong_ca("127.0.0.1", srv.port(), tls_client(f.wrong_ca_cert));
  auto r = wrong_ca.get("/x");
  REQUIRE_FALSE(r);
  CHECK(r.code() == errc::io_error);
  CHECK(r.error().message.find("TLS handshake with https://127.0.0.1:" + std::to_string(srv.port()) + " failed") !=
        std::string::npos);
  CHECK(r.error().message.find("certificate verify failed") != std::string::npos);
  CHECK(r.error().message.find("(unable to get local issuer certificate)") != std::string::npos);
  CHECK(seconds_since(t0) < 2.0);
  CHECK(jitembed::test::eventually([&] { return srv.stats().tls_handshake_failures == 1u; }, 3s));

  // The system's CA paths do not hold the test CA either.
  http::client system_ca("127.0.0.1", srv.port(), tls_client(""));
  CHECK(system_ca.get("/x").code() == errc::io_error);

  // Next good request works.
  http::client good("127.0.0.1", srv.port(), tls_client(f.ca_cert));
  auto ok = good.get("/after");
  REQUIRE_MESSAGE(ok, (ok ? std::string() : ok.error().message));
  CHECK(ok->body == "GET /after|");
  srv.stop(1s);

  // A certificate for another name, signed by the trusted CA: the host check refuses it.
  auto opts = tls_options();
  opts.tls_cert_file = f.other_name_cert;
  opts.tls_key_file = f.other_name_key;
  auto other = http::server::create(opts, echo_tls).value();
  http::client c("127.0.0.1", other.port(), tls_client(f.ca_cert));
  auto m = c.get("/x");
  REQUIRE_FALSE(m);
  CHECK(m.code() == errc::io_error);
  CHECK(m.error().message.find("certificate verify failed") != std::string::npos);
  CHECK(m.error().message.find("(IP address mismatch)") != std::string::npos);
  other.stop(1s);
}

TEST_CASE("https: a plain client on the TLS port and a TLS client on a plain port fail fast") {
  auto tls_srv = http::server::create(tls_options(), echo_tls).value();
  http::client_options plain_opts;
  plain_opts.io_timeout = 3000ms;
  http::client plain("127.0.0.1", tls_srv.port(), plain_opts);
  auto t0 = std::chrono::steady_clock::now();
  auto r = plain.get("/x");
  REQUIRE_FALSE(r);
  CHECK(r.code() == errc::io_error);
  CHECK(seconds_since(t0) < 2.0);
  CHECK(jitembed::test::eventually([&] { return tls_srv.stats().tls_handshake_failures == 1u; }, 3s));
  CHECK(tls_srv.stats().requests == 0);

  auto plain_srv = http::server::create(http::server_options{}, echo_tls).value();
  CHECK_FALSE(plain_srv.tls());
  http::client tls_to_plain("127.0.0.1", plain_srv.port(), tls_client(tls_test::files().ca_cert));
  t0 = std::chrono::steady_clock::now();
  auto p = tls_to_plain.get("/x");
  REQUIRE_FALSE(p);
  CHECK(p.code() == errc::io_error);
  CHECK(p.error().message.find("TLS handshake") != std::string::npos);
  CHECK(seconds_since(t0) < 2.0);
  // Both servers still serve their own kind.
  CHECK(http::client("127.0.0.1", plain_srv.port(), plain_opts).get("/ok").value().status == 200);
  CHECK(http::client("127.0.0.1", tls_srv.port(), tls_client(tls_test::files().ca_cert)).get("/ok").value().status ==
        200);
  plain_srv.stop(1s);
  tls_srv.stop(1s);
}

TEST_CASE("https: a peer that never finishes the handshake is closed after header_timeout") {
  auto opts = tls_options();
  opts.header_timeout = 300ms;
  auto srv = http::server::create(opts, echo_tls).value();
  http_test::raw_socket s(srv.port());
  REQUIRE(s.connected());
  const auto t0 = std::chrono::steady_clock::now();
  s.read_until_close(3000ms);
  CHECK(s.closed());
  CHECK(seconds_since(t0) < 2.0);
  CHECK(jitembed::test::eventually([&] { return srv.stats().tls_handshake_failures == 1u; }, 3s));
  CHECK(srv.stats().timeouts == 1);
  CHECK(jitembed::test::eventually([&] { return srv.stats().connections_active == 0u; }, 3s));
  srv.stop(1s);
}

TEST_CASE("https: certificate, key and CA file errors name the file") {
  const auto& f = tls_test::files();
  auto o = tls_options();
  o.tls_cert_file = f.dir + "/missing.pem";
  auto r = http::server::create(o, echo_tls);
  REQUIRE_FALSE(r);
  CHECK(r.code() == errc::io_error);
  CHECK(r.error().message.find("missing.pem") != std::string::npos);

  o = tls_options();
  o.tls_cert_file = f.garbage;
  r = http::server::create(o, echo_tls);
  CHECK(r.code() == errc::invalid_argument);
  CHECK(r.error().message.find("garbage.pem") != std::string::npos);

  o = tls_options();
  o.tls_key_file = f.garbage;
  r = http::server::create(o, echo_tls);
  CHECK(r.code() == errc::invalid_argument);
  CHECK(r.error().message.find("garbage.pem") != std::string::npos);

  o = tls_options();
  o.tls_key_file = f.other_name_key;  // a valid key of another certificate
  r = http::server::create(o, echo_tls);
  CHECK(r.code() == errc::invalid_argument);
  CHECK(r.error().message.find("does not match") != std::string::npos);

  o = tls_options();
  o.tls_key_file.clear();
  r = http::server::create(o, echo_tls);
  CHECK(r.code() == errc::invalid_argument);

  auto srv = http::server::create(tls_options(), echo_tls).value();
  http::client missing_ca("127.0.0.1", srv.port(), tls_client(f.dir + "/no-ca.pem"));
  auto m = missing_ca.get("/x");
  CHECK(m.code() == errc::io_error);
  CHECK(m.error().message.find("no-ca.pem") != std::string::npos);
  http::client garbage_ca("127.0.0.1", srv.port(), tls_client(f.garbage));
  auto g = garbage_ca.get("/x");
  CHECK(g.code() == errc::invalid_argument);
  CHECK(g.error().message.find("garbage.pem") != std::string::npos);
  CHECK(srv.stats().connections_accepted == 0);  // both failed before connecting
  srv.stop(1s);
}
