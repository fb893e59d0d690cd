// tcp_store: round trips, server-side waits, timeouts, concurrent clients (threads and processes), Gloo
// rendezvous over it, hostile peers and a dying server.
#if defined(JITEMBED_HAS_TCP_STORE)
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "jitembed/parallel/gloo.hpp"
#include "jitembed/parallel/tcp_store.hpp"
#include "support.hpp"

using namespace jitembed;
using namespace jitembed::parallel;
using namespace std::chrono_literals;
using jitembed::parallel::testing::as_string;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::span<const std::byte>(reinterpret_cast<const std::byte*>(s.data()), s.size());
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Rank 0's side in these tests: a server and a store connected to it.
struct hosted_store {
  tcp_store_server server;
  tcp_store store;
  tcp_store* operator->() noexcept { return &store; }
};

result<hosted_store> listen_store(tcp_store_options opts = {}, std::uint16_t port = 0) {
  auto srv = tcp_store_server::create({.host = "127.0.0.1", .port = port, .limits = opts});
  if (!srv) return srv.error();
  auto st = tcp_store::open(srv->address(), opts);
  if (!st) return st.error();
  return hosted_store{std::move(*srv), std::move(*st)};
}

std::string loopback(std::uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

// A port nobody listens on (bound, then released).
std::uint16_t free_port() {
  asio::io_context ioc;
  tcp::acceptor a(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

std::string frame(std::uint8_t op, const std::string& key, std::uint64_t value_len, const std::string& value = {}) {
  std::string f(1, static_cast<char>(op));
  for (int i = 0; i < 4; ++i) f += static_cast<char>(static_cast<std::uint32_t>(key.size()) >> (8 * i));
  f += key;
  for (int i = 0; i < 8; ++i) f += static_cast<char>(value_len >> (8 * i));
  return f + value;
}

// Whether the peer closes `s` within `limit` (anything it sends first is read and ignored).
bool closed_within(tcp::socket& s, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{s.native_handle(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[256];
    const auto n = ::recv(s.native_handle(), buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
}

}  // namespace

TEST_CASE("tcp_store: set/get/check round trips, empty and 1 MiB values, two clients") {
  auto server = listen_store().value();
  CHECK(server->port() != 0);
  auto client = tcp_store::open(loopback(server->port())).value();

  server->set("a/b", std::string_view("hello")).value();
  CHECK(as_string(client.get("a/b", 100ms).value()) == "hello");
  CHECK(client.check("a/b").value());
  CHECK_FALSE(client.check("missing").value());
  CHECK_FALSE(server->check("").value());

  client.set("", std::string_view("")).value();  // empty key and empty value
  CHECK(server->check("").value());
  CHECK(server->get("", 100ms).value().empty());

  std::vector<std::byte> big(std::size_t{1} << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  client.set("big", big).value();
  CHECK(server->get("big", 100ms).value() == big);
  CHECK(client.get("big", 100ms).value() == big);

  server->set("a/b", std::string_view("overwritten")).value();
  CHECK(as_string(client.get("a/b", 100ms).value()) == "overwritten");

  // Keys are bytes: embedded NULs and the maximum length go through.
  const std::string nul_key("x\0y", 3);
  client.set(nul_key, std::string_view("z")).value();
  CHECK_FALSE(client.check("x").value());
  CHECK(as_string(server->get(nul_key, 100ms).value()) == "z");
  const std::string max_key(4096, 'k');
  client.set(max_key, std::string_view("m")).value();
  CHECK(as_string(server->get(max_key, 100ms).value()) == "m");
}

TEST_CASE("tcp_store: open parses host:port, the server and the store are movable values") {
  auto server = tcp_store_server::create().value();
  CHECK(server.port() != 0);
  CHECK(server.address() == "127.0.0.1:" + std::to_string(server.port()));
  tcp_store_server moved = std::move(server);
  auto a = tcp_store::open(moved.address()).value();
  tcp_store b = std::move(a);
  b.set("k", std::string_view("v")).value();
  CHECK(b.port() == moved.port());
  CHECK(b.host() == "127.0.0.1");
  CHECK(as_string(tcp_store::open("localhost:" + std::to_string(moved.port())).value().get("k", 100ms).value()) == "v");
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", ":80", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:8x", "::1:80", "[]:80"}) {
    CAPTURE(bad);
    auto r = tcp_store::open(bad);
    CHECK(r.code() == errc::invalid_argument);
    CHECK(r.error().message == "tcp_store: address '" + std::string(bad) + "' is not host:port");
  }
  moved.stop();
  moved.stop();  // idempotent
  CHECK(b.check("k").code() == errc::io_error);
}

TEST_CASE("tcp_store: get waits on the server until another client sets the key") {
  auto server = listen_store().value();
  auto waiter = tcp_store::open(loopback(server->port())).value();
  auto setter = tcp_store::open(loopback(server->port())).value();
  const auto t0 = std::chrono::steady_clock::now();
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    setter.set("late", std::string_view("x")).value();
  });
  auto v = waiter.get("late", 5s);
  later.join();
  REQUIRE(v);
  CHECK(as_string(*v) == "x");
  const double ms = ms_since(t0);
  CHECK(ms >= 90);
  CHECK(ms < 2000);

  // Several waiters on one key wake together.
  std::vector<tcp_store> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(tcp_store::open(loopback(server->port())).value());
  std::atomic<int> woken{0};
  std::vector<std::thread> ts;
  for (auto& c : clients)
    ts.emplace_back([&, cp = &c] {
      if (auto r = cp->get("go", 5s); r && as_string(*r) == "now") woken.fetch_add(1);
    });
  std::this_thread::sleep_for(50ms);
  server->set("go", std::string_view("now")).value();
  for (auto& t : ts) t.join();
  CHECK(woken.load() == 4);
}

TEST_CASE("tcp_store: a missing key times out within bounds and the connection stays usable") {
  auto server = listen_store().value();
  auto client = tcp_store::open(loopback(server->port())).value();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = client.get("missing", 200ms);
  const double ms = ms_since(t0);
  CHECK(r.code() == errc::timeout);
  CHECK(r.error().message.find("'missing' not set within 200 ms") != std::string::npos);
  CHECK(ms >= 190);
  CHECK(ms < 1500);
  CHECK(client.get("missing", 0ms).code() == errc::timeout);
  client.set("k", std::string_view("v")).value();
  CHECK(as_string(client.get("k", 0ms).value()) == "v");
}

TEST_CASE("tcp_store: client-side limits are checked before anything is sent") {
  tcp_store_options opts;
  opts.max_value_bytes = 1024;
  auto server = listen_store(opts).value();
  auto r = server->set(std::string(4097, 'k'), std::string_view("v"));
  CHECK(r.code() == errc::limit_exceeded);
  CHECK(r.error().message == "tcp_store: set: key of 4097 bytes > max_key_bytes 4096");
  CHECK(server->get(std::string(5000, 'k'), 10ms).code() == errc::limit_exceeded);
  r = server->set("v", std::string(1025, 'x'));
  CHECK(r.code() == errc::limit_exceeded);
  CHECK(r.error().message == "tcp_store: set('v'): value of 1025 bytes > max_value_bytes 1024");
  server->set("v", std::string(1024, 'x')).value();  // still connected
  CHECK(server->get("v", 10ms).value().size() == 1024);
}

TEST_CASE("tcp_store: many client threads, and threads sharing one client") {
  auto server = listen_store().value();
  constexpr int kThreads = 8, kKeys = 40;
  std::vector<std::thread> ts;
  std::atomic<int> good{0};
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      auto c = tcp_store::open(loopback(server->port())).value();
      for (int k = 0; k < kKeys; ++k) c.set("t" + std::to_string(t) + "/" + std::to_string(k), std::to_string(t * 1000 + k)).value();
      const int peer = (t + 1) % kThreads;  // waits for a neighbour that may still be writing
      int ok = 0;
      for (int k = 0; k < kKeys; ++k) {
        auto v = c.get("t" + std::to_string(peer) + "/" + std::to_string(k), 5s);
        ok += v && as_string(*v) == std::to_string(peer * 1000 + k);
      }
      if (ok == kKeys) good.fetch_add(1);
    });
  }
  for (auto& t : ts) t.join();
  CHECK(good.load() == kThreads);

  // One connection, many threads: the mutex keeps request/reply pairs together.
  shared_store shared(tcp_store::open(loopback(server->port())).value());
  ts.clear();
  good = 0;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      int ok = 0;
      for (int k = 0; k < kKeys; ++k) {
        const std::string key = "s" + std::to_string(t) + "/" + std::to_string(k);
        shared.set(key, key + "!").value();
        auto v = shared.get(key, 1s);
        ok += v && as_string(*v) == key + "!";
      }
      if (ok == kKeys) good.fetch_add(1);
    });
  }
  for (auto& t : ts) t.join();
  CHECK(good.load() == 4);
}

