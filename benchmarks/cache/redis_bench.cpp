// bench_cache part: redis_cache pipelined multi_get / put_many / single get against redis-benchmark on
// the same throwaway redis-server, alternating runs (ratio = ours / redis-benchmark's requests per second).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../tests/redis/redis_server.hpp"
#include "cache_benches.hpp"
#include "jitembed/cache/redis_cache.hpp"

namespace jitembed::bench {
namespace {

// Runs redis-benchmark and returns its "requests per second" (0 when it could not be run or parsed).
// random_keys > 0 adds "-r random_keys" (keys key:000000000000 .. spread over that many).
double redis_benchmark_rps(const std::string& exe, int port, const std::string& test, int pipeline, int n, int data, int random_keys) {
  std::string cmd = exe + " -h 127.0.0.1 -p " + std::to_string(port) + " -t " + test + " -P " + std::to_string(pipeline) +
                    " -n " + std::to_string(n) + " -d " + std::to_string(data) + " -c 1 -q";
  if (random_keys > 0) cmd += " -r " + std::to_string(random_keys);
  cmd += " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return 0;
  std::string out;
  char buf[4096];
  while (std::size_t got = std::fread(buf, 1, sizeof buf, p)) out.append(buf, got);
  ::pclose(p);
  // Final line: "GET: 123456.79 requests per second, p50=0.311 msec" (progress lines end in '\r').
  const std::size_t at = out.rfind(" requests per second");
  if (at == std::string::npos) return 0;
  std::size_t start = out.rfind(' ', at - 1);
  start = start == std::string::npos ? 0 : start + 1;
  return std::strtod(out.c_str() + start, nullptr);
}

double seconds_of(const auto& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void run_redis_benchmarks(reporter& r) {
  const std::string rb = test::find_on_path("redis-benchmark");
  if (rb.empty()) {
    std::fprintf(stderr, "redis bench: redis-benchmark not on PATH, skipped\n");
    return;
  }
  std::unique_ptr<test::redis_server> srv;
  try {
    srv = std::make_unique<test::redis_server>();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redis bench: %s, skipped\n", e.what());
    return;
  }
  const int port = srv->port();

  constexpr std::size_t kValue = 4096, kKeys = 4096, kBatch = 64;
  constexpr int kGets = 200000, kSets = 64000, kSingle = 10000, kRounds = 3;
  cache::redis_options o;
  o.port = port;
  o.prefix = "bench:";
  o.io_timeout = std::chrono::milliseconds(5000);
  auto opened = cache::redis_cache::open(o);
  if (!opened) {
    std::fprintf(stderr, "redis bench: %s, skipped\n", opened.error().message.c_str());
    return;
  }
  cache::redis_cache c = std::move(*opened);

  std::vector<cache::cache_key> keys;
  std::vector<std::string> vals;
  std::vector<bytes_view> views;
  for (std::size_t i = 0; i < kKeys; ++i) {
    keys.push_back(cache::cache_key{xxh3_128(as_bytes_view("bench/" + std::to_string(i)))});
    vals.emplace_back(kValue, static_cast<char>('a' + i % 26));
    views.push_back(as_bytes_view(vals.back()));
  }
  if (c.put_many(keys, views) != kKeys) {
    std::fprintf(stderr, "redis bench: preload failed: %s\n", c.last_error().c_str());
    return;
  }
  // redis-benchmark's keys: "key:__rand_int__" without -r, key:000000000000 .. with -r kKeys; give them
  // 4 KiB values too, so both sides read the same sizes from the same working set.
  {
    test::raw_redis raw(port);
    std::vector<std::pair<std::string, std::string>> kv;
    kv.emplace_back("key:__rand_int__", std::string(kValue, 'x'));
    char name[32];
    for (std::size_t i = 0; i < kKeys; ++i) {
      std::snprintf(name, sizeof name, "key:%012zu", i);
      kv.emplace_back(name, std::string(kValue, 'x'));
    }
    raw.set_many(kv);
  }
  const std::vector<cache::cache_key> hot(kBatch, keys[0]);

  auto our_multi_get = [&] {  // 64 distinct keys per batch, cycling over all kKeys
    std::size_t hits = 0;
    for (int done = 0; done < kGets; done += static_cast<int>(kBatch)) {
      const std::size_t first = static_cast<std::size_t>(done) % kKeys;
      for (const auto& v : c.multi_get(std::span<const cache::cache_key>(keys).subspan(first, kBatch))) hits += v.has_value();
    }
    if (hits != static_cast<std::size_t>(kGets)) throw std::runtime_error("redis bench: unexpected misses: " + c.last_error());
  };
  auto our_multi_get_hot = [&] {  // like redis-benchmark without -r: one key, 64 times per batch
    std::size_t hits = 0;
    for (int done = 0; done < kGets; done += static_cast<int>(kBatch))
      for (const auto& v : c.multi_get(hot)) hits += v.has_value();
    if (hits != static_cast<std::size_t>(kGets)) throw std::runtime_error("redis bench: unexpected misses: " + c.last_error());
  };
  auto our_put_many = [&] {
    for (int done = 0; done < kSets; done += static_cast<int>(kBatch)) {
      const std::size_t first = static_cast<std::size_t>(done) % kKeys;
      if (c.put_many(std::span<const cache::cache_key>(keys).subspan(first, kBatch), std::span<const bytes_view>(views).subspan(first, kBatch)) != kBatch)
        throw std::runtime_error("redis bench: put_many failed: " + c.last_error());
    }
  };
  auto our_single_get = [&] {
    for (int i = 0; i < kSingle; ++i)
      if (!c.get(keys[static_cast<std::size_t>(i) % kKeys])) throw std::runtime_error("redis bench: miss: " + c.last_error());
  };

  struct row {
    const char* bench;
    const char* test;
    int pipeline, n, random_keys;
    std::function<void()> ours;
    double target;
  };
  const int nk = static_cast<int>(kKeys);
  const std::vector<row> rows = {
      {"redis multi_get 4KiB x64 1 key vs redis-benchmark", "get", 64, kGets, 0, our_multi_get_hot, 0.8},
      {"redis multi_get 4KiB x64 4096 keys vs redis-benchmark", "get", 64, kGets, nk, our_multi_get, 0.8},
      {"redis put_many 4KiB x64 vs redis-benchmark", "set", 64, kSets, nk, our_put_many, 0.0},
      {"redis get 4KiB no pipeline vs redis-benchmark", "get", 1, kSingle, nk, our_single_get, 0.0},
  };
  try {
    for (const auto& rw : rows) {
      double best_ours = 0, best_theirs = 0;
      rw.ours();  // warm-up: connections, server memory
      for (int round = 0; round < kRounds; ++round) {  // alternate so drift hits both alike
        best_ours = std::max(best_ours, rw.n / seconds_of(rw.ours));
        best_theirs = std::max(best_theirs, redis_benchmark_rps(rb, port, rw.test, rw.pipeline, rw.n, static_cast<int>(kValue), rw.random_keys));
      }
      if (best_theirs <= 0) {
        std::fprintf(stderr, "redis bench: could not parse redis-benchmark output, skipped %s\n", rw.bench);
        continue;
      }
      const nlohmann::json extra = {{"ours_ops_per_s", best_ours}, {"redis_benchmark_ops_per_s", best_theirs},
                                    {"value_bytes", kValue}, {"pipeline", rw.pipeline}, {"keys", rw.random_keys > 0 ? rw.random_keys : 1}};
      r.add(rw.bench, "ratio", best_ours / best_theirs, "x", extra, rw.target);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
  const auto s = c.stats();
  if (s.errors != 0) std::fprintf(stderr, "redis bench: %llu errors, last: %s\n", static_cast<unsigned long long>(s.errors), c.last_error().c_str());
}

}  // namespace jitembed::bench
