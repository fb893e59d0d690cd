// net/http: limits, malformed input, timeouts (slowloris), 100-continue, pipelining, graceful stop,
// and the client's timeout / reconnect / size-limit paths.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include "batching/eventually.hpp"
#include "http/http_test_util.hpp"
#include "jitembed/net/http.hpp"

namespace http = jitembed::net::http;
using namespace std::chrono_literals;
using http_test::raw_socket;
using http_test::starts_with;
using jitembed::errc;

namespace {

struct counting_echo {
  std::atomic<int>* calls;
  void operator()(http::request&& req, http::responder respond) const {
    ++*calls;
    http::response r;
    r.body = req.method + " " + req.target + "|" + req.body;
    respond(std::move(r));
  }
};

http::server_options short_options() {
  http::server_options o;
  o.header_timeout = 2000ms;  // generous: a loaded CI machine must not turn ordinary requests into 408s
  o.body_timeout = 2000ms;
  o.idle_timeout = 2000ms;
  o.write_timeout = 1000ms;
  o.max_header_bytes = 4096;
  o.max_body_bytes = 1000;
  return o;
}

}  // namespace

TEST_CASE("413 from Content-Length before the body is read") {
  std::atomic<int> calls{0};
  auto srv_made = http::server::create(short_options(), counting_echo{&calls});
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  raw_socket s(port);
  REQUIRE(s.connected());
  // Header only: the 413 must come without the client ever sending the body.
  REQUIRE(s.send("POST /infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n"));
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = s.read_until_close(2000ms);
  CHECK(std::chrono::steady_clock::now() - t0 < 1500ms);  // not waiting for the 2 s body timeout
  CHECK(starts_with(out, "HTTP/1.1 413 "));
  CHECK(out.find("Connection: close") != std::string::npos);
  CHECK(out.find("max_body_bytes 1000") != std::string::npos);
  CHECK(s.closed());
  CHECK(calls == 0);

  // Chunked body over the limit: 413 as well.
  raw_socket s2(port);
  REQUIRE(s2.send("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n" + std::string(2000, 'a') +
                  "\r\n0\r\n\r\n"));
  CHECK(starts_with(s2.read_until_close(2000ms), "HTTP/1.1 413 "));

  // At the limit: served.
  http::client c("127.0.0.1", port);
  auto ok = c.post("/", std::string(1000, 'q'));
  REQUIRE(ok);
  CHECK(ok->status == 200);
  auto too_big = c.post("/", std::string(1001, 'q'));
  REQUIRE(too_big);
  CHECK(too_big->status == 413);
  CHECK(srv.stats().bad_requests == 3);
}

