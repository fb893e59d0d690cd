// The JIT client against scripted KServe servers and the real jitembed service on 127.0.0.1: results,
// balancing, retries and their budget, hedging, deadlines, 404 ejection, row splitting, cancellation,
// coalescing, endpoint lists changed mid-run, and local mode equal to remote mode.
#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "client_test_util.hpp"
#include "jitembed/client/detail/client_policy.hpp"
#include "jitembed/client/endpoints.hpp"
#include "jitembed/models/text_embed.hpp"

using namespace client_test;
namespace cl = jitembed::client;

namespace {

std::vector<std::string> rows_of(std::size_t n, std::size_t seed) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back("row-" + std::to_string(seed) + "-" + std::to_string(i));
  return out;
}

cl::client_options options_for(std::vector<std::string> urls) {
  cl::client_options o;
  o.endpoints.list = std::move(urls);
  o.request_timeout = 5s;
  return o;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("jitembed_client_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
  }
  std::filesystem::rename(tmp, path);  // atomic: the watcher never sees half a list
}

// Polls `pred` until it holds or `limit` passes (a condition, not an ordering sleep).
template <class P>
bool eventually(P pred, std::chrono::milliseconds limit = 5s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

}  // namespace

TEST_CASE("endpoint lists: URLs, comments, blanks, duplicates, bad lines fail the whole list") {
  auto l =
      cl::parse_endpoint_list("# fleet\n http://127.0.0.1:8000 \n\nhttp://[::1]:9000 # v6\nhttp://127.0.0.1:8000\r\n")
          .value();
  REQUIRE(l.size() == 2);
  CHECK(l[0].url == "http://127.0.0.1:8000");
  CHECK(l[0].port == 8000);
  CHECK(l[1].host == "::1");
  CHECK(cl::parse_endpoint_list("http://a:1\nnot-a-url\n").code() == errc::invalid_argument);
  CHECK(cl::parse_endpoint_list("http://a:0\n").code() == errc::invalid_argument);
  CHECK(cl::parse_endpoint_list("http://a\n").code() == errc::invalid_argument);
  CHECK(cl::parse_endpoint_list("ftp://a:1\n").code() == errc::invalid_argument);
  auto tls =
      cl::parse_endpoint_list("https://a:1\nhttp://a:1\nhttps://[::1]:2/\n").value();  // mixed; http and https differ
  REQUIRE(tls.size() == 3);
  CHECK(tls[0].url == "https://a:1");
  CHECK(tls[0].tls);
  CHECK_FALSE(tls[1].tls);
  CHECK(tls[2].url == "https://[::1]:2");
  CHECK(tls[2].host == "::1");
  auto three = cl::parse_endpoint_list("grpc://a:1\nhttps://a:1\nhttp://a:1\n").value();  // one host, three transports
  REQUIRE(three.size() == 3);
  CHECK((cl::is_grpc(three[0]) && !three[0].tls));
  CHECK((!cl::is_grpc(three[1]) && three[1].tls));
  CHECK(cl::parse_endpoint_list("").value().empty());
  auto u = cl::parse_endpoint_url("http://127.0.0.1:9/fleet/endpoints").value();
  CHECK(u.path == "/fleet/endpoints");
}

