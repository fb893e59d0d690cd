// redis_cache against a real redis-server started by the test: round trips, namespaces, TTL, pipelined
// multi-get, corrupt values, server down / restart / hung, concurrency over a small pool.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "jitembed/cache/redis_cache.hpp"
#include "batching/eventually.hpp"
#include "redis/redis_server.hpp"

using namespace jitembed;
using namespace jitembed::cache;
using namespace std::chrono_literals;

namespace {

cache_key key_of(std::uint64_t i, std::uint64_t salt = 0) { return cache_key{xxh3_128(as_bytes_view(std::to_string(i) + "/" + std::to_string(salt)))}; }

std::string value_of(std::uint64_t i, std::size_t size) {
  std::string s(size, '\0');
  std::uint64_t x = i * 0x9E3779B97F4A7C15ull + 1;
  for (auto& c : s) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<char>(x);
  }
  return s;
}

std::string str(const cached_value& v) { return std::string(as_string_view(v.bytes)); }

redis_options opts_for(int port, std::string prefix = "t:") {
  redis_options o;
  o.port = port;
  o.prefix = std::move(prefix);
  o.retry_after = 300ms;
  return o;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One server for the tests that do not stop it.
test::redis_server& shared_server() {
  static test::redis_server s;
  return s;
}

}  // namespace

TEST_CASE("redis_cache: put / get / contains / erase round trip, key layout and counters") {
  auto& srv = shared_server();
  auto c = redis_cache::open(opts_for(srv.port(), "rt:")).value();
  test::raw_redis raw(srv.port());

  const auto k = key_of(1);
  const std::string v = value_of(1, 5000);
  CHECK(c.redis_key(k) == "rt:" + k.to_hex());
  CHECK_FALSE(c.get(k).has_value());
  CHECK_FALSE(c.contains(k));
  CHECK(c.put(k, as_bytes_view(v)));
  CHECK(c.contains(k));

  auto got = c.get(k);
  REQUIRE(got.has_value());
  CHECK(str(*got) == v);
  // The bytes live in the reply chunk that keep_alive shares, 64-byte aligned (zero-copy tensor views).
  CHECK(got->keep_alive != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(got->bytes.data()) % 64 == 0);

  // Stored layout: "JERV" | u32 1 | XXH3-64(key bytes || value) | value.
  const std::string stored = raw.get(c.redis_key(k));
  REQUIRE(stored.size() == 16 + v.size());
  CHECK(stored.substr(0, 4) == "JERV");
  CHECK(stored.substr(4, 4) == std::string("\x01\x00\x00\x00", 4));
  CHECK(stored.substr(16) == v);
  {
    const auto kb = k.bytes();
    std::string joined(reinterpret_cast<const char*>(kb.data()), 16);
    joined += v;
    const std::uint64_t h = xxh3_64(as_bytes_view(joined));
    std::uint64_t stored_h = 0;
    std::memcpy(&stored_h, stored.data() + 8, 8);  // little-endian host
    CHECK(stored_h == h);
  }

  // Empty value.
  const auto k0 = key_of(2);
  CHECK(c.put(k0, {}));
  auto e = c.get(k0);
  REQUIRE(e.has_value());
  CHECK(e->bytes.empty());

  CHECK(c.erase(k));
  CHECK_FALSE(c.erase(k));
  CHECK_FALSE(c.contains(k));
  CHECK_FALSE(c.get(k).has_value());

  const auto s = c.stats();
  CHECK(s.hits == 2);
  CHECK(s.misses == 2);
  CHECK(s.puts == 2);
  CHECK(s.errors == 0);
  CHECK(s.bytes_read == v.size());
  CHECK(s.bytes_written == v.size());
}

TEST_CASE("redis_cache: a value outlives the cache and later calls (the reply is owned)") {
  auto& srv = shared_server();
  std::optional<cached_value> kept;
  const std::string v = value_of(7, 3000);
  {
    auto c = redis_cache::open(opts_for(srv.port(), "life:")).value();
    REQUIRE(c.put(key_of(7), as_bytes_view(v)));
    kept = c.get(key_of(7));
    REQUIRE(kept);
    for (int i = 0; i < 20; ++i) CHECK(c.put(key_of(100 + i), as_bytes_view(value_of(i, 3000))));
    for (int i = 0; i < 20; ++i) CHECK(c.get(key_of(100 + i)).has_value());
  }
  CHECK(str(*kept) == v);
}

