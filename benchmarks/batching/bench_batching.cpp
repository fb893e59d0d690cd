// Dynamic batcher overhead: submit -> complete per request with a no-op runner, measured side by side
// with the same number of hand-offs through jitembed::thread_pool (one task + future per request).
#include <atomic>
#include <cstdio>
#include <future>
#include <span>
#include <vector>

#include "bench_util.hpp"
#include "jitembed/batching.hpp"
#include "jitembed/core/thread_pool.hpp"

using namespace jitembed;
using namespace jitembed::batching;
using namespace std::chrono_literals;

namespace {

void noop_runner(std::span<int> in, std::span<result<int>> out) {
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = in[i];
}

batcher_options make_options(std::size_t max_batch, std::chrono::microseconds delay) {
  batcher_options o;
  o.max_batch_size = max_batch;
  o.max_queue_delay = delay;
  o.max_queue_size = 0;
  o.runner_threads = 1;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  bench::command_line cli{"bench_batching: dynamic batcher submit -> complete overhead per request, against thread_pool hand-offs"};
  CLI11_PARSE(cli.app, argc, argv);
  bench::reporter rep;
  thread_pool pool(1);

  // 1. Round trip: one request at a time (submit, wait), batch size 1, no delay.
  {
    constexpr int kN = 20000;
    auto b = dynamic_batcher<int, int>::create(make_options(1, 0us), noop_runner).value();
    long sink = 0;
    auto [tb, tp] = bench::side_by_side(
        5,
        [&] {
          for (int i = 0; i < kN; ++i) sink += *b.submit(i).get();
        },
        [&] {
          for (int i = 0; i < kN; ++i) sink += pool.submit([i] { return i; }).get();
        });
    rep.add("batching/round_trip/batcher", "ns_per_request", tb / kN * 1e9, "ns");
    rep.add("batching/round_trip/thread_pool", "ns_per_request", tp / kN * 1e9, "ns");
    rep.add("batching/round_trip", "thread_pool_over_batcher", tp / tb, "x", {{"requests", kN}, {"sink", sink % 7}});
  }

  // 2. Throughput: submit a burst with futures, then wait for all; batches of up to 64.
  for (std::size_t max_batch : {std::size_t{1}, std::size_t{64}}) {
    constexpr int kN = 100000;
    auto b = dynamic_batcher<int, int>::create(make_options(max_batch, 50us), noop_runner).value();
    std::vector<std::future<result<int>>> bf;
    std::vector<std::future<int>> pf;
    bf.reserve(kN);
    pf.reserve(kN);
    auto [tb, tp] = bench::side_by_side(
        3,
        [&] {
          bf.clear();
          for (int i = 0; i < kN; ++i) bf.push_back(b.submit(i));
          for (auto& f : bf) (void)f.get();
        },
        [&] {
          pf.clear();
          for (int i = 0; i < kN; ++i) pf.push_back(pool.submit([i] { return i; }));
          for (auto& f : pf) (void)f.get();
        });
    const std::string name = "batching/burst_futures/max_batch_" + std::to_string(max_batch);
    rep.add(name + "/batcher", "ns_per_request", tb / kN * 1e9, "ns");
    rep.add(name + "/thread_pool", "ns_per_request", tp / kN * 1e9, "ns");
    rep.add(name, "thread_pool_over_batcher", tp / tb, "x", {{"requests", kN}});
  }

  // 3. Throughput with callbacks (no promise/future per request) and with per-caller ordering.
  for (bool ordered : {false, true}) {
    constexpr int kN = 100000;
    auto b = dynamic_batcher<int, int>::create(make_options(64, 50us), noop_runner).value();
    auto run_batcher = [&] {
      std::atomic<int> left{kN};
      std::promise<void> done;
      for (int i = 0; i < kN; ++i)
        b.submit(i, {.caller_id = ordered ? 1u : 0u}, [&](result<int>) {
          if (left.fetch_sub(1) == 1) done.set_value();
        });
      done.get_future().wait();
    };
    auto run_pool = [&] {
      std::vector<std::future<void>> fs;
      fs.reserve(kN);
      for (int i = 0; i < kN; ++i) fs.push_back(pool.submit([] {}));
      for (auto& f : fs) f.get();
    };
    auto [tb, tp] = bench::side_by_side(3, run_batcher, run_pool);
    const std::string name = std::string("batching/burst_callbacks") + (ordered ? "/ordered" : "");
    rep.add(name + "/batcher", "ns_per_request", tb / kN * 1e9, "ns");
    rep.add(name, "thread_pool_over_batcher", tp / tb, "x", {{"requests", kN}});
    if (!ordered) {
      const auto s = b.stats();
      double mean = 0;
      std::uint64_t n = 0;
      for (std::size_t k = 0; k < s.batch_sizes.size(); ++k) {
        mean += static_cast<double>(k * s.batch_sizes[k]);
        n += s.batch_sizes[k];
      }
      rep.add(name, "mean_batch_size", n ? mean / static_cast<double>(n) : 0.0, "requests");
    }
  }
  rep.print();
}