TEST_CASE("policies: retry budget, backoff with jitter, HTTP status to errc") {
  cl::retry_options ro;
  ro.budget_ratio = 0.2;
  ro.budget_min_per_s = 0;
  cl::detail::retry_budget b(ro);
  int spent = 0;
  while (b.try_spend()) ++spent;  // the initial balance (cap) is spent, then only deposits count
  CHECK(spent == 10);
  for (int i = 0; i < 100; ++i) b.on_request();
  int more = 0;
  while (b.try_spend()) ++more;
  CHECK(more == 10);  // 100 requests * 0.2 = 20 tokens, capped at 10

  std::mt19937_64 rng(1);
  for (int r = 1; r < 12; ++r) {
    const auto d = cl::detail::backoff_delay(ro, r, rng);
    CHECK(d >= 0us);
    CHECK(d <= std::chrono::duration_cast<std::chrono::microseconds>(ro.backoff_max));
  }
  CHECK(cl::detail::http_error(503, "{\"error\":\"queue full\"}", "x").code == errc::unavailable);
  CHECK(cl::detail::http_error(504, "", "x").code == errc::timeout);
  CHECK(cl::detail::http_error(404, "{\"error\":\"nope\"}", "x").code == errc::not_found);
  CHECK(cl::detail::http_error(400, "{\"error\":\"bad\",\"errc\":\"invalid_utf8\"}", "x").code == errc::invalid_utf8);
  CHECK(cl::detail::http_error(503, "{\"error\":\"oom\",\"errc\":\"resource_exhausted\"}", "x").code ==
        errc::resource_exhausted);
  CHECK(cl::detail::http_error(500, "oops", "x").code == errc::internal);
  CHECK(cl::detail::http_error(429, "", "x").code == errc::unavailable);
}

TEST_CASE("http transport: a failed answer's status is its outcome's fault, 404 not_found, 502 retried") {
  using f = cl::detail::attempt_fault;
  const auto fault = [](int status, std::string body = "") {
    return cl::detail::http_outcome(status, body, "x").fault;
  };
  const auto code = [](int status, std::string body = "") {
    return cl::detail::http_outcome(status, body, "x").answer.code();
  };
  for (int s : {503, 504, 408, 429}) CHECK(fault(s) == f::busy);
  CHECK(fault(400, "{\"error\":\"late\",\"errc\":\"timeout\"}") == f::busy);  // the body's errc counts
  for (int s : {400, 404, 413, 499}) CHECK(fault(s) == f::request);
  CHECK(code(404, "{\"error\":\"x\",\"errc\":\"invalid_argument\"}") == errc::not_found);
  for (int s : {500, 501, 502, 507}) CHECK(fault(s) == f::endpoint);
  CHECK(code(500, "{\"error\":\"gone\",\"errc\":\"unavailable\"}") == errc::unavailable);  // endpoint, retried
  CHECK(code(502) == errc::unavailable);  // a proxy whose upstream is down: retried
  CHECK(code(500) == errc::internal);
  CHECK(fault(302) == f::endpoint);  // not a KServe answer
  using cl::detail::answer_action;
  const auto action = [](int status, std::size_t rows) {
    const auto o = cl::detail::http_outcome(status, "", "x");
    return cl::detail::after_failed_answer(o.fault, o.answer.code(), rows);
  };
  CHECK(action(404, 4) == answer_action::eject);
  CHECK(action(503, 4) == answer_action::retry);
  CHECK(action(502, 1) == answer_action::retry);
  CHECK(action(400, 4) == answer_action::split_rows);
  CHECK(action(400, 1) == answer_action::fail);
  CHECK(action(500, 4) == answer_action::fail);
}

TEST_CASE("create: option errors are invalid_argument, an unreadable endpoints file fails at once") {
  cl::client_options none;
  CHECK(cl::jit_client::create(none).code() == errc::invalid_argument);
  cl::client_options two;
  two.endpoints.list = {"http://127.0.0.1:1"};
  two.endpoints.file = "/nonexistent";
  CHECK(cl::jit_client::create(two).code() == errc::invalid_argument);
  cl::client_options bad;
  bad.endpoints.list = {"ftp://x:1"};
  CHECK(cl::jit_client::create(bad).code() == errc::invalid_argument);
  cl::client_options missing;
  missing.endpoints.file = "/nonexistent/endpoints.txt";
  CHECK(cl::jit_client::create(missing).code() == errc::io_error);
}