TEST_CASE("tcp_store: clients as forked processes") {
  auto server = listen_store().value();
  const std::uint16_t port = server->port();
  constexpr int kProcs = 3;
  const auto statuses = jitembed::parallel::testing::fork_ranks(kProcs, [&](int r) {
    auto c = tcp_store::open(loopback(port)).value();
    c.set("proc/" + std::to_string(r), std::to_string(r * 7)).value();
    int code = 0;
    for (int p = 0; p < kProcs; ++p) {
      auto v = c.get("proc/" + std::to_string(p), 5s);
      if (!v || as_string(*v) != std::to_string(p * 7)) code = 2;
    }
    return code;
  });
  for (int status : statuses) {
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  for (int p = 0; p < kProcs; ++p) CHECK(server->check("proc/" + std::to_string(p)).value());
}

#if defined(JITEMBED_HAS_GLOO)
TEST_CASE("tcp_store: a 3-rank Gloo communicator rendezvouses over it") {
  auto server = listen_store().value();
  const std::string address = server.server.address();
  shared_store rank0(std::move(server.store));  // rank 0 shares the hosting process
  constexpr int kRanks = 3;
  std::vector<std::thread> ts;
  std::vector<std::int64_t> sums(kRanks, -1);
  std::vector<int> codes(kRanks, -1);
  for (int r = 0; r < kRanks; ++r) {
    ts.emplace_back([&, r] {
      shared_store st = r == 0 ? rank0 : shared_store(tcp_store::open(address).value());
      gloo_options opt;
      opt.timeout = 10s;
      auto comm = gloo_communicator::create(st, r, kRanks, opt);
      if (!comm) {
        codes[static_cast<std::size_t>(r)] = static_cast<int>(comm.code());
        return;
      }
      std::int64_t v = r + 1;
      auto ok = comm->all_reduce(tensor_view(&v, dtype::i64, shape{1}), reduce_op::sum);
      codes[static_cast<std::size_t>(r)] = static_cast<int>(ok.code());
      sums[static_cast<std::size_t>(r)] = v;
    });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < kRanks; ++r) {
    CAPTURE(r);
    CHECK(codes[static_cast<std::size_t>(r)] == 0);
    CHECK(sums[static_cast<std::size_t>(r)] == 6);
  }
}
#endif

TEST_CASE("tcp_store: malformed and over-limit requests drop only that connection") {
  tcp_store_options opts;
  opts.io_timeout = 300ms;  // the stalled request below is dropped after this
  auto server = listen_store(opts).value();
  auto before = tcp_store::open(loopback(server->port())).value();
  before.set("k0", std::string_view("v0")).value();

  asio::io_context ioc;
  const tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), server->port());
  auto send_raw = [&](const std::string& bytes) {
    auto s = std::make_unique<tcp::socket>(ioc);
    s->connect(ep);
    asio::write(*s, asio::buffer(bytes));
    return s;
  };
  std::string garbage = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  SUBCASE("garbage bytes") { CHECK(closed_within(*send_raw(garbage), 2s)); }
  SUBCASE("unknown op") { CHECK(closed_within(*send_raw(frame(0xFF, "k", 0)), 2s)); }
  SUBCASE("key length over max_key_bytes") {
    std::string f(1, '\x01');
    f += std::string("\xff\xff\xff\xff", 4);  // 4 GiB key
    CHECK(closed_within(*send_raw(f), 2s));
  }
  SUBCASE("value length over max_value_bytes") {
    CHECK(closed_within(*send_raw(frame(1, "big", std::uint64_t{1} << 40)), 2s));
    CHECK(closed_within(*send_raw(frame(1, "big", (std::uint64_t{64} << 20) + 1)), 2s));
  }
  SUBCASE("get with a value length other than 8, check with a value") {
    CHECK(closed_within(*send_raw(frame(2, "k0", 9, std::string(9, '\0'))), 2s));
    CHECK(closed_within(*send_raw(frame(3, "k0", 1, "x")), 2s));
  }
  SUBCASE("a request that stalls midway") {
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(closed_within(*send_raw(frame(1, "slow", 100, "only part")), 3s));
    CHECK(ms_since(t0) >= 250);
  }
  SUBCASE("bytes sent while a get is parked") {
    auto s = send_raw(frame(2, "never", 8, std::string("\x10\x27\0\0\0\0\0\0", 8)));  // waits 10 s
    std::this_thread::sleep_for(50ms);
    asio::write(*s, asio::buffer(std::string("x")));
    CHECK(closed_within(*s, 2s));
  }
  SUBCASE("a well-formed raw request is answered") {
    auto s = send_raw(frame(3, "k0", 0));
    char reply[10];
    asio::read(*s, asio::buffer(reply, sizeof reply));
    CHECK(std::string(reply, 10) == std::string("\0\x01\0\0\0\0\0\0\0\x01", 10));
  }
  // The server still serves a client connected before and one connected after; nothing half-read was stored.
  CHECK(as_string(before.get("k0", 100ms).value()) == "v0");
  auto after = tcp_store::open(loopback(server->port())).value();
  CHECK_FALSE(after.check("big").value());
  CHECK_FALSE(after.check("slow").value());
  after.set("k1", std::string_view("v1")).value();
  CHECK(as_string(before.get("k1", 100ms).value()) == "v1");
}

