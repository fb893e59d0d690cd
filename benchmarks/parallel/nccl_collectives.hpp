// NCCL collective bandwidth as nccl-tests reports it: per collective and size, the time of one call (CUDA
// events over N iterations after a warm-up), algorithm bandwidth = size / time and bus bandwidth = algbw ×
// bus_factor. One thread per rank on this machine's GPUs (parallel::nccl_thread_devices()).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "jitembed/cuda/buffer.hpp"
#include "jitembed/cuda/stream.hpp"
#include "jitembed/parallel/nccl.hpp"

namespace jitembed::bench {

namespace nccl_bench_detail {

// Enqueues one call of `c` on every rank; `size` follows nccl-tests (the buffer for all_reduce and
// broadcast, the gathered output, the scattered input, the all-to-all send buffer).
inline result<void> issue(parallel::nccl_communicator& comm, parallel::coll c, const tensor_view& send,
                          const tensor_view& recv, std::uint64_t count) {
  const auto n = static_cast<std::uint64_t>(comm.size());
  auto head = [](const tensor_view& v, std::uint64_t k) {
    return tensor_view(v.data(), v.dtype(), shape{static_cast<std::int64_t>(k)}, v.device());
  };
  switch (c) {
    case parallel::coll::all_reduce: return comm.all_reduce(head(recv, count), parallel::reduce_op::sum);
    case parallel::coll::all_gather: return comm.all_gather(head(send, count / n), head(recv, count));
    case parallel::coll::reduce_scatter:
      return comm.reduce_scatter(head(send, count), head(recv, count / n), parallel::reduce_op::sum);
    case parallel::coll::broadcast: return comm.broadcast(head(recv, count), 0);
    case parallel::coll::all_to_all: return comm.all_to_all(head(send, count), head(recv, count));
    default: break;
  }
  return fail(errc::invalid_argument, "nccl bench: not a collective");
}

}  // namespace nccl_bench_detail

inline void run_nccl_collectives(reporter& rep, std::span<const std::size_t> sizes_bytes) {
  using parallel::coll;
  const std::vector<int> devs = parallel::nccl_thread_devices();
  if (devs.empty() || sizes_bytes.empty()) {
    std::printf("nccl collectives: no CUDA device, skipped\n");
    return;
  }
  const int n = static_cast<int>(devs.size());
  const coll kinds[] = {coll::all_reduce, coll::all_gather, coll::reduce_scatter, coll::broadcast, coll::all_to_all};
  constexpr std::size_t kinds_n = sizeof(kinds) / sizeof(kinds[0]);
  const std::size_t sizes_n = sizes_bytes.size();
  // f32 elements per size: a multiple of the world size, so every chunk is whole.
  std::vector<std::uint64_t> counts(sizes_n);
  std::uint64_t max_count = 0;
  for (std::size_t s = 0; s < sizes_n; ++s) {
    const std::uint64_t c = std::max<std::uint64_t>(sizes_bytes[s] / 4 / static_cast<std::uint64_t>(n), 1);
    counts[s] = c * static_cast<std::uint64_t>(n);
    max_count = std::max(max_count, counts[s]);
  }

  std::vector<double> seconds(kinds_n * sizes_n, 0.0);  // slowest rank's time per call
  std::mutex mu;
  std::string failure;
  auto st = parallel::shared_store(parallel::hash_store());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        const int dev = devs[static_cast<std::size_t>(r)];
        JITEMBED_CUDA_CHECK(cudaSetDevice(dev));
        auto comm = parallel::nccl_communicator::create(st, r, n, dev, parallel::comm_options{std::chrono::seconds(60)}).value();
        {
          const jitembed::cuda::stream_ref s(comm.stream());
          tensor send = jitembed::cuda::empty_device(shape{static_cast<std::int64_t>(max_count)}, dtype::f32, s, dev);
          tensor recv = jitembed::cuda::empty_device(shape{static_cast<std::int64_t>(max_count)}, dtype::f32, s, dev);
          JITEMBED_CUDA_CHECK(cudaMemsetAsync(send.data(), 0, send.nbytes(), s.get()));
          JITEMBED_CUDA_CHECK(cudaMemsetAsync(recv.data(), 0, recv.nbytes(), s.get()));
          auto start = jitembed::cuda::event::create(cudaEventDefault).value();
          auto stop = jitembed::cuda::event::create(cudaEventDefault).value();
          for (std::size_t si = 0; si < sizes_n; ++si) {
            const std::uint64_t bytes = counts[si] * 4;
            const int iters = static_cast<int>(std::clamp<std::uint64_t>((std::uint64_t{1} << 30) / bytes, 5, 50));
            for (std::size_t k = 0; k < kinds_n; ++k) {
              for (int i = 0; i < 5; ++i) nccl_bench_detail::issue(comm, kinds[k], send, recv, counts[si]).value();
              comm.barrier().value();  // every rank starts the timed loop together
              start.record(s);
              for (int i = 0; i < iters; ++i) nccl_bench_detail::issue(comm, kinds[k], send, recv, counts[si]).value();
              stop.record(s);
              comm.synchronize().value();
              const double t = jitembed::cuda::event::elapsed_ms(start, stop) / 1e3 / iters;
              std::lock_guard lock(mu);
              seconds[k * sizes_n + si] = std::max(seconds[k * sizes_n + si], t);
            }
          }
          comm.synchronize().value();
        }  // buffers are freed on the comm's stream before it goes
        comm.synchronize().value();
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        if (failure.empty()) failure = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!failure.empty()) {
    std::printf("nccl collectives failed: %s\n", failure.c_str());
    return;
  }

  int version = 0;
  (void)ncclGetVersion(&version);
  for (std::size_t k = 0; k < kinds_n; ++k) {
    for (std::size_t si = 0; si < sizes_n; ++si) {
      const double bytes = static_cast<double>(counts[si] * 4);
      const double t = seconds[k * sizes_n + si];
      const double algbw = t > 0 ? bytes / t / 1e9 : 0.0;
      const double busbw = algbw * parallel::bus_factor(kinds[k], n);
      const std::string name = "nccl/" + std::string(to_string(kinds[k])) + "/n" + std::to_string(n) + "/" +
                               std::to_string(sizes_bytes[si] >> 10) + "KiB";
      rep.add(name, "busbw", busbw, "GB/s",
              {{"backend", "nccl"}, {"op", to_string(kinds[k])}, {"ranks", n}, {"size_bytes", bytes},
               {"time_us", t * 1e6}, {"algbw_GBps", algbw}, {"nccl_version", version}});
    }
  }
}

}  // namespace jitembed::bench
