#pragma once
// bench_parallel --device cuda sdpa: cuDNN's fused attention (cudnn_sdpa) at S = 65,536, bf16, D = 80 (the
// Qwen ViT's head size), not causal (an image's patches see each other), B 1: forward + backward time as
// tokens/s, and the peak device memory of the step — the device pool's high-water mark (cudaMallocAsync:
// every tensor and the workspace) and memory_account's, against 1 GiB. Two head counts: 16 (the ViT's, where
// q, k, v, out, dout, dq, dk, dv alone are 1.25 GiB: the check is the memory beyond them) and 4 (a Ulysses
// SP=4 rank's share of them: the whole step within 1 GiB). benchmarks/parallel/sdpa_torch.py runs PyTorch's
// scaled_dot_product_attention at the same shapes and compares (scripts/gpu-check.sh).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "bench_util.hpp"
#include "jitembed/core/memory_account.hpp"
#include "jitembed/parallel/cuda/backend.hpp"
#include "jitembed/parallel/cuda/cudnn_sdpa.hpp"
#include "parallel/gpu_layers.hpp"

namespace jitembed::bench {

// false when a configuration failed (its error is reported as a JSON line too).
inline bool run_gpu_sdpa(reporter& rep) {
  using namespace parallel;
  JITEMBED_CUDA_CHECK(cudaSetDevice(0));
  auto s = jitembed::cuda::stream::create().value();
  const cuda_backend be = cuda_backend::create(s, dtype::bf16).value();
  auto sdpa = cudnn_sdpa::create(s).value();
  cudaMemPool_t pool = nullptr;
  JITEMBED_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
  const std::int64_t b = 1, seq = 65536, dim = 80;
  bool ok = true;
  for (const std::int64_t heads : {16, 4}) {
    const std::string name = "gpu_sdpa/cudnn/s65536_h" + std::to_string(heads) + "_d80";
    try {
      s.synchronize();
      std::uint64_t zero = 0;
      JITEMBED_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
      const memory_account account;
      double ms = 0;
      std::uint64_t pool_peak = 0;
      {
        const memory_scope scope(account, "sdpa");
        const shape sh{b, seq, heads, dim};
        const tensor q = gpu_detail::device_randn(be, sh, 1, dtype::bf16), k = gpu_detail::device_randn(be, sh, 2, dtype::bf16);
        const tensor v = gpu_detail::device_randn(be, sh, 3, dtype::bf16), dout = gpu_detail::device_randn(be, sh, 4, dtype::bf16);
        tensor out = be.empty(sh, dtype::bf16), dq = be.empty(sh, dtype::bf16), dk = be.empty(sh, dtype::bf16);
        tensor dv = be.empty(sh, dtype::bf16), lse = be.empty(shape{b, heads, seq}, dtype::f32);
        ms = gpu_detail::event_ms(s, 2, [&] {
          sdpa.forward(q, k, v, false, out, lse).value();
          sdpa.backward(q, k, v, out, dout, lse, false, dq, dk, dv).value();
        });
        s.synchronize();
        JITEMBED_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &pool_peak));
      }
      const memory_usage acc = account.usage(memory_kind::device);
      const std::uint64_t io = 8 * static_cast<std::uint64_t>(b * seq * heads * dim) * 2;  // q k v out dout dq dk dv
      const std::uint64_t work = pool_peak > io ? pool_peak - io : 0;
      const double tokens = static_cast<double>(b * seq);
      // fwd 4·S²·D·H flops, bwd 2.5× that (dq, dk, dv and the recomputed scores): the usual FA accounting
      const double flops = 3.5 * 4.0 * static_cast<double>(seq) * static_cast<double>(seq) * dim * heads * b;
      rep.add(name, "tokens_per_s", tokens / (ms / 1e3), "tokens/s",
              {{"step_ms", ms}, {"batch", b}, {"seq", seq}, {"heads", heads}, {"head_dim", dim}, {"causal", false},
               {"dtype", "bf16, f32 softmax"}, {"tflops", flops / ms / 1e9}, {"pool_peak_bytes", pool_peak},
               {"account_peak_bytes", acc.peak}, {"io_bytes", io}, {"work_bytes", work},
               {"workspace_bytes", sdpa.max_workspace_bytes()}, {"graphs", sdpa.cached_graphs()}});
      // ≤ 1 GiB as a ratio ≥ 1: the memory beyond the step's own tensors at 16 heads, all of it at 4 heads
      const std::uint64_t checked = heads == 16 ? work : pool_peak;
      rep.add(name + (heads == 16 ? "/work_bytes_within_1GiB" : "/peak_bytes_within_1GiB"), "ratio",
              static_cast<double>(kGiB) / static_cast<double>(std::max<std::uint64_t>(checked, 1)), "x",
              {{"bytes", checked}, {"limit_bytes", kGiB}}, 1.0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s failed: %s\n", name.c_str(), e.what());
      rep.add(name, "failed", 1, "", {{"error", e.what()}});
      ok = false;
    }
  }
  return ok;
}

}  // namespace jitembed::bench
