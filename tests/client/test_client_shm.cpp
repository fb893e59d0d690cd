// The JIT client's shared memory for same-host endpoints (client_options.shared_memory): a region registered
// by itself, the rows and outputs through it (equal to the socket's, bitwise), nothing left in /dev/shm, the
// region unregistered at close, a server that lost the region (the socket, then a new region), and the span
// allocator's quarantine.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "batching/eventually.hpp"
#include "client_test_util.hpp"
#include "jitembed/client/detail/client_shm.hpp"
#include "jitembed/net/http/client.hpp"

using namespace client_test;
namespace cl = jitembed::client;

namespace {

struct shm_service {
  server::service svc;
  http::server srv;
  static server::service make() {
    server::server_config sc;
    sc.preprocess_threads = 2;
    server::model_config mc;
    mc.name = "text-embed";
    mc.params = {{"text_dim", 64}, {"text_max_length", 16}};
    sc.models = {mc};
    return server::service::create(sc).value();
  }
  shm_service() : svc(make()), srv(http::server::create(http::server_options{}, svc.as_handler()).value()) {}
  std::string url() const { return "http://127.0.0.1:" + std::to_string(srv.port()); }

  // GET/POST on the service's shared-memory routes: the JSON answer.
  nlohmann::json call(const std::string& method, const std::string& target) const {
    http::client hc("127.0.0.1", srv.port());
    auto r = method == "GET" ? hc.get(target) : hc.post(target, "{}");
    REQUIRE(r);
    REQUIRE_MESSAGE(r->status == 200, r->body);
    return r->body.empty() ? nlohmann::json() : nlohmann::json::parse(r->body);
  }
  std::size_t regions() const { return call("GET", "/v2/systemsharedmemory/status").size(); }
};

cl::embed_request shm_request(const std::vector<std::string>& rows) {
  cl::embed_request r;
  r.model = "text-embed";
  r.input = "text";
  for (const auto& s : rows) r.rows.push_back(as_bytes_view(s));
  return r;
}

bool same(const cl::embed_result& a, const cl::embed_result& b) {
  if (a.outputs.size() != b.outputs.size()) return false;
  for (std::size_t k = 0; k < a.outputs.size(); ++k) {
    const auto& x = a.outputs[k].second;
    const auto& y = b.outputs[k].second;
    if (a.outputs[k].first != b.outputs[k].first || x.nbytes() != y.nbytes() || !(x.shape() == y.shape())) return false;
    if (std::memcmp(x.data(), y.data(), x.nbytes()) != 0) return false;
  }
  return true;
}

// Waits until the client reports its endpoint's region registered (the watcher does it off the request path).
bool wait_registered(cl::jit_client& c) {
  return jitembed::test::eventually([&] {
    const auto st = c.stats();
    return !st.endpoints.empty() && st.endpoints[0].shared_memory;
  });
}

// This process's shared-memory objects left in /dev/shm.
std::size_t own_objects() {
  std::size_t n = 0;
  const std::string prefix = "jitembed-" + std::to_string(::getpid()) + "-";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec))
    if (e.path().filename().string().starts_with(prefix)) ++n;
  return n;
}

std::vector<std::string> rows_of(int seed, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("shm row " + std::to_string(seed) + " " + std::to_string(i));
  return out;
}

}  // namespace

TEST_CASE("shared memory: a same-host endpoint's rows and outputs go through a region, bitwise the socket's") {
  shm_service s;
  cl::client_options so;
  so.endpoints.list = {s.url()};
  so.request_timeout = 5s;
  so.hedge.enabled = false;
  so.shared_memory.min_bytes = 0;  // these requests are small
  cl::client_options plain = so;
  plain.shared_memory.enabled = false;
  {
    auto c = cl::jit_client::create(so).value();
    auto p = cl::jit_client::create(plain).value();
    REQUIRE(wait_registered(c));
    CHECK(s.regions() == 1);
    CHECK(own_objects() == 0);  // unlinked once registered: nothing left behind if the client dies
    // The first answer of a model teaches its output sizes (over the socket); then shared memory.
    for (int i = 0; i < 12; ++i) {
      const auto rows = rows_of(i, 1 + i % 5);
      auto a = c.embed(shm_request(rows)).get();
      auto b = p.embed(shm_request(rows)).get();
      REQUIRE_MESSAGE(a, (a ? std::string() : a.error().message));
      REQUIRE(b);
      CHECK(same(*a, *b));
      CHECK(a->find("pooled")->shape()[0] == static_cast<std::int64_t>(rows.size()));
    }
    const auto st = c.stats();
    CHECK(st.shared_memory_attempts == 11);
    CHECK(st.shared_memory_fallbacks == 0);
    CHECK(st.failed == 0);
    CHECK(p.stats().shared_memory_attempts == 0);
    CHECK_FALSE(p.stats().endpoints[0].shared_memory);
    // Requests in flight together get spans of their own.
    std::vector<std::future<result<cl::embed_result>>> fs;
    for (int i = 0; i < 32; ++i) fs.push_back(c.embed(shm_request(rows_of(100 + i, 3))));
    for (int i = 0; i < 32; ++i) {
      auto a = fs[i].get();
      auto b = p.embed(shm_request(rows_of(100 + i, 3))).get();
      REQUIRE(a);
      CHECK(same(*a, *b));
    }
    CHECK(c.stats().shared_memory_attempts == 43);
  }
  CHECK(s.regions() == 0);  // unregistered at close
  CHECK(own_objects() == 0);
}

