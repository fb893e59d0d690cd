// lmdb_cache across processes: concurrent forked writers and readers on one path (with the map growing
// under them), and crash safety (SIGKILL during writes, then every value present is intact).
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "lmdb/lmdb_test_util.hpp"

using namespace lmdb_test;
using jitembed::cache::lmdb_cache;

namespace {
std::size_t mp_size(std::uint64_t k) { return size_of(k) + (k % 5) * 1000; }
}  // namespace

TEST_CASE("lmdb_cache: 4 writer + 4 reader processes on one path lose and tear nothing") {
  temp_dir dir("multiproc");
  auto o = options_for(dir.path);
  o.initial_map_bytes = 256 << 10;  // every process grows it or adopts another's growth
  // The parent has the env open across the fork (children must open their own) and reads at the end
  // with its small map.
  auto parent = lmdb_cache::open(o).value();
  REQUIRE(parent.put(key_of(999999), view(value_of(999999, 10))));
  const std::size_t parent_map = parent.map_bytes();

  constexpr int kWriters = 4, kReaders = 4;
  constexpr std::uint64_t kPer = 120, kShared = 40;
  std::vector<pid_t> kids;
  for (int w = 0; w < kWriters; ++w)
    kids.push_back(spawn([&, w]() -> int {
      auto c = lmdb_cache::open(o);
      if (!c) return 10;
      for (std::uint64_t i = 0; i < kPer; ++i) {
        const std::uint64_t mine = static_cast<std::uint64_t>(w) * 10000 + i;
        const std::uint64_t shared = 50000 + (i + static_cast<std::uint64_t>(w) * 7) % kShared;
        for (std::uint64_t k : {mine, shared}) {
          if (!c->put(key_of(k), view(value_of(k, mp_size(k))))) return 11;
          auto v = c->get(key_of(k));
          if (!v) return 12;
          if (!equal(v->bytes, value_of(k, mp_size(k)))) return 13;
        }
      }
      return c->stats().errors == 0 ? 0 : 14;
    }));
  for (int r = 0; r < kReaders; ++r)
    kids.push_back(spawn([&, r]() -> int {
      auto c = lmdb_cache::open(o);
      if (!c) return 20;
      std::uint64_t s = static_cast<std::uint64_t>(r) + 100;
      std::uint64_t hits = 0;
      // 1500 rounds, and on until the first hit (a reader scheduled before any writer has put a value would
      // otherwise read nothing and prove nothing; seen under a loaded ctest -j2), at most 30 s.
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      for (int n = 0; n < 1500 || (hits == 0 && std::chrono::steady_clock::now() < give_up); ++n) {
        std::vector<cache_key> keys;
        std::vector<std::uint64_t> ids;
        for (int j = 0; j < 4; ++j) {
          const std::uint64_t x = splitmix(s);
          const std::uint64_t k = (x & 1) ? 50000 + x % kShared : ((x >> 8) % kWriters) * 10000 + (x >> 16) % kPer;
          ids.push_back(k);
          keys.push_back(key_of(k));
        }
        auto got = c->multi_get(keys);
        for (std::size_t j = 0; j < got.size(); ++j)
          if (got[j]) {
            ++hits;
            if (!equal(got[j]->bytes, value_of(ids[j], mp_size(ids[j])))) return 21;
          }
        if (auto v = c->get(keys[0]); v && !equal(v->bytes, value_of(ids[0], mp_size(ids[0])))) return 22;
      }
      if (c->stats().errors != 0) {
        std::fprintf(stderr, "reader %d: %s\n", r, c->last_error().c_str());
        return 23;
      }
      return hits > 0 ? 0 : 24;
    }));
  for (pid_t k : kids) CHECK(wait_status(k) == 0);

  // Everything every writer wrote is there and exact, read through the parent's (older, smaller) map.
  for (int w = 0; w < kWriters; ++w)
    for (std::uint64_t i = 0; i < kPer; ++i) {
      const std::uint64_t k = static_cast<std::uint64_t>(w) * 10000 + i;
      auto v = parent.get(key_of(k));
      REQUIRE(v);
      CHECK(equal(v->bytes, value_of(k, mp_size(k))));
    }
  for (std::uint64_t i = 0; i < kShared; ++i) {
    auto v = parent.get(key_of(50000 + i));
    REQUIRE(v);
    CHECK(equal(v->bytes, value_of(50000 + i, mp_size(50000 + i))));
  }
  CHECK(parent.map_bytes() > parent_map);  // adopted the size the others grew to
  CHECK(parent.stats().errors == 0);
  CHECK(parent.stats().entries == kWriters * kPer + kShared + 1);
}