TEST_CASE("remote: rows in order, the deadline sent as the KServe timeout, hundreds in flight on few connections") {
  // one I/O thread (connections on the io_context's executor) and four (each connection on its own strand)
  for (const int io_threads : {1, 4}) {
    CAPTURE(io_threads);
    fake_server s(always_ok());
    auto o = options_for({s.url()});
    o.io_threads = io_threads;
    auto c = cl::jit_client::create(std::move(o)).value();
    std::vector<std::vector<std::string>> rows;
    std::vector<std::future<result<cl::embed_result>>> fs;
    for (int i = 0; i < 400; ++i) {
      rows.push_back(rows_of(1 + i % 5, i));
      fs.push_back(c.embed(request("m", rows.back())));
    }
    auto rs = wait_all(fs);
    for (std::size_t i = 0; i < rs.size(); ++i) {
      REQUIRE(rs[i]);
      CHECK(matches_fake(*rs[i], rows[i]));
      CHECK(rs[i]->model_version == "1");
    }
    for (const auto& seen : s.seen()) {
      CHECK(seen.timeout_us > 0);
      CHECK(seen.timeout_us <= 5'000'000);
    }
    const auto st = c.stats();
    CHECK(st.completed == 400);
    CHECK(st.retries == 0);
    REQUIRE(st.endpoints.size() == 1);
    CHECK(st.endpoints[0].connections_opened <= 400);
    CHECK(c.identity("m").value().fingerprint == "fake-1");
  }
}

TEST_CASE("balance: equal servers within 25% of their fair share over 3000 requests, a slow one gets less") {
  SUBCASE("equal") {
    fake_server a(always_ok()), b(always_ok()), d(always_ok());
    auto c = cl::jit_client::create(options_for({a.url(), b.url(), d.url()})).value();
    std::vector<std::future<result<cl::embed_result>>> fs;
    const auto rows = rows_of(1, 7);
    for (int wave = 0; wave < 30; ++wave) {
      for (int i = 0; i < 100; ++i) fs.push_back(c.embed(request("m", rows)));
      for (auto& f : fs) REQUIRE(f.get());
      fs.clear();
    }
    for (auto* s : {&a, &b, &d}) {
      CHECK(s->requests() >= 750);
      CHECK(s->requests() <= 1250);
    }
  }
  SUBCASE("slow") {
    fake_server a(always_ok()), b(always_ok());
    fake_server slow([](const seen_request&, const std::vector<std::string_view>&) { return action{.delay = 100ms}; });
    auto o = options_for({a.url(), b.url(), slow.url()});
    o.hedge.enabled = false;
    auto c = cl::jit_client::create(o).value();
    // A closed loop of 32 in flight: each completion sends the next request.
    const auto rows = rows_of(1, 8);
    constexpr int total = 960;
    std::mutex mu;
    std::condition_variable cv;
    int sent = 0, done = 0, failed = 0;
    std::function<void()> send_one = [&] {
      c.embed(request("m", rows), [&](result<cl::embed_result> r) {
        std::lock_guard lk(mu);
        ++done;
        failed += r ? 0 : 1;
        if (sent < total) {
          ++sent;
          send_one();
        }
        cv.notify_all();
      });
    };
    {
      std::lock_guard lk(mu);
      sent = 32;
    }
    for (int i = 0; i < 32; ++i) send_one();
    std::unique_lock lk(mu);
    REQUIRE(cv.wait_for(lk, 30s, [&] { return done == total; }));
    CHECK(failed == 0);
    const double fair = total / 3.0;
    CHECK(static_cast<double>(slow.requests()) < 0.5 * fair);
    MESSAGE("slow server got " << slow.requests() << " of " << total << " (fair share " << fair << ")");
  }
}

