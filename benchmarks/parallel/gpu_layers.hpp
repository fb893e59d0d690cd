#pragma once
// bench_parallel --device cuda: the tensor-parallel layers on the GPU (cuda_backend, bf16 with f32
// accumulation). (1) The TFLOP/s of the GEMMs the layers issue (forward, input gradient, weight gradient of
// a column-parallel linear) against a bare cublasGemmEx at the same shapes and types, side by side
// (target: ≥ 0.9×); (2) one TP-MLP step and (3) one Ulysses step at the NCCL world of this machine
// (nccl_thread_devices(): one rank per GPU), timed with CUDA events, best of a few.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "jitembed/cuda/stream.hpp"
#include "jitembed/parallel/cuda/backend.hpp"
#include "jitembed/parallel/nccl.hpp"
#include "jitembed/parallel/tensor_parallel.hpp"
#include "jitembed/parallel/ulysses.hpp"

namespace jitembed::bench {

namespace gpu_detail {

// Milliseconds per call of fn (enqueued on s), best of 3 batches of `iters` after a warm-up.
inline double event_ms(jitembed::cuda::stream_ref s, int iters, const std::function<void()>& fn) {
  fn();
  s.synchronize();
  auto a = jitembed::cuda::event::create(cudaEventDefault).value();
  auto b = jitembed::cuda::event::create(cudaEventDefault).value();
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    a.record(s);
    for (int i = 0; i < iters; ++i) fn();
    b.record(s);
    b.synchronize();
    best = std::min(best, static_cast<double>(jitembed::cuda::event::elapsed_ms(a, b)) / iters);
  }
  return best;
}

inline tensor device_randn(const parallel::cuda_backend& be, const shape& s, std::uint32_t seed, jitembed::dtype t) {
  tensor h = tensor::empty(s, dtype::f32);
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::uint64_t i = 0; i < h.numel(); ++i) {
    x = x * 1664525u + 1013904223u;
    h.data<float>()[i] = static_cast<float>(static_cast<std::int32_t>(x >> 8) % 2001 - 1000) / 1000.0f;
  }
  return be.upload_as(h, t);
}

// Row-major C[m,n] = op(A)·op(B) (+ beta·C) as cuBLAS column-major with the operands swapped (gemm.hpp's mapping).
inline void bare_gemm(cublasHandle_t h, bool ta, bool tb, int m, int n, int k, const void* a, int lda, const void* b,
                      int ldb, float beta, void* c, cudaDataType_t ct, int ldc) {
  const float alpha = 1.0f;
  JITEMBED_CUBLAS_CHECK(cublasGemmEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
                                     b, CUDA_R_16BF, ldb, a, CUDA_R_16BF, lda, &beta, c, ct, ldc, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
}

}  // namespace gpu_detail

inline void run_gpu_gemms(reporter& rep) {
  using namespace parallel;
  JITEMBED_CUDA_CHECK(cudaSetDevice(0));
  auto s = jitembed::cuda::stream::create().value();
  const cuda_backend be = cuda_backend::create(s, dtype::bf16).value();
  const std::int64_t t = 8192, h = 4096, f = 16384;  // tokens, hidden, ffn: fc1 of a TP-MLP at TP = 1
  const tensor x = gpu_detail::device_randn(be, {t, h}, 1, dtype::bf16);
  const tensor w = gpu_detail::device_randn(be, {f, h}, 2, dtype::bf16);
  const tensor dy = gpu_detail::device_randn(be, {t, f}, 3, dtype::bf16);
  tensor y = be.empty({t, f}, dtype::bf16), dx = be.empty({t, h}, dtype::bf16), dw = be.zeros({f, h}, dtype::f32);
  const tensor_view dxv = dx, dwv = dw;
  const double flops = 2.0 * static_cast<double>(t) * static_cast<double>(h) * static_cast<double>(f);
  cublasHandle_t bare = be.blas().get();
  const int T = static_cast<int>(t), H = static_cast<int>(h), F = static_cast<int>(f);
  struct gemm_case {
    const char* name;
    std::function<void()> layer, raw;
  };
  const gemm_case cases[] = {
      {"forward y = x·wT", [&] { be.linear_forward(x, w, nullptr, y); },
       [&] { gpu_detail::bare_gemm(bare, false, true, T, F, H, x.data(), H, w.data(), H, 0.0f, y.data(), CUDA_R_16BF, F); }},
      {"input grad dx = dy·w", [&] { be.linear_backward(x, w, dy, &dxv, nullptr, nullptr); },
       [&] { gpu_detail::bare_gemm(bare, false, false, T, H, F, dy.data(), F, w.data(), H, 0.0f, dx.data(), CUDA_R_16BF, H); }},
      {"weight grad dw += dyT·x (f32)", [&] { be.linear_backward(x, w, dy, nullptr, &dwv, nullptr); },
       [&] { gpu_detail::bare_gemm(bare, true, false, F, H, T, dy.data(), F, x.data(), H, 1.0f, dw.data(), CUDA_R_32F, H); }},
  };
  for (const auto& c : cases) {
    double layer_ms = 1e300, raw_ms = 1e300;
    for (int round = 0; round < 2; ++round) {  // interleaved: the machine's state drifts between them alike
      layer_ms = std::min(layer_ms, gpu_detail::event_ms(s, 10, c.layer));
      raw_ms = std::min(raw_ms, gpu_detail::event_ms(s, 10, c.raw));
    }
    const std::string name = std::string("gpu_gemm/") + c.name;
    rep.add(name, "tflops", flops / layer_ms / 1e9, "TFLOP/s",
            {{"bare_cublas_tflops", flops / raw_ms / 1e9}, {"m_n_k", {t, f, h}}, {"dtype", "bf16, f32 compute"}});
    rep.add(name + "/vs_bare_cublasGemmEx", "ratio", raw_ms / layer_ms, "x", {}, 0.9);
  }
}