TEST_CASE("redis_cache: held values are not overwritten when reply memory is recycled") {
  auto& srv = shared_server();
  auto c = redis_cache::open(opts_for(srv.port(), "recycle:")).value();
  std::vector<cache_key> a, b;
  std::vector<std::string> av, bv;
  for (int i = 0; i < 150; ++i) {
    a.push_back(key_of(i, 1));
    av.push_back(value_of(i, 4000 + i));
    b.push_back(key_of(i, 2));
    bv.push_back(value_of(1000 + i, 4000 + i));
    REQUIRE(c.put(a.back(), as_bytes_view(av.back())));
    REQUIRE(c.put(b.back(), as_bytes_view(bv.back())));
  }
  auto held = c.multi_get(a);
  held.resize(75);  // release half: their chunks may be reused, the others must not be
  for (int round = 0; round < 5; ++round) {
    auto got = c.multi_get(b);
    for (std::size_t i = 0; i < b.size(); ++i) {
      REQUIRE(got[i]);
      CHECK(str(*got[i]) == bv[i]);
    }
  }
  for (std::size_t i = 0; i < held.size(); ++i) {
    REQUIRE(held[i]);
    CHECK(str(*held[i]) == av[i]);
  }
}

TEST_CASE("redis_cache: pipelined multi_get with hits and misses, in order, across pipeline chunks") {
  auto& srv = shared_server();
  auto c = redis_cache::open(opts_for(srv.port(), "mg:")).value();
  const std::size_t n = redis_cache::kMaxPipeline * 2 + 37;  // three round trips
  std::vector<cache_key> keys;
  std::vector<std::string> vals;
  for (std::size_t i = 0; i < n; ++i) {
    keys.push_back(key_of(i, 3));
    vals.push_back(value_of(i, 64 + i % 700));
  }
  // put_many the even ones.
  std::vector<cache_key> pk;
  std::vector<bytes_view> pv;
  for (std::size_t i = 0; i < n; i += 2) {
    pk.push_back(keys[i]);
    pv.push_back(as_bytes_view(vals[i]));
  }
  CHECK(c.put_many(pk, pv) == pk.size());

  auto got = c.multi_get(keys);
  REQUIRE(got.size() == n);
  std::size_t hits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 2 == 0) {
      REQUIRE(got[i].has_value());
      CHECK(str(*got[i]) == vals[i]);
      CHECK(reinterpret_cast<std::uintptr_t>(got[i]->bytes.data()) % 64 == 0);
      ++hits;
    } else {
      CHECK_FALSE(got[i].has_value());
    }
  }
  const auto s = c.stats();
  CHECK(s.hits == hits);
  CHECK(s.misses == n - hits);
  CHECK(s.errors == 0);
  CHECK(c.multi_get({}).empty());

  // put_many with mismatched spans stores nothing and counts one error.
  CHECK(c.put_many(std::span<const cache_key>(keys).first(2), std::span<const bytes_view>(pv).first(1)) == 0);
  CHECK(c.stats().errors == 1);
}

TEST_CASE("redis_cache: prefixes isolate namespaces") {
  auto& srv = shared_server();
  auto a = redis_cache::open(opts_for(srv.port(), "ns-a:")).value();
  auto b = redis_cache::open(opts_for(srv.port(), "ns-b:")).value();
  const auto k = key_of(42);
  REQUIRE(a.put(k, as_bytes_view(std::string("from a"))));
  CHECK_FALSE(b.get(k).has_value());
  CHECK_FALSE(b.contains(k));
  CHECK_FALSE(b.erase(k));
  REQUIRE(b.put(k, as_bytes_view(std::string("from b"))));
  CHECK(str(*a.get(k)) == "from a");
  CHECK(str(*b.get(k)) == "from b");
  CHECK(b.erase(k));
  CHECK(a.contains(k));
  // The checksum binds the cache key, not the prefix: a value copied to another namespace under the same
  // key is still intact data for that key.
  test::raw_redis raw(srv.port());
  raw.set("ns-b:" + k.to_hex(), raw.get("ns-a:" + k.to_hex()));
  CHECK(str(*b.get(k)) == "from a");
}

