// bench_cache, memory part: hit-path gets/s of 4 KiB values from memory_cache on 1 thread and on 2
// threads side by side (the sharded locks should let the second thread add throughput).
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache_benches.hpp"
#include "jitembed/cache/key.hpp"
#include "jitembed/cache/memory_cache.hpp"

namespace jitembed::bench {

namespace {
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

void run_memory_cache_benchmarks(reporter& r) {
  using namespace jitembed::cache;
  constexpr std::size_t kValue = 4096;
  constexpr std::size_t kKeys = 16384;       // 64 MiB of values
  constexpr std::size_t kGetsPerThread = 1u << 18;
  constexpr std::size_t kShards = 16;
  constexpr int kDirectReps = 16;

  memory_cache c(std::size_t{256} << 20, kShards);
  std::vector<cache_key> keys;
  keys.reserve(kKeys);
  std::vector<std::byte> value(kValue);
  for (std::size_t i = 0; i < kKeys; ++i) {
    const std::string id = std::to_string(i);
    keys.push_back(make_key(key_inputs{"bench", "v1", "", as_bytes_view(id)}));
    for (std::size_t b = 0; b < kValue; b += 64) value[b] = static_cast<std::byte>(i + b);
    c.put(keys.back(), value);
  }
  // Per-thread random key orders, generated up front so the loop is get() only.
  std::vector<std::vector<std::uint32_t>> order(2, std::vector<std::uint32_t>(kGetsPerThread));
  for (std::size_t t = 0; t < order.size(); ++t) {
    std::mt19937 rng(static_cast<std::uint32_t>(t + 1));
    for (auto& o : order[t]) o = static_cast<std::uint32_t>(rng() % kKeys);
  }
  std::atomic<std::uint64_t> sink{0};
  std::atomic<std::uint64_t> missed{0};
  // CPU seconds per get of each run's slowest thread, kept as the best over runs: on a loaded machine the
  // wall-clock 2-thread figure depends on getting two cores; this one shows the cost of sharing the store.
  std::atomic<double> cpu_run{0};
  auto reader = [&](const std::vector<std::uint32_t>& ord) {
    const double c0 = thread_cpu_seconds();
    std::uint64_t acc = 0, miss = 0;
    for (std::uint32_t i : ord) {
      auto v = c.get(keys[i]);
      if (!v) {
        ++miss;
        continue;
      }
      acc += static_cast<std::uint64_t>(v->bytes[0]) + v->bytes.size();  // touch the value
    }
    const double per_get = (thread_cpu_seconds() - c0) / static_cast<double>(ord.size());
    double prev = cpu_run.load();
    while (per_get > prev && !cpu_run.compare_exchange_weak(prev, per_get)) {
    }
    sink.fetch_add(acc, std::memory_order_relaxed);
    missed.fetch_add(miss, std::memory_order_relaxed);
  };
  double cpu1 = 1e300, cpu2 = 1e300;
  auto one = [&] {
    cpu_run = 0;
    reader(order[0]);
    cpu1 = std::min(cpu1, cpu_run.load());
  };
  auto two = [&] {
    cpu_run = 0;
    std::thread other([&] { reader(order[1]); });
    reader(order[0]);
    other.join();
    cpu2 = std::min(cpu2, cpu_run.load());
  };
  const auto [t1, t2] = side_by_side(5, one, two);

  // Baseline without the store: the same two threads reading the same values in the same order through
  // pointers held up front (no lock, no map, no refcount). Its 2-vs-1 ratio is what this machine gives two
  // threads for this memory access pattern right now (other load included); the store is judged against it.
  std::vector<cached_value> held;
  held.reserve(kKeys);
  for (const auto& k : keys) held.push_back(*c.get(k));
  auto direct = [&](const std::vector<std::uint32_t>& ord) {
    std::uint64_t acc = 0;
    for (int rep = 0; rep < kDirectReps; ++rep)  // repeated: one pass is too short to time two threads
      for (std::uint32_t i : ord) acc += static_cast<std::uint64_t>(held[i].bytes[rep & 63]) + held[i].bytes.size();
    sink.fetch_add(acc, std::memory_order_relaxed);
  };
  const auto [b1, b2] = side_by_side(
      5, [&] { direct(order[0]); },
      [&] {
        std::thread other([&] { direct(order[1]); });
        direct(order[0]);
        other.join();
      });
  const double base_ratio = 2.0 * b1 / b2;
  const double gets1 = static_cast<double>(kGetsPerThread) / t1;
  const double gets2 = 2.0 * static_cast<double>(kGetsPerThread) / t2;
  const nlohmann::json extra = {{"value_bytes", kValue}, {"keys", kKeys}, {"shards", kShards},
                                {"hw_threads", std::thread::hardware_concurrency()}, {"misses", missed.load()}};
  r.add("cache/memory/get_4KiB/1_thread", "gets_per_s", gets1, "gets/s", extra);
  r.add("cache/memory/baseline_direct_reads/1_thread", "reads_per_s", static_cast<double>(kGetsPerThread) * kDirectReps / b1, "reads/s", extra);
  r.add("cache/memory/get_4KiB/2_threads", "gets_per_s", gets2, "gets/s", extra);
  r.add("cache/memory/get_4KiB/2_vs_1_threads", "ratio", gets2 / gets1, "x", extra);
  r.add("cache/memory/baseline_direct_reads/2_vs_1_threads", "ratio", base_ratio, "x", extra);
  r.add("cache/memory/get_4KiB/scaling_vs_baseline", "ratio", (gets2 / gets1) / base_ratio, "x", extra);
  r.add("cache/memory/get_4KiB/cpu_ns_per_get/1_thread", "ns", cpu1 * 1e9, "ns", extra);
  r.add("cache/memory/get_4KiB/cpu_ns_per_get/2_threads", "ns", cpu2 * 1e9, "ns", extra);
}

}  // namespace jitembed::bench