TEST_CASE("lmdb_cache: SIGKILL during writes leaves every present value intact") {
  temp_dir dir("crash");
  auto o = options_for(dir.path);
  o.initial_map_bytes = std::size_t{1} << 30;  // the child holds a value: its map could not grow
  std::uint64_t next = 0;
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    int pipefd[2];
    REQUIRE(pipe(pipefd) == 0);
    const std::uint64_t first = next;
    const pid_t pid = spawn([&]() -> int {
      close(pipefd[0]);
      auto c = lmdb_cache::open(o);
      if (!c) return 30;
      auto held = c->get(key_of(0));  // dies holding a reader slot too
      for (std::uint64_t i = first;; ++i) {
        if (!c->put(key_of(i), view(value_of(i, mp_size(i) * 3)))) {
          std::fprintf(stderr, "crash writer: %s\n", c->last_error().c_str());
          return 31;
        }
        if (i == first + 30) {
          const char b = 1;
          if (write(pipefd[1], &b, 1) != 1) return 32;
        }
      }
    });
    close(pipefd[1]);
    char b = 0;
    REQUIRE(read(pipefd[0], &b, 1) == 1);
    close(pipefd[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + 30 * round));
    kill(pid, SIGKILL);
    CHECK(wait_status(pid) == -SIGKILL);

    auto c = lmdb_cache::open(o).value();
    // Puts are sequential and each commit is atomic: the present keys form a prefix, all exact.
    std::uint64_t present = 0;
    while (true) {
      auto v = c.get(key_of(present));
      if (!v) break;
      CHECK(equal(v->bytes, value_of(present, mp_size(present) * 3)));
      ++present;
    }
    CHECK(present > first + 30);
    for (std::uint64_t i = present; i < present + 200; ++i) CHECK_FALSE(c.contains(key_of(i)));
    CHECK(c.stats().errors == 0);
    CHECK(c.stats().entries == present);
    // The writer lock the child died holding is recovered.
    REQUIRE(c.put(key_of(present), view(value_of(present, mp_size(present) * 3))));
    next = present + 1;
  }
}

TEST_CASE("lmdb_cache: while values are held, another process's map growth reads as misses, not errors") {
  temp_dir dir("heldadopt");
  auto o = options_for(dir.path);
  o.initial_map_bytes = 256 << 10;
  o.resize_timeout = std::chrono::milliseconds(2000);
  auto c = lmdb_cache::open(o).value();
  REQUIRE(c.put(key_of(0), view(value_of(0, 100))));
  auto held = c.get(key_of(0));
  REQUIRE(held);
  const std::size_t map = c.map_bytes();
  // Another process writes far past this process's map.
  const pid_t pid = spawn([&]() -> int {
    auto other = lmdb_cache::open(o);
    if (!other) return 40;
    for (std::uint64_t i = 1; i <= 100; ++i)
      if (!other->put(key_of(i), view(value_of(i, 30000)))) return 41;
    return 0;
  });
  REQUIRE(wait_status(pid) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(c.get(key_of(100)).has_value());  // the held (older) snapshot is used: a quick miss
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1000));
  CHECK(c.stats().errors == 0);
  CHECK(equal(held->bytes, value_of(0, 100)));
  held.reset();
  auto v = c.get(key_of(100));  // nothing held: the larger map is adopted
  REQUIRE(v);
  CHECK(equal(v->bytes, value_of(100, 30000)));
  CHECK(c.map_bytes() > map);
  CHECK(c.stats().errors == 0);
}