TEST_CASE("retries: 503 goes to another endpoint, connection refused is retried, other 4xx never") {
  SUBCASE("503 elsewhere") {
    fake_server busy([](const seen_request&, const std::vector<std::string_view>&) { return action{.status = 503}; });
    fake_server ok(always_ok());
    auto c = cl::jit_client::create(options_for({busy.url(), ok.url()})).value();
    for (int i = 0; i < 50; ++i) {
      auto r = c.embed(request("m", rows_of(2, i))).get();
      REQUIRE(r);
      CHECK(r->endpoint == ok.url());
    }
    CHECK(c.stats().retries > 0);
  }
  SUBCASE("refused") {
    std::uint16_t dead_port = 0;
    {
      fake_server gone(always_ok());
      dead_port = gone.port();
    }
    fake_server ok(always_ok());
    auto c = cl::jit_client::create(options_for({"http://127.0.0.1:" + std::to_string(dead_port), ok.url()})).value();
    for (int i = 0; i < 20; ++i) REQUIRE(c.embed(request("m", rows_of(1, i))).get());
  }
  SUBCASE("400 single row") {
    fake_server bad([](const seen_request&, const std::vector<std::string_view>&) { return action{.status = 400}; });
    auto c = cl::jit_client::create(options_for({bad.url()})).value();
    auto r = c.embed(request("m", rows_of(1, 1))).get();
    CHECK(r.code() == errc::invalid_argument);
    CHECK(bad.requests() == 1);
    CHECK(c.stats().retries == 0);
  }
}

TEST_CASE("a 4xx on a multi-row request is resent row by row, only rows that fail alone fail") {
  fake_server s([](const seen_request&, const std::vector<std::string_view>& rows) {
    for (auto r : rows)
      if (r.find("bad") != std::string_view::npos) return action{.status = 400, .body = "bad row"};
    return action{};
  });
  auto c = cl::jit_client::create(options_for({s.url()})).value();
  std::vector<std::string> rows = {"a", "b", "this is bad", "d"};
  auto r = c.embed(request("m", rows)).get();
  REQUIRE(r);
  REQUIRE(r->row_errors.size() == 4);
  CHECK(r->row_errors[2].code == errc::invalid_argument);
  CHECK(r->row_ok(0));
  CHECK(r->row_ok(3));
  CHECK(matches_fake(*r, rows));
  CHECK(c.stats().row_splits == 1);
  CHECK(s.requests() == 5);
}

TEST_CASE("the retry budget caps retries when every server fails") {
  fake_server a([](const seen_request&, const std::vector<std::string_view>&) { return action{.status = 503}; });
  fake_server b([](const seen_request&, const std::vector<std::string_view>&) { return action{.status = 503}; });
  auto o = options_for({a.url(), b.url()});
  o.retry.max_attempts = 5;
  o.retry.budget_min_per_s = 0;
  o.retry.backoff_base = 1ms;
  o.retry.backoff_max = 2ms;
  o.hedge.enabled = false;
  auto c = cl::jit_client::create(o).value();
  std::vector<std::future<result<cl::embed_result>>> fs;
  for (int i = 0; i < 200; ++i) fs.push_back(c.embed(request("m", rows_of(1, i))));
  for (auto& f : fs) CHECK(f.get().code() == errc::unavailable);
  const auto st = c.stats();
  // 10 banked + 0.2 per request; without the budget it would be 4 per request (800).
  CHECK(st.retries <= 10 + 200 * 0.2 + 1);
  CHECK(st.budget_exhausted > 0);
  CHECK(a.requests() + b.requests() == 200 + st.retries);
}

