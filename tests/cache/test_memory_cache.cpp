// memory_cache: LRU order, the byte budget against a reference model, value lifetime after eviction,
// and concurrent use (run under TSan too).
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <list>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache/cache_test_util.hpp"
#include "jitembed/cache/key.hpp"
#include "jitembed/cache/memory_cache.hpp"

using namespace jitembed;
using namespace jitembed::cache;
using cache_test::key_n;

namespace {


// Deterministic value bytes for (key id, size).
std::vector<std::byte> value_for(std::uint64_t n, std::size_t size) {
  std::vector<std::byte> v(size);
  for (std::size_t i = 0; i < size; ++i) v[i] = static_cast<std::byte>((n * 131 + i * 7) & 0xff);
  return v;
}

bool same(const cached_value& c, const std::vector<std::byte>& v) {
  return c.bytes.size() == v.size() && (v.empty() || std::memcmp(c.bytes.data(), v.data(), v.size()) == 0);
}

}  // namespace

TEST_CASE("memory_cache: put, get, contains, erase, stats") {
  memory_cache c(1 << 20, 4);
  CHECK(c.shard_count() == 4);
  CHECK(c.byte_budget() == (1 << 20));
  const auto k = key_n(1);
  const auto v = value_for(1, 1000);
  CHECK_FALSE(c.get(k));
  CHECK_FALSE(c.contains(k));
  CHECK(c.put(k, v));
  CHECK(c.contains(k));
  auto g1 = c.get(k);
  auto g2 = c.get(k);
  REQUIRE(g1);
  REQUIRE(g2);
  CHECK(same(*g1, v));
  CHECK(g1->bytes.data() == g2->bytes.data());  // shared, not copied
  CHECK(reinterpret_cast<std::uintptr_t>(g1->bytes.data()) % 64 == 0);
  CHECK(c.put(k, v));  // existing key: fine, not stored twice
  auto s = c.stats();
  CHECK(s.hits == 2);
  CHECK(s.misses == 1);
  CHECK(s.puts == 1);
  CHECK(s.entries == 1);
  CHECK(s.bytes_held == 1000);
  CHECK(s.bytes_read == 2000);
  CHECK(s.bytes_written == 1000);
  CHECK(c.erase(k));
  CHECK_FALSE(c.erase(k));
  CHECK_FALSE(c.contains(k));
  CHECK(c.stats().bytes_held == 0);
  CHECK(same(*g1, v));  // still valid after erase

  const cache_key keys[] = {key_n(1), key_n(2), key_n(3)};
  CHECK(c.put(keys[1], value_for(2, 10)));
  auto many = c.multi_get(keys);
  REQUIRE(many.size() == 3);
  CHECK_FALSE(many[0]);
  REQUIRE(many[1]);
  CHECK(same(*many[1], value_for(2, 10)));
  CHECK_FALSE(many[2]);

  CHECK(c.put(key_n(9), {}));  // empty values are values
  REQUIRE(c.get(key_n(9)));
  CHECK(c.get(key_n(9))->bytes.empty());
}

TEST_CASE("memory_cache: least recently used goes first") {
  memory_cache c(300, 1);  // one shard, room for three 100-byte values
  for (std::uint64_t i = 0; i < 3; ++i) REQUIRE(c.put(key_n(i), value_for(i, 100)));
  REQUIRE(c.get(key_n(0)));  // 0 becomes most recent; 1 is now the oldest
  REQUIRE(c.put(key_n(3), value_for(3, 100)));
  CHECK(c.contains(key_n(0)));
  CHECK_FALSE(c.contains(key_n(1)));
  CHECK(c.contains(key_n(2)));
  CHECK(c.contains(key_n(3)));
  CHECK(c.put(key_n(2), value_for(2, 100)));  // a put of an existing key also refreshes it
  REQUIRE(c.put(key_n(4), value_for(4, 250)));  // needs three evictions: 0, 3, 2 in LRU order
  CHECK(c.contains(key_n(4)));
  CHECK_FALSE(c.contains(key_n(0)));
  CHECK_FALSE(c.contains(key_n(3)));
  CHECK_FALSE(c.contains(key_n(2)));
  const auto s = c.stats();
  CHECK(s.evictions == 4);
  CHECK(s.entries == 1);
  CHECK(s.bytes_held == 250);
}

TEST_CASE("memory_cache: a value larger than a shard's budget is not stored") {
  memory_cache c(4000, 4);  // 1000 bytes per shard
  CHECK(c.shard_budget() == 1000);
  CHECK(c.put(key_n(1), value_for(1, 1000)));
  CHECK_FALSE(c.put(key_n(2), value_for(2, 1001)));
  CHECK_FALSE(c.contains(key_n(2)));
  CHECK(c.contains(key_n(1)));
  CHECK(c.stats().errors == 0);
  memory_cache zero(0, 1);
  CHECK_FALSE(zero.put(key_n(1), value_for(1, 1)));
  CHECK(zero.put(key_n(1), {}));
}

