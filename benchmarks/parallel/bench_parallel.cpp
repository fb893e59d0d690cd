// bench_parallel: per-collective algorithm and bus bandwidth (nccl-tests definitions) for Gloo on CPU
// and, when built with CUDA, NCCL on the GPU; tensor-parallel MLP and Ulysses attention step times
// (forward + backward) against the single-rank reference, side by side in this process.
// Parts: gloo, tp_mlp, ulysses, attention (blockwise vs exact, one thread), memory (peak bytes per rank and the
// longest sequence under a budget: Ulysses SP=4 vs a replicated full sequence), hybrid (the hybrid_parallel example's
// step: per-module layouts vs uniform TP, replicated and the public system's boundary), nccl (no arguments: all). With
// --device cuda (CUDA builds): gemm (the layers' bf16 GEMMs vs a bare cublasGemmEx), tp_mlp and ulysses (steps on the
// GPU), nccl, sdpa (cuDNN's fused attention at S 65,536: tokens/s and peak device memory).
#include <cstdio>
#include <string_view>
#include <vector>

#include "bench_util.hpp"
#include "parallel/blockwise_attention.hpp"
#include "parallel/encoder_memory.hpp"
#include "parallel/gloo_collectives.hpp"
#include "parallel/hybrid_arms.hpp"
#include "parallel/layer_steps.hpp"
#if defined(JITEMBED_HAS_NCCL)
#include "parallel/gpu_layers.hpp"
#include "parallel/nccl_collectives.hpp"
#endif
#if defined(JITEMBED_HAS_CUDNN)
#include "parallel/gpu_sdpa.hpp"
#endif

int main(int argc, char** argv) {
  using namespace jitembed::bench;
  command_line cli{"bench_parallel: Gloo / NCCL collectives, tensor-parallel MLP and Ulysses attention steps",
                   {"gloo", "tp_mlp", "ulysses", "attention", "memory", "hybrid", "nccl", "gemm", "sdpa"}};
  std::string device = "cpu";
  cli.app.add_option("--device", device, "cpu, or cuda (CUDA builds: gemm, tp_mlp, ulysses, nccl on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  bool hybrid_small = false;
  cli.app.add_flag("--hybrid-small", hybrid_small, "hybrid: 64 image tokens instead of 1024 (the ctest)");
  CLI11_PARSE(cli.app, argc, argv);
  reporter rep;
  if (device == "cuda") {
#if defined(JITEMBED_HAS_NCCL)
    if (jitembed::cuda::device_count() == 0) {
      std::printf("bench_parallel --device cuda: no CUDA device, skipped\n");
      return 0;
    }
    if (cli.wanted("gemm")) run_gpu_gemms(rep);
    if (cli.wanted("tp_mlp") || cli.wanted("ulysses")) run_gpu_steps(rep);
    if (cli.wanted("nccl")) {
      const std::size_t sizes[] = {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{256} << 20};
      run_nccl_collectives(rep, sizes);
    }
    bool ok = true;
    if (cli.wanted("sdpa")) {
#if defined(JITEMBED_HAS_CUDNN)
      ok = run_gpu_sdpa(rep);
#else
      std::fprintf(stderr, "bench_parallel: sdpa needs the cudnn component (JITEMBED_WITH_CUDNN=ON)\n");
      ok = false;
#endif
    }
    rep.print();
    return ok ? 0 : 1;
#else
    std::fprintf(stderr, "bench_parallel: built without CUDA (JITEMBED_WITH_CUDA=OFF)\n");
    return 2;
#endif
  }
  if (cli.wanted("gloo")) {
    const int worlds[] = {2, 4};
    const std::size_t sizes[] = {std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{16} << 20};
    run_gloo_collectives(rep, worlds, sizes);
  }
  if (cli.wanted("tp_mlp")) run_tp_mlp_steps(rep);
  if (cli.wanted("ulysses")) run_ulysses_steps(rep);
  if (cli.wanted("attention")) run_blockwise_attention(rep);
  if (cli.wanted("memory")) run_encoder_memory(rep);
  int code = 0;
  if (cli.wanted("hybrid")) code = run_hybrid_arms(rep, hybrid_small);
#if defined(JITEMBED_HAS_NCCL)
  if (cli.wanted("nccl")) {
    const std::size_t sizes[] = {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{256} << 20};
    run_nccl_collectives(rep, sizes);
  }
#endif
  rep.print();
  return code;
}