TEST_CASE("deadlines and hedging: a server that accepts and never answers") {
  SUBCASE("alone: timeout at the deadline") {
    fake_server hang([](const seen_request&, const std::vector<std::string_view>&) { return action{.hang = true}; });
    auto o = options_for({hang.url()});
    auto c = cl::jit_client::create(o).value();
    const auto rows = rows_of(1, 0);  // the request views these bytes until embed() returns
    auto req = request("m", rows);
    req.timeout = 200ms;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = c.embed(req).get();
    const auto took = std::chrono::steady_clock::now() - t0;
    CHECK(r.code() == errc::timeout);
    CHECK(took >= 190ms);
    CHECK(took < 2s);
  }
  SUBCASE("with a good one: hedges carry its requests") {
    fake_server good(always_ok());
    std::atomic<bool> hang_on{false};
    fake_server hang(
        [&](const seen_request&, const std::vector<std::string_view>&) { return action{.hang = hang_on.load()}; });
    auto o = options_for({good.url(), hang.url()});
    o.hedge.min_samples = 20;
    o.hedge.min_delay = 10ms;
    o.request_timeout = 3s;
    auto c = cl::jit_client::create(o).value();
    for (int i = 0; i < 40; ++i) REQUIRE(c.embed(request("m", rows_of(1, i))).get());  // latency history
    hang_on = true;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::future<result<cl::embed_result>>> fs;
    for (int i = 0; i < 40; ++i) fs.push_back(c.embed(request("m", rows_of(1, 100 + i))));
    for (auto& f : fs) {
      auto r = f.get();
      REQUIRE(r);
      CHECK(r->endpoint == good.url());
    }
    CHECK(std::chrono::steady_clock::now() - t0 < 2500ms);
    const auto st = c.stats();
    CHECK(st.hedges > 0);
    CHECK(st.hedge_wins > 0);
  }
}

TEST_CASE("a 404 ejects that endpoint for that model, re-admitted when ready again") {
  std::atomic<bool> serves{false};
  fake_server partial([&](const seen_request& s, const std::vector<std::string_view>&) {
    return s.model == "m" && !serves.load() ? action{.status = 404, .body = "unknown model"} : action{};
  });
  fake_server full(always_ok());
  auto o = options_for({partial.url(), full.url()});
  o.breaker.eject_for = 100ms;
  o.endpoints.refresh = 20ms;
  auto c = cl::jit_client::create(o).value();
  const auto loop0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) REQUIRE(c.embed(request("m", rows_of(1, i))).get());
  // Ejected after its first 404: one 404 per eject_for at most (the probe re-admits it, the next 404 ejects it
  // again; a loaded machine makes the loop longer than one eject_for), not half the 100 calls.
  const auto windows = (std::chrono::steady_clock::now() - loop0) / o.breaker.eject_for;
  CAPTURE(windows);
  CHECK(partial.requests() <= 3 + static_cast<std::size_t>(windows));
  // Another model is not affected.
  const auto before = partial.requests();
  for (int i = 0; i < 40; ++i) REQUIRE(c.embed(request("other", rows_of(1, i))).get());
  CHECK(partial.requests() > before);
  // Serving again: the readiness probe re-admits it for "m" after eject_for.
  serves = true;
  REQUIRE(eventually([&] {
    const auto n = partial.requests();
    for (int i = 0; i < 10; ++i) REQUIRE(c.embed(request("m", rows_of(1, i))).get());
    return partial.requests() > n;
  }));
  // Only 404s everywhere: not_found.
  fake_server none([](const seen_request&, const std::vector<std::string_view>&) { return action{.status = 404}; });
  auto c2 = cl::jit_client::create(options_for({none.url()})).value();
  CHECK(c2.embed(request("m", rows_of(1, 0))).get().code() == errc::not_found);
  // ... and the next call, with the model ejected everywhere, says not_found at once (it waited out the
  // 30 s deadline and said `timeout ... after 0 attempt(s)`, which reads as overload, not as a wrong name)
  const auto t0 = std::chrono::steady_clock::now();
  const auto again = c2.embed(request("m", rows_of(1, 1))).get();
  CHECK(again.code() == errc::not_found);
  CHECK(again.error().message.find("no endpoint serves model 'm'") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}

TEST_CASE("cancel completes at once with cancelled, close cancels what is in flight") {
  for (const int io_threads : {1, 3}) {  // the abandoned connection closes on its executor / its strand
    CAPTURE(io_threads);
    fake_server hang([](const seen_request&, const std::vector<std::string_view>&) { return action{.hang = true}; });
    auto o = options_for({hang.url()});
    o.io_threads = io_threads;
    auto c = cl::jit_client::create(std::move(o)).value();
    std::promise<result<cl::embed_result>> p;
    auto id = c.embed(request("m", rows_of(1, 0)), [&](result<cl::embed_result> r) { p.set_value(std::move(r)); });
    REQUIRE(eventually([&] { return hang.requests() == 1; }));
    CHECK(c.cancel(id));
    CHECK(p.get_future().get().code() == errc::cancelled);
    CHECK_FALSE(c.cancel(id));
    auto f = c.embed(request("m", rows_of(1, 1)));
    c.close();
    CHECK(f.get().code() == errc::cancelled);
    CHECK(c.embed(request("m", rows_of(1, 2))).get().code() == errc::cancelled);
  }
}