TEST_CASE("redis_cache: TTL expires values") {
  auto& srv = shared_server();
  auto o = opts_for(srv.port(), "ttl:");
  o.ttl = 1s;
  auto c = redis_cache::open(o).value();
  test::raw_redis raw(srv.port());
  const auto k = key_of(9);
  REQUIRE(c.put(k, as_bytes_view(std::string("short-lived"))));
  const long long ttl_ms = raw.integer({"PTTL", c.redis_key(k)});
  CHECK(ttl_ms > 0);
  CHECK(ttl_ms <= 1000);
  CHECK(c.get(k).has_value());
  // Redis expires the key after the TTL: wait for that, not for a guessed time.
  REQUIRE(jitembed::test::eventually([&] { return raw.integer({"EXISTS", c.redis_key(k)}) == 0; }));
  CHECK_FALSE(c.get(k).has_value());
  CHECK_FALSE(c.contains(k));

  auto forever = redis_cache::open(opts_for(srv.port(), "ttl0:")).value();
  REQUIRE(forever.put(k, as_bytes_view(std::string("kept"))));
  CHECK(raw.integer({"PTTL", forever.redis_key(k)}) == -1);  // no expiry
}

TEST_CASE("redis_cache: a corrupt value is a miss, is deleted and counts an error") {
  auto& srv = shared_server();
  auto c = redis_cache::open(opts_for(srv.port(), "bad:")).value();
  test::raw_redis raw(srv.port());
  const std::string v = value_of(5, 1000);
  const auto k = key_of(5);
  REQUIRE(c.put(k, as_bytes_view(v)));
  const std::string good = raw.get(c.redis_key(k));

  struct variant {
    const char* name;
    std::string bytes;
  };
  std::string flipped = good;
  flipped[16 + 500] ^= 0x01;
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  std::string bad_version = good;
  bad_version[4] = 2;
  std::string bad_sum = good;
  bad_sum[8] ^= 0x80;
  const std::vector<variant> variants = {
      {"garbage", "not a jitembed value at all"},
      {"empty", ""},
      {"header cut", good.substr(0, 10)},
      {"truncated value", good.substr(0, good.size() - 1)},
      {"flipped value byte", flipped},
      {"bad magic", bad_magic},
      {"bad version", bad_version},
      {"bad checksum", bad_sum},
  };
  std::uint64_t errors = c.stats().errors;
  for (const auto& var : variants) {
    CAPTURE(var.name);
    raw.set(c.redis_key(k), var.bytes);
    CHECK_FALSE(c.get(k).has_value());
    CHECK(c.stats().errors == ++errors);
    CHECK_FALSE(raw.exists(c.redis_key(k)));
    CHECK(c.last_error().find("redis: GET " + c.redis_key(k)) == 0);
  }

  // A valid value moved under another key fails: the checksum covers the key.
  const auto other = key_of(6);
  raw.set(c.redis_key(other), good);
  CHECK_FALSE(c.get(other).has_value());
  CHECK_FALSE(raw.exists(c.redis_key(other)));
  CHECK(c.last_error().find("checksum") != std::string::npos);

  // In a multi_get, only the corrupt one is a miss (and removed); neighbours are hits.
  std::vector<cache_key> keys = {key_of(10), key_of(11), key_of(12)};
  for (auto& kk : keys) REQUIRE(c.put(kk, as_bytes_view(v)));
  raw.set(c.redis_key(keys[1]), "garbage");
  auto got = c.multi_get(keys);
  CHECK(got[0].has_value());
  CHECK_FALSE(got[1].has_value());
  CHECK(got[2].has_value());
  CHECK_FALSE(raw.exists(c.redis_key(keys[1])));

  // A key of the wrong type: error reply, a miss and an error; the connection keeps working.
  const auto lk = key_of(13);
  raw.integer({"RPUSH", c.redis_key(lk), "x"});
  errors = c.stats().errors;
  CHECK_FALSE(c.get(lk).has_value());
  CHECK(c.stats().errors == errors + 1);
  CHECK(c.last_error().find("WRONGTYPE") != std::string::npos);
  CHECK(c.get(keys[0]).has_value());
}