TEST_CASE("431 for a header over max_header_bytes") {
  std::atomic<int> calls{0};
  auto srv_made = http::server::create(short_options(), counting_echo{&calls});
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  raw_socket s(port);
  REQUIRE(s.send("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(8000, 'h') + "\r\n\r\n"));
  const auto out = s.read_until_close(2000ms);
  CHECK(starts_with(out, "HTTP/1.1 431 "));
  CHECK(out.find("max_header_bytes 4096") != std::string::npos);
  CHECK(s.closed());
  CHECK(calls == 0);
}

TEST_CASE("malformed requests get 400 and never crash the server") {
  std::atomic<int> calls{0};
  auto srv_made = http::server::create(short_options(), counting_echo{&calls});
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  for (const char* bad : {"GARBAGE\r\n\r\n", "GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
                          "GET / HTTP/9.9\r\n\r\n", "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
                          "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab",
                          "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}) {
    CAPTURE(bad);
    raw_socket s(port);
    REQUIRE(s.send(bad));
    const auto out = s.read_until_close(2000ms);
    CHECK(starts_with(out, "HTTP/1.1 400 "));
    CHECK(out.find("{\"error\":\"http: malformed request") != std::string::npos);
    CHECK(s.closed());
  }
  // Random bytes: any answer is fine, but no crash and the server keeps serving.
  std::mt19937 rng(7);
  for (int i = 0; i < 40; ++i) {
    std::string junk(1 + rng() % 600, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    if (i % 2) junk = "POST /x HTTP/1.1\r\n" + junk;
    raw_socket s(port);
    s.send(junk);
    (void)s.read_until_close(i % 4 == 0 ? 600ms : 50ms);
  }
  CHECK(calls == 0);
  http::client c("127.0.0.1", port);
  auto r = c.get("/still-alive");
  REQUIRE(r);
  CHECK(r->body == "GET /still-alive|");
}

TEST_CASE("slowloris is closed after header_timeout while others are served") {
  std::atomic<int> calls{0};
  auto opts = short_options();
  opts.io_threads = 1;  // a stalled client must not hold the only thread
  opts.header_timeout = 300ms;
  opts.body_timeout = 300ms;
  auto srv_made = http::server::create(opts, counting_echo{&calls});
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  raw_socket slow(port);
  REQUIRE(slow.send("GET /slow HTTP/1.1\r\nHost: x\r\nX-Half"));
  raw_socket silent(port);  // connects, sends nothing
  REQUIRE(silent.connected());

  http::client c("127.0.0.1", port);
  for (int i = 0; i < 20; ++i) {
    auto r = c.get("/fast");
    REQUIRE(r);
    CHECK(r->status == 200);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = slow.read_until_close(3000ms);
  const auto dt = std::chrono::steady_clock::now() - t0;
  CHECK(starts_with(out, "HTTP/1.1 408 "));
  CHECK(slow.closed());
  CHECK(dt < 1500ms);
  const auto out2 = silent.read_until_close(3000ms);
  CHECK(starts_with(out2, "HTTP/1.1 408 "));
  CHECK(silent.closed());
  CHECK(srv.stats().timeouts == 2);
  CHECK(calls == 20);

  // A body that stalls halfway: 408 after body_timeout.
  raw_socket half(port);
  REQUIRE(half.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"));
  CHECK(starts_with(half.read_until_close(3000ms), "HTTP/1.1 408 "));
  CHECK(half.closed());
  CHECK(srv.stats().timeouts == 3);
}

TEST_CASE("idle keep-alive connections are closed after idle_timeout") {
  std::atomic<int> calls{0};
  auto opts = short_options();
  opts.idle_timeout = 200ms;
  auto srv_made = http::server::create(opts, counting_echo{&calls});
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  raw_socket s(port);
  REQUIRE(s.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"));
  const auto first = s.read_responses(1, 2000ms);
  CHECK(starts_with(first, "HTTP/1.1 200 "));
  CHECK(!s.closed());
  const auto rest = s.read_until_close(2000ms);
  CHECK(rest.empty());  // closed silently, no 408 for an idle connection
  CHECK(s.closed());
  CHECK(srv.stats().timeouts == 0);

  // The client notices the server closed its pooled connection and reconnects once.
  http::client c("127.0.0.1", port);
  REQUIRE(c.get("/1"));
  // The server closes the pooled connection after idle_timeout (it closes the socket, then unregisters it).
  REQUIRE(jitembed::test::eventually([&] { return srv.stats().connections_active == 0; }));
  auto again = c.get("/2");
  REQUIRE(again);
  CAPTURE(again->status);
  CAPTURE(again->body);
  CHECK(again->body == "GET /2|");
  CHECK(c.connections_opened() == 2);
}

TEST_CASE("Expect: 100-continue / pipelining / HTTP/1.0") {
  std::atomic<int> calls{0};
  auto srv_made = http::server::create(short_options(), counting_echo{&calls});
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  {
    raw_socket s(port);
    REQUIRE(s.send("POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
    const auto interim = s.read_responses(1, 2000ms);
    CHECK(interim == "HTTP/1.1 100 Continue\r\n\r\n");
    REQUIRE(s.send("hello"));
    const auto out = s.read_responses(1, 2000ms);
    CHECK(starts_with(out, "HTTP/1.1 200 "));
    CHECK(out.find("POST /e|hello") != std::string::npos);
  }
  {
    raw_socket s(port);  // three requests in one write: answered in order, one at a time
    REQUIRE(s.send("GET /1 HTTP/1.1\r\nHost: x\r\n\r\nPOST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                   "GET /3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    const auto out = s.read_until_close(2000ms);
    CHECK(raw_socket::complete_responses(out) == 3);
    const auto p1 = out.find("GET /1|"), p2 = out.find("POST /2|abc"), p3 = out.find("GET /3|");
    CHECK(p1 != std::string::npos);
    CHECK(p2 != std::string::npos);
    CHECK(p3 != std::string::npos);
    CHECK(p1 < p2);
    CHECK(p2 < p3);
    CHECK(s.closed());
  }
  {
    raw_socket s(port);
    REQUIRE(s.send("GET /old HTTP/1.0\r\n\r\n"));
    const auto out = s.read_until_close(2000ms);
    CHECK(starts_with(out, "HTTP/1.1 200 "));
    CHECK(out.find("Connection: close") != std::string::npos);
    CHECK(s.closed());
  }
}

TEST_CASE("max_connections refuses extra connections") {
  std::atomic<int> calls{0};
  auto opts = short_options();
  opts.max_connections = 2;
  opts.header_timeout = 3000ms;
  auto srv_made = http::server::create(opts, counting_echo{&calls});
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  raw_socket a(port), b(port);
  REQUIRE(a.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"));
  REQUIRE(b.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n"));
  CHECK(starts_with(a.read_responses(1, 2000ms), "HTTP/1.1 200 "));
  CHECK(starts_with(b.read_responses(1, 2000ms), "HTTP/1.1 200 "));
  raw_socket extra(port);
  extra.send("GET /c HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(extra.read_until_close(2000ms).empty());
  CHECK(extra.closed());
  CHECK(srv.stats().connections_rejected == 1);
  CHECK(srv.stats().connections_active == 2);
}

TEST_CASE("graceful stop drains an in-flight request and refuses new connections") {
  std::mutex mu;
  std::vector<std::thread> workers;
  std::atomic<bool> slow_in_handler{false}, slow_answered{false};
  auto opts = short_options();
  opts.idle_timeout = 60000ms;
  auto srv_made = http::server::create(opts, [&](http::request&& req, http::responder respond) {
    std::lock_guard lk(mu);
    if (req.target == "/slow") slow_in_handler = true;
    workers.emplace_back([&slow_answered, target = req.target, respond = std::move(respond)] {
      std::this_thread::sleep_for(target == "/slow" ? 400ms : 0ms);  // emulates a slow handler
      if (target == "/slow") slow_answered = true;
      http::response r;
      r.body = "done " + target;
      respond(std::move(r));
    });
  });
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();

  raw_socket idle(port);  // an idle keep-alive connection must not hold up stop()
  REQUIRE(idle.send("GET /i HTTP/1.1\r\nHost: x\r\n\r\n"));
  CHECK(starts_with(idle.read_responses(1, 2000ms), "HTTP/1.1 200 "));

  http::client c("127.0.0.1", port);
  jitembed::result<http::response> slow = jitembed::fail(errc::internal, "not run");
  std::thread caller([&] { slow = c.get("/slow"); });
  REQUIRE(jitembed::test::eventually([&] { return slow_in_handler.load(); }));  // in the handler now
  const auto t0 = std::chrono::steady_clock::now();
  srv.stop(5000ms);
  const auto dt = std::chrono::steady_clock::now() - t0;
  CHECK(slow_answered);  // stop() waited for the in-flight request
  caller.join();
  REQUIRE(slow);
  CHECK(slow->status == 200);
  CHECK(slow->body == "done /slow");
  CHECK(http::find_header(slow->headers, "connection") == "close");
  CHECK(dt < 3000ms);   // but not for the idle connection's 60 s timeout
  CHECK(idle.read_until_close(1000ms).empty());
  CHECK(idle.closed());

  http::client c2("127.0.0.1", port, http::client_options{.connect_timeout = 500ms});
  auto refused = c2.get("/new");
  CHECK(!refused);
  CHECK(refused.code() == errc::io_error);
  // The server is named as context, and rendered in what() after the message.
  const std::string where = "127.0.0.1:" + std::to_string(port);
  CHECK(refused.error().context.endpoint == where);
  CHECK(std::string(jitembed::error(refused.error()).what()).ends_with(" [endpoint=" + where + "]"));
  for (auto& t : workers) t.join();
}

TEST_CASE("stop with a zero drain closes in-flight requests / late responders are harmless") {
  http::responder parked;
  std::mutex mu;
  {
    auto srv_made = http::server::create(short_options(), [&](http::request&&, http::responder respond) {
      std::lock_guard lk(mu);
      parked = std::move(respond);
    });
    REQUIRE(srv_made);
    auto& srv = *srv_made;
    const std::uint16_t port = srv.port();
      raw_socket s(port);
    REQUIRE(s.send("GET /never HTTP/1.1\r\nHost: x\r\n\r\n"));
    REQUIRE(jitembed::test::eventually([&] {
      std::lock_guard lk(mu);
      return static_cast<bool>(parked);
    }));
    srv.stop(0ms);
    CHECK(s.read_until_close(1000ms).empty());
    CHECK(s.closed());
  }
  std::lock_guard lk(mu);
  REQUIRE(parked);
  parked(http::response{});  // after the server is gone: a no-op
  parked = nullptr;
}

TEST_CASE("client: timeout against a server that never answers") {
  std::mutex mu;
  std::vector<http::responder> parked;
  auto srv_made = http::server::create(short_options(), [&](http::request&&, http::responder respond) {
    std::lock_guard lk(mu);
    parked.push_back(std::move(respond));
  });
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  http::client c("127.0.0.1", port, http::client_options{.io_timeout = 200ms});
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.get("/never");
  const auto dt = std::chrono::steady_clock::now() - t0;
  CHECK(!r);
  CHECK(r.code() == errc::timeout);
  CHECK(is_retryable(r.code()));
  CHECK(r.error().message.find("timed out after 200 ms waiting for GET /never") != std::string::npos);
  CHECK(dt >= 200ms);
  CHECK(dt < 1500ms);
  CHECK(c.idle_connections() == 0);  // a timed-out connection is not reused
  srv.stop(0ms);
}

TEST_CASE("client: errors for bad arguments / refused connections and oversized responses") {
  auto srv_made = http::server::create(http::server_options{}, [](http::request&&, http::responder respond) {
    http::response r;
    r.body = std::string(5000, 'r');
    respond(std::move(r));
  });
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  http::client c("127.0.0.1", port, http::client_options{.max_response_bytes = 1000});
  CHECK(c.request("G T", "/").code() == errc::invalid_argument);
  CHECK(c.request("GET", "/a b").code() == errc::invalid_argument);
  CHECK(c.request("GET", "/", {{"X", "a\r\nB: c"}}).code() == errc::invalid_argument);
  CHECK(c.request("GET", "/", {{"Content-Length", "5"}}).code() == errc::invalid_argument);
  auto big = c.get("/");
  CHECK(big.code() == errc::limit_exceeded);
  CHECK(big.error().message.find("max_response_bytes 1000") != std::string::npos);

  http::client ok("127.0.0.1", port);
  auto r = ok.get("/");
  REQUIRE(r);
  CHECK(r->body.size() == 5000);

  srv.stop(0ms);
  auto refused = ok.get("/");  // pooled connection closed, reconnect refused
  CHECK(refused.code() == errc::io_error);

  CHECK(http::server::create(http::server_options{.host = "not-an-address.invalid"}, [](http::request&&, http::responder) {}).code() == errc::io_error);
  CHECK(http::server::create(http::server_options{.io_threads = 0}, [](http::request&&, http::responder) {}).code() == errc::invalid_argument);
}