TEST_CASE("callbacks run on the client's I/O threads, never in embed() or cancel(), close() runs what it cancels") {
  fake_server hang([](const seen_request&, const std::vector<std::string_view>&) { return action{.hang = true}; });
  auto c = cl::jit_client::create(options_for({hang.url()})).value();
  const auto me = std::this_thread::get_id();
  struct seen {
    std::thread::id thread;
    errc code;
  };
  std::promise<seen> refused, cancelled;
  cl::embed_request none;  // no rows: refused at once
  none.model = "m";
  c.embed(none, [&](result<cl::embed_result> r) { refused.set_value({std::this_thread::get_id(), r.code()}); });
  const auto id = c.embed(request("m", rows_of(1, 0)), [&](result<cl::embed_result> r) {
    cancelled.set_value({std::this_thread::get_id(), r.code()});
  });
  REQUIRE(eventually([&] { return hang.requests() == 1; }));
  CHECK(c.cancel(id));
  const seen a = refused.get_future().get(), b = cancelled.get_future().get();
  CHECK(a.code == errc::invalid_argument);
  CHECK(a.thread != me);
  CHECK(b.code == errc::cancelled);
  CHECK(b.thread != me);

  std::atomic<bool> done{false};
  std::thread::id who;
  c.embed(request("m", rows_of(1, 1)), [&](result<cl::embed_result> r) {
    who = std::this_thread::get_id();
    done = r.code() == errc::cancelled;
  });
  REQUIRE(eventually([&] { return hang.requests() == 2; }));
  c.close();
  CHECK(done.load());  // before close() returned, on the closing thread
  CHECK(who == me);
  // After close() there is no executor: embed() completes on this thread, once its lock is released, so the
  // callback may call embed() again.
  errc inner = errc::ok;
  c.embed(request("m", rows_of(1, 2)), [&](result<cl::embed_result>) {
    c.embed(request("m", rows_of(1, 3)), [&](result<cl::embed_result> r) { inner = r.code(); });
  });
  CHECK(inner == errc::cancelled);
}

TEST_CASE("local mode: its one endpoint is 'local', a model's error is final, callbacks on an I/O thread") {
  auto model = jitembed::models::text_embed::create({}).value();
  cl::client_options o;
  o.local_models = {model};
  o.local_threads = 1;
  auto c = cl::jit_client::create(o).value();
  CHECK(c.local());
  CHECK(c.endpoints() == std::vector<std::string>{"local"});
  const auto me = std::this_thread::get_id();
  std::promise<std::pair<std::thread::id, bool>> ran;
  c.embed(request(std::string(model.name()), rows_of(2, 0)), [&](result<cl::embed_result> r) {
    ran.set_value({std::this_thread::get_id(), r.has_value()});
  });
  const auto [thread, ok] = ran.get_future().get();
  CHECK(ok);
  CHECK(thread != me);
  // an unknown model: not_found, once, not retried, not held against the endpoint
  CHECK(c.embed(request("nope", rows_of(1, 0))).get().code() == errc::not_found);
  const auto st = c.stats();
  CHECK(st.retries == 0);
  CHECK(st.completed == 1);
  CHECK(st.failed == 1);
  REQUIRE(st.endpoints.size() == 1);
  CHECK(st.endpoints[0].url == "local");
  CHECK_FALSE(st.endpoints[0].circuit_open);
}

