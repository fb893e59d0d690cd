// bench_parallel, part 1: Gloo collectives on CPU (ranks as threads over loopback TCP), reported with
// nccl-tests' definitions: algbw = size / time, busbw = algbw × bus_factor (all_reduce 2(n−1)/n,
// all_gather / reduce_scatter / all_to_all (n−1)/n, broadcast 1). The time is rank 0's mean over the
// iterations after a warm-up; collectives are synchronous, so every rank finishes within one step of it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "jitembed/parallel/gloo.hpp"

namespace jitembed::bench {

// Runs fn(comm) on n ranks (threads); returns what rank 0's fn returned.
template <class F>
double on_gloo_ranks(int n, F fn) {
  auto st = parallel::shared_store(parallel::hash_store());
  std::vector<std::thread> threads;
  std::vector<double> out(static_cast<std::size_t>(n), 0.0);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = parallel::gloo_communicator::create(st, r, n).value();
      out[static_cast<std::size_t>(r)] = fn(comm);
    });
  }
  for (auto& t : threads) t.join();
  return out[0];
}

inline void run_gloo_collectives(reporter& rep, std::span<const int> world_sizes, std::span<const std::size_t> sizes_bytes) {
  using parallel::coll;
  const coll ops[] = {coll::all_reduce, coll::all_gather, coll::reduce_scatter, coll::broadcast, coll::all_to_all};
  for (int n : world_sizes) {
    for (std::size_t bytes : sizes_bytes) {
      for (coll op : ops) {
        const std::int64_t count = static_cast<std::int64_t>(bytes / sizeof(float)) / n * n;  // divisible by n
        const int iters = bytes >= (std::size_t{8} << 20) ? 5 : bytes >= (std::size_t{1} << 20) ? 20 : 100;
        const double seconds = on_gloo_ranks(n, [&](parallel::gloo_communicator& c) {
          std::vector<float> a(static_cast<std::size_t>(count), 1.0f), b(static_cast<std::size_t>(count), 0.0f);
          const tensor_view full(a.data(), dtype::f32, shape{count});
          const tensor_view out(b.data(), dtype::f32, shape{count});
          const tensor_view part(a.data(), dtype::f32, shape{count / n});
          const tensor_view part_out(b.data(), dtype::f32, shape{count / n});
          auto step = [&] {
            switch (op) {
              case coll::all_reduce: c.all_reduce(full, parallel::reduce_op::sum).value(); break;
              case coll::all_gather: c.all_gather(part, out).value(); break;
              case coll::reduce_scatter: c.reduce_scatter(full, part_out, parallel::reduce_op::sum).value(); break;
              case coll::broadcast: c.broadcast(full, 0).value(); break;
              case coll::all_to_all: c.all_to_all(full, out).value(); break;
              default: break;
            }
          };
          for (int i = 0; i < std::min(iters, 10); ++i) step();  // warm-up: fresh connections, first-use setup
          c.barrier().value();
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < iters; ++i) step();
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
          c.barrier().value();
          return s;
        });
        const double size = static_cast<double>(count) * sizeof(float);
        const double algbw = size / seconds / 1e9;
        const double busbw = algbw * parallel::bus_factor(op, n);
        const std::string name = "gloo/" + std::string(to_string(op)) + "/n" + std::to_string(n) + "/" +
                                 std::to_string(bytes >> 10) + "KiB";
        rep.add(name, "busbw", busbw, "GB/s",
                {{"backend", "gloo"}, {"op", to_string(op)}, {"ranks", n}, {"size_bytes", size},
                 {"time_us", seconds * 1e6}, {"algbw_GBps", algbw}});
      }
    }
  }
}

}  // namespace jitembed::bench