TEST_CASE("redis_cache: max_value_bytes bounds puts and gets") {
  auto& srv = shared_server();
  auto o = opts_for(srv.port(), "max:");
  o.max_value_bytes = 1000;
  auto small = redis_cache::open(o).value();
  auto big = redis_cache::open(opts_for(srv.port(), "max:")).value();
  const auto k = key_of(77);
  CHECK_FALSE(small.put(k, as_bytes_view(value_of(1, 1001))));  // not stored, not an error
  CHECK(small.stats().errors == 0);
  CHECK_FALSE(big.contains(k));
  CHECK(small.put(k, as_bytes_view(value_of(1, 1000))));

  const auto k2 = key_of(78);
  REQUIRE(big.put(k2, as_bytes_view(value_of(2, 4000))));
  CHECK_FALSE(small.get(k2).has_value());  // too big for this reader: a miss and an error, not deleted
  CHECK(small.stats().errors == 1);
  CHECK(small.last_error().find("max_value_bytes 1000") != std::string::npos);
  CHECK(big.get(k2).has_value());

  // A large value (several MiB: partial socket writes) round-trips.
  const std::string large = value_of(3, (8u << 20) + 3);
  REQUIRE(big.put(key_of(79), as_bytes_view(large)));
  auto g = big.get(key_of(79));
  REQUIRE(g);
  CHECK(str(*g) == large);
}

TEST_CASE("redis_cache: db selection, AUTH and a Unix socket") {
  const std::string sock = "/tmp/jitembed-test-redis-" + std::to_string(::getpid()) + ".sock";
  test::redis_server srv(0, {"--unixsocket", sock, "--unixsocketperm", "700"});
  test::raw_redis raw(srv.port());

  auto o = opts_for(srv.port(), "db:");
  o.db = 3;
  auto c3 = redis_cache::open(o).value();
  const auto k = key_of(1);
  REQUIRE(c3.put(k, as_bytes_view(std::string("in db 3"))));
  CHECK_FALSE(raw.exists(c3.redis_key(k)));  // raw is on db 0
  CHECK(raw.integer({"DBSIZE"}) == 0);
  freeReplyObject(raw.command({"SELECT", "3"}));
  CHECK(raw.exists(c3.redis_key(k)));
  freeReplyObject(raw.command({"SELECT", "0"}));

  redis_options uo;
  uo.unix_socket = sock;
  uo.prefix = "unix:";
  auto cu = redis_cache::open(uo).value();
  REQUIRE(cu.put(k, as_bytes_view(std::string("via unix socket"))));
  CHECK(raw.get("unix:" + k.to_hex()).substr(16) == "via unix socket");

  freeReplyObject(raw.command({"CONFIG", "SET", "requirepass", "s3cret"}));
  auto wrong = opts_for(srv.port(), "auth:");
  wrong.password = "nope";
  auto cw = redis_cache::open(wrong);  // a wrong password is an error of open(), not of the first call
  REQUIRE_FALSE(cw);
  CHECK(cw.code() == errc::io_error);
  CHECK(cw.error().message.find("handshake") != std::string::npos);
  auto right = opts_for(srv.port(), "auth:");
  right.password = "s3cret";
  auto cr = redis_cache::open(right).value();
  CHECK(cr.put(k, as_bytes_view(std::string("authenticated"))));
  CHECK(str(*cr.get(k)) == "authenticated");
  CHECK(cr.stats().errors == 0);
  ::unlink(sock.c_str());
}

TEST_CASE("redis_cache: server down fails fast and counts errors then a restart works again after the back-off") {
  test::redis_server srv;
  auto o = opts_for(srv.port(), "down:");
  // Bounds below are fractions of these, so a loaded (sanitizer) machine does not fail them, while a call
  // that waited for io_timeout, or went to the network while marked down, still would.
  o.io_timeout = 4000ms;
  o.retry_after = 2000ms;
  auto c = redis_cache::open(o).value();
  const auto k = key_of(1);
  const std::string v = value_of(1, 2000);
  REQUIRE(c.put(k, as_bytes_view(v)));
  REQUIRE(c.get(k).has_value());  // a pooled connection now exists

  srv.stop(SIGKILL);
  auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(c.get(k).has_value());  // stale connection, retry on a fresh one: refused
  CHECK(ms_since(t0) < 2000);  // refused at once, not io_timeout
  CHECK(c.stats().errors == 1);
  CHECK(c.stats().misses == 1);

  // While marked down: no network, immediate failure, every call counted, nothing thrown.
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) CHECK_FALSE(c.get(k).has_value());
  CHECK_FALSE(c.put(k, as_bytes_view(v)));
  CHECK_FALSE(c.contains(k));
  CHECK_FALSE(c.erase(k));
  CHECK(c.multi_get(std::vector<cache_key>{k, key_of(2)}).size() == 2);
  CHECK_FALSE(c.ping());
  CHECK(ms_since(t0) < 1000);  // inside the back-off: no call went to the network
  CHECK(c.stats().errors == 1 + 100 + 1 + 1 + 1 + 2 + 1);
  CHECK(c.last_error().find("marked down") != std::string::npos);

  srv.start();  // same port, empty (no persistence)
  REQUIRE(jitembed::test::eventually([&] { return c.ping(); }));  // once the back-off has passed
  CHECK(c.put(k, as_bytes_view(v)));
  auto g = c.get(k);
  REQUIRE(g.has_value());
  CHECK(str(*g) == v);
}