TEST_CASE("tcp_store: a malformed reply fails the client with a specific error") {
  asio::io_context ioc;
  tcp::acceptor acc(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const auto port = acc.local_endpoint().port();
  std::string reply;
  errc expected = errc::ok;
  std::string expected_text;
  SUBCASE("unknown status") {
    reply = std::string("\x09\0\0\0\0\0\0\0\0", 9);
    expected = errc::corrupt_data;
    expected_text = "has unknown status 9";
  }
  SUBCASE("value length over max_value_bytes") {
    reply = std::string("\0\0\0\0\0\0\0\x01\0", 9);  // status 0, 2^48 bytes
    expected = errc::limit_exceeded;
    expected_text = "value of 281474976710656 bytes > max_value_bytes 67108864";
  }
  SUBCASE("check answered with two bytes") {
    reply = std::string("\0\x02\0\0\0\0\0\0\0\x01\x01", 11);
    expected = errc::corrupt_data;
    expected_text = "malformed reply to check('k')";
  }
  SUBCASE("connection closed instead of a reply") {
    expected = errc::io_error;
    expected_text = "closed the connection before replying to check('k')";
  }
  std::thread fake([&] {
    tcp::socket s(ioc);
    acc.accept(s);
    std::string req(frame(3, "k", 0).size(), '\0');
    asio::read(s, asio::buffer(req));
    if (!reply.empty()) asio::write(s, asio::buffer(reply));
    s.shutdown(tcp::socket::shutdown_send);
    char c;
    boost::system::error_code ec;
    s.read_some(asio::buffer(&c, 1), ec);  // until the client closes
  });
  std::optional<tcp_store> client(tcp_store::open(loopback(port)).value());
  auto r = client->check("k");
  CAPTURE(r.error().message);
  CHECK(r.code() == expected);
  CHECK(r.error().message.find(expected_text) != std::string::npos);
  auto again = client->check("k");  // the connection is gone for good
  CHECK(again.code() == errc::io_error);
  CHECK(again.error().message.find("failed earlier") != std::string::npos);
  client.reset();
  fake.join();
}

TEST_CASE("tcp_store: connect retries until the server comes up, or times out") {
  SUBCASE("nobody listens") {
    tcp_store_options opts;
    opts.connect_timeout = 200ms;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = tcp_store::open(loopback(free_port()), opts);
    const double ms = ms_since(t0);
    CHECK(r.code() == errc::timeout);
    CHECK(r.error().message.find("cannot connect to 127.0.0.1:") != std::string::npos);
    CHECK(ms >= 190);
    CHECK(ms < 1500);
  }
  SUBCASE("the server starts later") {
    const auto port = free_port();
    std::optional<tcp_store_server> late_server;
    std::thread starter([&] {
      std::this_thread::sleep_for(150ms);
      late_server.emplace(tcp_store_server::create({.port = port}).value());
    });
    tcp_store_options opts;
    opts.connect_timeout = 5s;
    auto c = tcp_store::open(loopback(port), opts);
    starter.join();
    REQUIRE(c);
    c->set("up", std::string_view("yes")).value();
    CHECK(as_string(tcp_store::open(late_server->address()).value().get("up", 100ms).value()) == "yes");
  }
  SUBCASE("options that cannot work") {
    tcp_store_options opts;
    opts.connect_timeout = 0ms;
    CHECK(tcp_store::open(loopback(1), opts).code() == errc::invalid_argument);
    opts = {};
    opts.io_timeout = 0ms;
    CHECK(listen_store(opts).code() == errc::invalid_argument);
  }
  SUBCASE("a port already taken") {
    auto first = listen_store().value();
    auto r = listen_store({}, first->port());
    CHECK(r.code() == errc::io_error);
    CHECK(r.error().message.find("cannot bind 127.0.0.1:") != std::string::npos);
  }
}

TEST_CASE("tcp_store: destroying the server fails a client waiting in get, without hanging") {
  std::optional<tcp_store_server> server(tcp_store_server::create().value());
  auto client = tcp_store::open(server->address()).value();
  std::atomic<bool> parked{false};
  result<std::vector<std::byte>> r = fail(errc::internal, "not run");
  std::chrono::steady_clock::time_point t_destroy;
  std::thread waiter([&] {
    parked = true;
    r = client.get("never", 10s);
  });
  while (!parked) std::this_thread::yield();
  std::this_thread::sleep_for(100ms);
  t_destroy = std::chrono::steady_clock::now();
  server.reset();
  const double destroy_ms = ms_since(t_destroy);
  waiter.join();
  CHECK(destroy_ms < 1000);
  CHECK(ms_since(t_destroy) < 2000);
  CHECK(r.code() == errc::io_error);
  CHECK(r.error().message.find("get('never')") != std::string::npos);
  CHECK(client.check("x").code() == errc::io_error);
}
#endif