TEST_CASE("coalescing: concurrent requests with the same key go out once") {
  fake_server slow([](const seen_request&, const std::vector<std::string_view>&) { return action{.delay = 100ms}; });
  auto c = cl::jit_client::create(options_for({slow.url()})).value();
  const auto rows = rows_of(2, 3);
  std::vector<std::future<result<cl::embed_result>>> fs;
  for (int i = 0; i < 5; ++i) {
    auto r = request("m", rows);
    r.coalesce_key = hash128{42, 7};
    fs.push_back(c.embed(r));
  }
  for (auto& f : fs) {
    auto r = f.get();
    REQUIRE(r);
    CHECK(matches_fake(*r, rows));
  }
  CHECK(slow.requests() == 1);
  CHECK(c.stats().coalesced == 4);
}

TEST_CASE("endpoints changed mid-run: file and URL, a removed endpoint drains") {
  fake_server a(always_ok());
  fake_server b([](const seen_request&, const std::vector<std::string_view>&) { return action{.delay = 50ms}; });
  fake_server d(always_ok());
  SUBCASE("file") {
    const auto path = temp_path("endpoints.txt");
    write_file(path, "# one server\n" + a.url() + "\n");
    auto o = options_for({});
    o.endpoints.list.clear();
    o.endpoints.file = path;
    o.endpoints.refresh = 10ms;
    auto c = cl::jit_client::create(o).value();
    REQUIRE(c.embed(request("m", rows_of(1, 0))).get());
    CHECK(c.endpoints() == std::vector<std::string>{a.url()});
    // Requests in flight on b when it is removed still finish (drain).
    write_file(path, a.url() + "\n" + b.url() + "\n");
    REQUIRE(eventually([&] { return c.endpoints().size() == 2; }));
    std::vector<std::future<result<cl::embed_result>>> fs;
    for (int i = 0; i < 20; ++i) fs.push_back(c.embed(request("m", rows_of(1, i))));
    write_file(path, d.url() + "\n");
    REQUIRE(eventually([&] { return c.endpoints() == std::vector<std::string>{d.url()}; }));
    for (auto& f : fs) REQUIRE(f.get());
    const auto before_a = a.requests(), before_b = b.requests();
    for (int i = 0; i < 20; ++i) REQUIRE(c.embed(request("m", rows_of(1, 50 + i))).get());
    CHECK(a.requests() == before_a);
    CHECK(b.requests() == before_b);
    CHECK(d.requests() >= 20);
    CHECK(c.stats().retries == 0);
    std::filesystem::remove(path);
  }
  SUBCASE("url") {
    std::mutex mu;
    std::string list = a.url() + "\n";
    auto lister_made = http::server::create(http::server_options{}, [&](http::request&&, http::responder respond) {
      http::response r;
      std::lock_guard lk(mu);
      r.body = list;
      respond(std::move(r));
    });
    REQUIRE(lister_made);
    auto& lister = *lister_made;
    const std::uint16_t port = lister.port();
    auto o = options_for({});
    o.endpoints.list.clear();
    o.endpoints.url = "http://127.0.0.1:" + std::to_string(port) + "/endpoints";
    o.endpoints.refresh = 10ms;
    auto c = cl::jit_client::create(o).value();
    CHECK(c.endpoints() == std::vector<std::string>{a.url()});
    {
      std::lock_guard lk(mu);
      list = "# scaled\n" + d.url() + "\n";
    }
    REQUIRE(eventually([&] { return c.endpoints() == std::vector<std::string>{d.url()}; }));
    REQUIRE(c.embed(request("m", rows_of(1, 0))).get()->endpoint == d.url());
    lister.stop(100ms);
  }
  SUBCASE("url answering 5xx at create: asked 3 times; 4xx: once") {
    std::atomic<int> asked{0};
    std::atomic<int> failures{2};  // answers 500 this many times, then the list
    std::atomic<int> status{500};
    auto lister_made = http::server::create(http::server_options{}, [&](http::request&&, http::responder respond) {
      http::response r;
      ++asked;
      if (failures.fetch_sub(1) > 0) {
        r.status = status.load();
        r.body = "busy";
      } else {
        r.body = a.url() + "\n";
      }
      respond(std::move(r));
    });
    REQUIRE(lister_made);
    auto o = options_for({});
    o.endpoints.list.clear();
    o.endpoints.url = "http://127.0.0.1:" + std::to_string(lister_made->port()) + "/endpoints";
    o.endpoints.refresh = 1h;
    {
      auto c = cl::jit_client::create(o);
      REQUIRE(c);
      CHECK(asked == 3);
      CHECK(c->endpoints() == std::vector<std::string>{a.url()});
    }
    asked = 0, failures = 3;  // more 500s than create() asks for: it fails with the last answer
    auto c3 = cl::jit_client::create(o);
    REQUIRE_FALSE(c3);
    CHECK(asked == 3);
    CHECK(c3.error().message.find("endpoints URL") != std::string::npos);
    asked = 0, failures = 1, status = 404;  // not there: no second ask
    auto c4 = cl::jit_client::create(o);
    REQUIRE_FALSE(c4);
    CHECK(asked == 1);
    CHECK(c4.error().code == errc::not_found);
    lister_made->stop(100ms);
  }
}