TEST_CASE("redis_cache: pooled connections survive a quick server restart (one retry, no error)") {
  test::redis_server srv;
  auto o = opts_for(srv.port(), "restart:");
  o.pool_size = 1;
  auto c = redis_cache::open(o).value();
  const auto k = key_of(1);
  REQUIRE(c.put(k, as_bytes_view(std::string("v1"))));
  srv.stop(SIGTERM);
  srv.start();
  CHECK(c.put(k, as_bytes_view(std::string("v2"))));  // the stale pooled connection is replaced at once
  CHECK(str(*c.get(k)) == "v2");
  CHECK(c.stats().errors == 0);
}

TEST_CASE("redis_cache: open checks its options") {
  redis_options o;
  o.pool_size = 0;
  auto a = redis_cache::open(o);
  REQUIRE_FALSE(a);
  CHECK(a.code() == errc::invalid_argument);
  CHECK(a.error().message == "redis_options.pool_size: must be at least 1");
  redis_options t;
  t.ttl = std::chrono::seconds(-1);
  CHECK(redis_cache::open(t).code() == errc::invalid_argument);
}

TEST_CASE("redis_cache: open with nothing listening fails fast") {
  const int port = test::pick_free_port();
  auto o = opts_for(port, "none:");
  o.io_timeout = 4000ms;
  const auto t0 = std::chrono::steady_clock::now();
  auto c = redis_cache::open(o);
  CHECK(ms_since(t0) < 2000);  // refused at once, not io_timeout
  REQUIRE_FALSE(c);
  CHECK(c.code() == errc::io_error);
  CHECK(c.error().message.find("redis: open 127.0.0.1:" + std::to_string(port) + ": ") == 0);
}

TEST_CASE("redis_cache: open on a server that accepts but never answers is bounded by io_timeout") {
  test::silent_server hung;
  auto o = opts_for(hung.port(), "hung:");
  o.io_timeout = 500ms;
  o.retry_after = 5000ms;
  auto t0 = std::chrono::steady_clock::now();
  auto c = redis_cache::open(o);
  const double first = ms_since(t0);
  REQUIRE_FALSE(c);
  CHECK(c.code() == errc::io_error);
  CHECK(first >= 400);
  CHECK(first < 5 * 500);  // bounded by io_timeout (generous: sanitizer builds on a loaded machine)
  CHECK(c.error().message.find("timed out") != std::string::npos);
}

TEST_CASE("redis_cache: 4 threads over a pool of 2 connections") {
  auto& srv = shared_server();
  auto o = opts_for(srv.port(), "mt:");
  o.pool_size = 2;
  o.io_timeout = 2000ms;  // waiting for a free connection counts against it; keep the machine's noise out
  auto c = redis_cache::open(o).value();
  constexpr int kThreads = 4, kKeys = 200;
  std::vector<std::string> vals;
  for (int i = 0; i < kKeys; ++i) vals.push_back(value_of(i, 100 + i * 13));
  std::atomic<int> wrong{0}, hits{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (int i = t; i < kKeys; i += kThreads)
          if (!c.put(key_of(i, 55), as_bytes_view(vals[i]))) ++wrong;
        std::vector<cache_key> keys;
        for (int i = 0; i < kKeys; ++i) keys.push_back(key_of(i, 55));
        auto got = c.multi_get(keys);
        for (int i = 0; i < kKeys; ++i) {
          if (!got[i]) continue;  // another thread has not put it yet
          ++hits;
          if (str(*got[i]) != vals[i]) ++wrong;
        }
        for (int i = 0; i < kKeys; i += 7) {
          auto g = c.get(key_of(i, 55));
          if (g && str(*g) != vals[i]) ++wrong;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  CHECK(wrong == 0);
  CHECK(hits >= 3 * kKeys);  // each thread at least sees its own puts, every round
  const auto s = c.stats();
  CHECK(s.errors == 0);
  CHECK(s.puts == 3 * kKeys);
}