TEST_CASE("memory_cache: values stay valid after eviction and clear") {
  memory_cache c(1000, 1);
  std::vector<cached_value> held;
  for (std::uint64_t i = 0; i < 20; ++i) {
    REQUIRE(c.put(key_n(i), value_for(i, 400)));
    held.push_back(*c.get(key_n(i)));
  }
  CHECK(c.stats().entries == 2);
  CHECK(c.stats().evictions == 18);
  c.clear();
  CHECK(c.stats().entries == 0);
  CHECK(c.stats().bytes_held == 0);
  for (std::uint64_t i = 0; i < 20; ++i) CHECK(same(held[i], value_for(i, 400)));
}

TEST_CASE("memory_cache: random operations against a reference LRU model") {
  for (std::size_t shards : {std::size_t{1}, std::size_t{4}}) {
    CAPTURE(shards);
    const std::size_t budget = 4096;
    memory_cache c(budget, shards);
    // Reference: per shard, a list of (id, size), most recent first.
    std::vector<std::list<std::pair<std::uint64_t, std::size_t>>> model(c.shard_count());
    std::map<std::uint64_t, std::size_t> sizes;  // id -> the size it was first put with
    std::mt19937_64 rng(42 + shards);
    std::uint64_t evictions = 0;
    auto find = [&](std::size_t s, std::uint64_t id) {
      auto& l = model[s];
      for (auto it = l.begin(); it != l.end(); ++it)
        if (it->first == id) return it;
      return l.end();
    };
    for (int op = 0; op < 4000; ++op) {
      const std::uint64_t id = rng() % 64;
      const cache_key k = key_n(id);
      const std::size_t s = c.shard_index(k);
      auto& l = model[s];
      const int what = static_cast<int>(rng() % 10);
      if (what < 5) {  // get
        auto got = c.get(k);
        auto it = find(s, id);
        REQUIRE(got.has_value() == (it != l.end()));
        if (got) {
          CHECK(same(*got, value_for(id, it->second)));
          l.splice(l.begin(), l, it);
        }
      } else if (what < 9) {  // put
        if (!sizes.count(id)) sizes[id] = rng() % 1400;
        const std::size_t size = sizes[id];
        const bool stored = c.put(k, value_for(id, size));
        const std::size_t shard_budget = budget / c.shard_count();
        auto it = find(s, id);
        if (size > shard_budget) {
          CHECK_FALSE(stored);
        } else {
          CHECK(stored);
          if (it != l.end()) {
            l.splice(l.begin(), l, it);
          } else {
            std::size_t held = 0;
            for (auto& e : l) held += e.second;
            while (held + size > shard_budget) {
              held -= l.back().second;
              l.pop_back();
              ++evictions;
            }
            l.emplace_front(id, size);
          }
        }
      } else {  // erase
        auto it = find(s, id);
        CHECK(c.erase(k) == (it != l.end()));
        if (it != l.end()) l.erase(it);
      }
      // Budget and contents agree with the model after every operation.
      std::size_t entries = 0, bytes = 0;
      for (auto& m : model)
        for (auto& e : m) {
          ++entries;
          bytes += e.second;
        }
      const auto st = c.stats();
      REQUIRE(st.entries == entries);
      REQUIRE(st.bytes_held == bytes);
      REQUIRE(st.bytes_held <= budget);
      REQUIRE(st.evictions == evictions);
    }
    for (std::uint64_t id = 0; id < 64; ++id) CHECK(c.contains(key_n(id)) == (find(c.shard_index(key_n(id)), id) != model[c.shard_index(key_n(id))].end()));
  }
}

TEST_CASE("memory_cache: concurrent mixed get / put / erase from 4 threads") {
  memory_cache c(64 * 1024, 8);
  std::atomic<int> bad{0};
  std::atomic<std::uint64_t> hits{0}, gets{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<cached_value> held;
      for (int i = 0; i < 20000; ++i) {
        const std::uint64_t id = rng() % 256;
        const std::size_t size = 64 + id * 4;
        const cache_key k = key_n(id);
        const int what = static_cast<int>(rng() % 10);
        if (what < 6) {
          gets.fetch_add(1, std::memory_order_relaxed);
          if (auto v = c.get(k)) {
            hits.fetch_add(1, std::memory_order_relaxed);
            if (!same(*v, value_for(id, size))) bad.fetch_add(1);
            if (held.size() < 64) held.push_back(std::move(*v));
          }
        } else if (what < 9) {
          c.put(k, value_for(id, size));
        } else {
          c.erase(k);
        }
        if (i % 1000 == 0) {
          (void)c.stats();
          held.clear();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(bad.load() == 0);
  const auto s = c.stats();
  CHECK(s.hits == hits.load());
  CHECK(s.hits + s.misses == gets.load());
  CHECK(s.bytes_held <= c.byte_budget());
  CHECK(s.hits > 0);
  CHECK(s.evictions > 0);
}
