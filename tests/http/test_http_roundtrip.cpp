// net/http: client ↔ server round trips, keep-alive reuse, concurrency, asynchronous responders.
#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "http/http_test_util.hpp"
#include "jitembed/net/http.hpp"

namespace http = jitembed::net::http;
using namespace std::chrono_literals;
using jitembed::errc;

namespace {

// Echoes "METHOD target|body" and the X-Echo header; /pieces answers with a head plus two scattered pieces.
void echo(http::request&& req, http::responder respond) {
  http::response r;
  r.headers.emplace_back("Content-Type", "text/plain");
  if (auto e = http::find_header(req.headers, "x-echo"); !e.empty()) r.headers.emplace_back("X-Echo", std::string(e));
  if (req.target == "/pieces") {
    auto owner = std::make_shared<std::pair<std::string, std::string>>("PIECE-ONE;", std::string(100000, 'z'));
    r.body = "head;";
    r.pieces = {jitembed::as_bytes_view(owner->first), jitembed::as_bytes_view(owner->second)};
    r.keep_alive = owner;
  } else if (req.target == "/big") {
    // Echo a large body back without copying it: the request body becomes the piece's owner.
    auto owner = std::make_shared<std::string>(std::move(req.body));
    r.pieces = {jitembed::as_bytes_view(*owner)};
    r.keep_alive = owner;
  } else {
    r.body = req.method + " " + req.target + "|" + req.body;
  }
  respond(std::move(r));
}

http::server_options fast_options() {
  http::server_options o;
  o.header_timeout = 2000ms;
  o.body_timeout = 2000ms;
  o.idle_timeout = 5000ms;
  o.write_timeout = 2000ms;
  return o;
}

// A worker that answers requests from its own thread after a delay.
class delayed_worker {
 public:
  explicit delayed_worker(std::chrono::milliseconds delay) : delay_(delay), thread_([this] { loop(); }) {}
  ~delayed_worker() {
    {
      std::lock_guard lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void push(http::request&& req, http::responder respond) {
    {
      std::lock_guard lk(mu_);
      q_.emplace_back(std::chrono::steady_clock::now() + delay_, std::move(req), std::move(respond));
    }
    cv_.notify_all();
  }
  std::thread::id id() const { return thread_.get_id(); }

 private:
  struct item {
    item(std::chrono::steady_clock::time_point w, http::request&& r, http::responder&& s)
        : when(w), req(std::move(r)), respond(std::move(s)) {}
    std::chrono::steady_clock::time_point when;
    http::request req;
    http::responder respond;
  };
  void loop() {
    std::unique_lock lk(mu_);
    while (true) {
      cv_.wait(lk, [&] { return done_ || !q_.empty(); });
      if (q_.empty()) return;
      auto it = std::move(q_.front());
      q_.pop_front();
      lk.unlock();
      std::this_thread::sleep_until(it.when);
      http::response r;
      r.body = "late " + it.req.target;
      it.respond(std::move(r));
      lk.lock();
    }
  }
  std::chrono::milliseconds delay_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<item> q_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

TEST_CASE("GET and POST round trips / headers / HEAD") {
  auto srv_made = http::server::create(fast_options(), echo);
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  CHECK(port != 0);
  CHECK(srv.port() == port);
  CHECK(srv.url() == "http://127.0.0.1:" + std::to_string(port));

  http::client c("127.0.0.1", port);
  auto g = c.get("/v2/health/live?x=1", {{"X-Echo", "hello"}});
  REQUIRE(g);
  CHECK(g->status == 200);
  CHECK(g->body == "GET /v2/health/live?x=1|");
  CHECK(http::find_header(g->headers, "x-echo") == "hello");
  CHECK(http::find_header(g->headers, "content-length") == std::to_string(g->body.size()));

  auto p = c.post("/infer", "payload\r\n\0bytes");
  REQUIRE(p);
  CHECK(p->body == "POST /infer|payload\r\n");

  const std::string binary("a\0b\r\n\r\nc", 8);
  auto p2 = c.request("PUT", "/x", {}, binary);
  REQUIRE(p2);
  CHECK(p2->body == "PUT /x|" + binary);

  auto h = c.request("HEAD", "/head");
  REQUIRE(h);
  CHECK(h->status == 200);
  CHECK(h->body.empty());
  CHECK(http::find_header(h->headers, "content-length") == std::to_string(std::strlen("HEAD /head|")));
  // The HEAD response carried no body bytes: the connection is still in sync.
  auto g2 = c.get("/after-head");
  REQUIRE(g2);
  CHECK(g2->body == "GET /after-head|");
  CHECK(c.connections_opened() == 1);
}

TEST_CASE("large bodies and scatter/gather pieces both ways") {
  auto srv_made = http::server::create(fast_options(), echo);
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  http::client c("127.0.0.1", port);

  std::string big(8u << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  auto r = c.post("/big", big);
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body.size() == big.size());
  CHECK(r->body == big);

  auto pr = c.get("/pieces");
  REQUIRE(pr);
  CHECK(pr->body == "head;PIECE-ONE;" + std::string(100000, 'z'));

  // Client side pieces: body + pieces arrive back to back, Content-Length covers all.
  const std::string a = "first|", b(70000, 'b'), d = "|last";
  const jitembed::bytes_view pieces[] = {jitembed::as_bytes_view(b), jitembed::as_bytes_view(d)};
  auto cr = c.request("POST", "/gather", {}, a, pieces);
  REQUIRE(cr);
  CHECK(cr->body == "POST /gather|" + a + b + d);
}

TEST_CASE("keep-alive reuses one connection for many requests") {
  auto srv_made = http::server::create(fast_options(), echo);
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  http::client c("127.0.0.1", port);
  for (int i = 0; i < 300; ++i) {
    auto r = c.get("/k/" + std::to_string(i));
    REQUIRE(r);
    REQUIRE(r->body == "GET /k/" + std::to_string(i) + "|");
  }
  CHECK(c.connections_opened() == 1);
  CHECK(c.idle_connections() == 1);
  const auto s = srv.stats();
  CHECK(s.connections_accepted == 1);
  CHECK(s.requests == 300);
  CHECK(s.connections_active == 1);
}

TEST_CASE("8 threads x 200 requests through one pooled client") {
  auto srv_made = http::server::create(fast_options(), echo);
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  http::client c("127.0.0.1", port);
  std::atomic<int> ok{0}, bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string body = std::to_string(t) + ":" + std::to_string(i);
        auto r = c.post("/c", body);
        if (r && r->status == 200 && r->body == "POST /c|" + body)
          ++ok;
        else
          ++bad;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ok == 1600);
  CHECK(bad == 0);
  CHECK(srv.stats().requests == 1600);
  CHECK(c.connections_opened() <= 8 + 8);  // at most one per concurrent caller (plus pool churn)
  CHECK(c.idle_connections() <= 8);
}

TEST_CASE("respond() from another thread after a delay") {
  delayed_worker worker(60ms);
  auto srv_made = http::server::create(fast_options(), [&](http::request&& req, http::responder respond) {
    worker.push(std::move(req), std::move(respond));
  });
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  http::client c("127.0.0.1", port);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.get("/slow");
  const auto dt = std::chrono::steady_clock::now() - t0;
  REQUIRE(r);
  CHECK(r->body == "late /slow");
  CHECK(dt >= 60ms);

  // Several in flight at once, on separate connections, each answered late.
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([&, i] {
      auto rr = c.get("/p" + std::to_string(i));
      if (rr && rr->body == "late /p" + std::to_string(i)) ++ok;
    });
  for (auto& t : ts) t.join();
  CHECK(ok == 4);
}

TEST_CASE("a handler that throws or drops the responder yields 500 / the server keeps serving") {
  auto srv_made = http::server::create(fast_options(), [](http::request&& req, http::responder respond) {
    if (req.target == "/throw") throw std::runtime_error("boom");
    if (req.target == "/drop") return;  // responder destroyed unanswered
    http::response r;
    r.body = "fine";
    respond(std::move(r));
    respond(http::response{});  // a second call is ignored
  });
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  http::client c("127.0.0.1", port);
  auto t = c.get("/throw");
  REQUIRE(t);
  CHECK(t->status == 500);
  CHECK(t->body.find("boom") != std::string::npos);
  auto d = c.get("/drop");
  REQUIRE(d);
  CHECK(d->status == 500);
  CHECK(d->body.find("without a response") != std::string::npos);
  auto f = c.get("/fine");
  REQUIRE(f);
  CHECK(f->status == 200);
  CHECK(f->body == "fine");
  auto f2 = c.get("/fine");  // the ignored second response did not desynchronise the connection
  REQUIRE(f2);
  CHECK(f2->body == "fine");
}

TEST_CASE("response header sanitizing and status codes") {
  auto srv_made = http::server::create(fast_options(), [](http::request&&, http::responder respond) {
    http::response r;
    r.status = 404;
    r.headers = {{"Content-Length", "999"}, {"X-Bad", "a\r\nInjected: 1"}, {"Bad Name", "x"}, {"X-Ok", "yes"}};
    r.body = "{\"error\":\"nope\"}";
    respond(std::move(r));
  });
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();
  http::client c("127.0.0.1", port);
  auto r = c.get("/m");
  REQUIRE(r);
  CHECK(r->status == 404);
  CHECK(r->body == "{\"error\":\"nope\"}");
  CHECK(http::find_header(r->headers, "x-ok") == "yes");
  CHECK(http::find_header(r->headers, "injected").empty());
  CHECK(http::find_header(r->headers, "x-bad").empty());
  CHECK(http::find_header(r->headers, "content-length") == "16");
}