TEST_CASE("local mode equals remote mode on the real service (text-embed), rows in order") {
  models::text_embed_options to;
  auto model = models::text_embed::create(to).value();
  server::server_config sc;
  sc.preprocess_threads = 2;
  server::model_config mc;
  mc.name = "text-embed";
  sc.models = {mc};
  auto svc = server::service::create(sc).value();
  auto srv_made = http::server::create(http::server_options{}, svc.as_handler());
  REQUIRE(srv_made);
  auto& srv = *srv_made;
  const std::uint16_t port = srv.port();

  cl::client_options lo;
  lo.local_models = {model};
  lo.local_threads = 2;
  auto local = cl::jit_client::create(lo).value();
  auto remote = cl::jit_client::create(options_for({"http://127.0.0.1:" + std::to_string(port)})).value();
  CHECK(local.local());

  const std::vector<std::string> captions = {"a cat on a mat", "two dogs", "",
                                             "a long caption about a video of the sea"};
  cl::embed_request req;
  req.model = "text-embed";
  req.input = "text";
  for (const auto& s : captions) req.rows.push_back(as_bytes_view(s));
  auto l = local.embed(req).get();
  auto r = remote.embed(req).get();
  REQUIRE(l);
  REQUIRE(r);
  REQUIRE(l->outputs.size() == r->outputs.size());
  for (std::size_t k = 0; k < l->outputs.size(); ++k) {
    CHECK(l->outputs[k].first == r->outputs[k].first);
    REQUIRE(l->outputs[k].second.nbytes() == r->outputs[k].second.nbytes());
    CHECK(std::memcmp(l->outputs[k].second.data(), r->outputs[k].second.data(), l->outputs[k].second.nbytes()) == 0);
  }
  // Invalid UTF-8 in one row: only that row fails, in both modes.
  const std::string bad = "\xff\xfe";
  req.rows[1] = as_bytes_view(bad);
  auto l2 = local.embed(req).get();
  auto r2 = remote.embed(req).get();
  REQUIRE(l2);
  REQUIRE(r2);
  CHECK(l2->row_errors.at(1).code == errc::invalid_utf8);
  CHECK(r2->row_errors.at(1).code == errc::invalid_utf8);
  CHECK(l2->row_ok(0));
  CHECK(r2->row_ok(0));
  // Unknown model.
  req.model = "nope";
  CHECK(local.embed(req).get().code() == errc::not_found);
  CHECK(remote.embed(req).get().code() == errc::not_found);
  // The cache-key identity: the local model's own, and the server's metadata.
  CHECK(local.identity("text-embed").value().fingerprint == std::string(model.version()));
  auto rid = remote.identity("text-embed");
  if (rid) CHECK(rid->fingerprint == std::string(model.version()));
  srv.stop(1s);
}