TEST_CASE("shared memory: a server that lost the region answers over the socket, a new region follows") {
  shm_service s;
  cl::client_options so;
  so.endpoints.list = {s.url()};
  so.request_timeout = 5s;
  so.hedge.enabled = false;
  so.shared_memory.min_bytes = 0;
  auto c = cl::jit_client::create(so).value();
  REQUIRE(wait_registered(c));
  REQUIRE(c.embed(shm_request(rows_of(1, 2))).get());  // learns the outputs
  REQUIRE(c.embed(shm_request(rows_of(2, 2))).get());
  CHECK(c.stats().shared_memory_attempts == 1);
  s.call("POST", "/v2/systemsharedmemory/unregister");  // as a restarted server would: no region
  CHECK(s.regions() == 0);
  auto r = c.embed(shm_request(rows_of(3, 2))).get();
  REQUIRE_MESSAGE(r, (r ? std::string() : r.error().message));
  auto st = c.stats();
  CHECK(st.shared_memory_fallbacks == 1);
  CHECK(st.retries == 0);  // not a retry: the same attempt over the socket
  REQUIRE(wait_registered(c));
  CHECK(s.regions() == 1);
  REQUIRE(c.embed(shm_request(rows_of(4, 2))).get());
  CHECK(c.stats().shared_memory_attempts == 3);
  CHECK(c.stats().failed == 0);
}

TEST_CASE("shared memory: a request under min_bytes, and an endpoint that refuses the region, use the socket") {
  shm_service s;
  cl::client_options so;
  so.endpoints.list = {s.url()};
  so.request_timeout = 5s;
  so.shared_memory.min_bytes = std::size_t{1} << 30;
  auto c = cl::jit_client::create(so).value();
  REQUIRE(wait_registered(c));
  for (int i = 0; i < 3; ++i) REQUIRE(c.embed(shm_request(rows_of(i, 2))).get());
  CHECK(c.stats().shared_memory_attempts == 0);
  // A fake server without the extension: registration refused, the socket only, nothing left registered.
  fake_server fs(always_ok());
  cl::client_options fo;
  fo.endpoints.list = {fs.url()};
  auto f = cl::jit_client::create(fo).value();
  cl::embed_request req;
  req.model = "m";
  const std::string row = "x";
  req.rows = {as_bytes_view(row)};
  REQUIRE(f.embed(req).get());
  // The watcher's registration reaches the fake (one request more than the infers), which refuses it.
  CHECK(jitembed::test::eventually([&] { return fs.server_stats().requests >= 2; }));
  for (int i = 0; i < 4; ++i) REQUIRE(f.embed(req).get());
  CHECK_FALSE(f.stats().endpoints[0].shared_memory);
  CHECK(f.stats().shared_memory_attempts == 0);
  // The watcher unlinks the refused region after reading the refusal, which the fake counted before it answered:
  // nothing is left, eventually (a bare check failed 2 in ~10 runs on a loaded machine).
  CHECK(jitembed::test::eventually([] { return own_objects() == 0; }));
}

TEST_CASE("shared memory spans: first fit, merged on release, quarantined spans reused only after their time") {
  using jitembed::client::detail::shm_spans;
  const auto t0 = std::chrono::steady_clock::now();
  shm_spans s(1024);
  const auto a = s.allocate(100, t0);  // rounded to 128
  const auto b = s.allocate(256, t0);
  const auto c = s.allocate(512, t0);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  CHECK(*a == 0);
  CHECK(*b == 128);
  CHECK(*c == 384);
  CHECK_FALSE(s.allocate(256, t0));  // 128 left
  s.release(*a, 100);
  s.quarantine(*b, 256, t0 + 1s);
  CHECK_FALSE(s.allocate(256, t0));  // a's 128 + the tail's 128 are not adjacent; b is held
  CHECK(s.quarantined() == 1);
  const auto d = s.allocate(256, t0 + 2s);  // b's quarantine ended: a + b merged
  REQUIRE(d);
  CHECK(*d == 0);
  CHECK(s.quarantined() == 0);
  s.release(*d, 256);
  s.release(*c, 512);
  const auto all = s.allocate(1024, t0 + 2s);  // everything merged back
  REQUIRE(all);
  CHECK(*all == 0);
  CHECK(s.in_use() == 1024);
}