// One TP-MLP step (forward + backward, bf16) and one Ulysses step on every rank of the NCCL world of this
// machine; the slowest rank's time (rank 0 reports; ranks step together through the collectives).
inline void run_gpu_steps(reporter& rep) {
  using namespace parallel;
  const std::vector<int> devs = nccl_thread_devices();
  const int n = static_cast<int>(devs.size());
  auto st = shared_store(hash_store());
  std::mutex mu;
  double mlp_ms = 0, uly_ms = 0;
  std::uint64_t mlp_bytes = 0, uly_bytes = 0;
  const std::int64_t tokens = 8192, hidden = 4096, ffn = 16384;
  const std::int64_t batch = 2, seq = 4096, heads = 16, dim = 128;
  std::vector<std::thread> threads;
  std::string failure;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        JITEMBED_CUDA_CHECK(cudaSetDevice(devs[static_cast<std::size_t>(r)]));
        auto comm = nccl_communicator::create(st, r, n, devs[static_cast<std::size_t>(r)]).value();
        auto s = jitembed::cuda::stream::create().value();
        comm.set_stream(s.get());
        const cuda_backend be = cuda_backend::create(s, dtype::bf16).value();
        auto mlp = tensor_parallel_mlp<nccl_communicator, cuda_backend>::create(comm, hidden, ffn, {}, be).value();
        const tensor x = gpu_detail::device_randn(be, {tokens, hidden}, 10, dtype::bf16);
        const tensor dy = gpu_detail::device_randn(be, {tokens, hidden}, 11, dtype::bf16);
        comm.stats().reset();
        const double m = gpu_detail::event_ms(s, 5, [&] {
          (void)mlp.forward(x).value();
          (void)mlp.backward(dy).value();
        });
        const std::uint64_t mb = comm.stats().total_bytes() / 16;  // 1 warm-up + 3 × 5 steps
        auto attn = ulysses_attention<nccl_communicator, cuda_backend>::create(comm, static_cast<int>(heads),
                                                                              {.causal = true}, be)
                        .value();
        const shape ls{batch, seq / n, heads, dim};
        const tensor q = gpu_detail::device_randn(be, ls, 20, dtype::bf16), k = gpu_detail::device_randn(be, ls, 21, dtype::bf16);
        const tensor v = gpu_detail::device_randn(be, ls, 22, dtype::bf16), go = gpu_detail::device_randn(be, ls, 23, dtype::bf16);
        comm.stats().reset();
        const double u = gpu_detail::event_ms(s, 3, [&] {
          (void)attn.forward(q, k, v).value();
          (void)attn.backward(go).value();
        });
        const std::uint64_t ub = comm.stats()[coll::all_to_all].bytes / 10;  // 1 + 3 × 3 steps
        comm.synchronize().value();
        std::lock_guard lock(mu);
        mlp_ms = std::max(mlp_ms, m);
        uly_ms = std::max(uly_ms, u);
        if (r == 0) {
          mlp_bytes = mb;
          uly_bytes = ub;
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        failure += "rank " + std::to_string(r) + ": " + e.what() + "\n";
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!failure.empty()) {
    std::fprintf(stderr, "gpu steps failed:\n%s", failure.c_str());
    return;
  }
  const double mlp_flops = 3.0 * 2.0 * 2.0 * static_cast<double>(tokens * hidden * ffn) / n;
  rep.add("gpu_tp_mlp/tp" + std::to_string(n), "step_ms", mlp_ms, "ms",
          {{"ranks", n}, {"tokens", tokens}, {"hidden", hidden}, {"ffn", ffn}, {"dtype", "bf16"},
           {"tflops_per_rank", mlp_flops / mlp_ms / 1e9}, {"comm_bytes_per_rank", mlp_bytes}});
  rep.add("gpu_ulysses/sp" + std::to_string(n), "step_ms", uly_ms, "ms",
          {{"ranks", n}, {"batch", batch}, {"seq", seq}, {"heads", heads}, {"head_dim", dim}, {"dtype", "bf16"},
           {"all_to_all_bytes_per_rank", uly_bytes}});
}

inline void run_gpu_layers(reporter& rep) {
  if (jitembed::cuda::device_count() == 0) {
    std::printf("gpu layers: no CUDA device, skipped\n");
    return;
  }
  run_gpu_gemms(rep);
  run_gpu_steps(rep);
}

}  // namespace jitembed::bench
