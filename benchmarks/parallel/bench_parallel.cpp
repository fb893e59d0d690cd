// bench_parallel: per-collective algorithm and bus bandwidth (nccl-tests definitions) for Gloo on CPU
// and, when built with CUDA, NCCL on the GPU; tensor-parallel MLP and Ulysses attention step times
// (forward + backward) against the single-rank reference, side by side in this process.
// Parts: gloo, tp_mlp, ulysses, nccl (no arguments: all). With --device cuda (CUDA builds): gemm (the
// layers' bf16 GEMMs vs a bare cublasGemmEx), tp_mlp and ulysses (steps on the GPU), nccl.
#include <cstdio>
#include <string_view>
#include <vector>

#include "bench_util.hpp"
#include "parallel/gloo_collectives.hpp"
#include "parallel/layer_steps.hpp"
#if defined(JITEMBED_HAS_NCCL)
#include "parallel/gpu_layers.hpp"
#include "parallel/nccl_collectives.hpp"
#endif

int main(int argc, char** argv) {
  using namespace jitembed::bench;
  reporter rep;
  std::vector<char*> args{argv[0]};
  bool on_cuda = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--device" && i + 1 < argc) {
      on_cuda = std::string_view(argv[++i]) == "cuda";
    } else {
      args.push_back(argv[i]);
    }
  }
  argc = static_cast<int>(args.size());
  argv = args.data();
  if (on_cuda) {
#if defined(JITEMBED_HAS_NCCL)
    if (jitembed::cuda::device_count() == 0) {
      std::printf("bench_parallel --device cuda: no CUDA device, skipped\n");
      return 0;
    }
    if (wanted(argc, argv, "gemm")) run_gpu_gemms(rep);
    if (wanted(argc, argv, "tp_mlp") || wanted(argc, argv, "ulysses")) run_gpu_steps(rep);
    if (wanted(argc, argv, "nccl")) {
      const std::size_t sizes[] = {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{256} << 20};
      run_nccl_collectives(rep, sizes);
    }
    rep.print();
    return 0;
#else
    std::fprintf(stderr, "bench_parallel: built without CUDA (JITEMBED_WITH_CUDA=OFF)\n");
    return 2;
#endif
  }
  if (wanted(argc, argv, "gloo")) {
    const int worlds[] = {2, 4};
    const std::size_t sizes[] = {std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{16} << 20};
    run_gloo_collectives(rep, worlds, sizes);
  }
  if (wanted(argc, argv, "tp_mlp")) run_tp_mlp_steps(rep);
  if (wanted(argc, argv, "ulysses")) run_ulysses_steps(rep);
#if defined(JITEMBED_HAS_NCCL)
  if (wanted(argc, argv, "nccl")) {
    const std::size_t sizes[] = {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{256} << 20};
    run_nccl_collectives(rep, sizes);
  }
#endif
  rep.print();
  return 0;
}
