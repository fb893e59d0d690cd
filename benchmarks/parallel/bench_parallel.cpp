// bench_parallel: per-collective algorithm and bus bandwidth (nccl-tests definitions) for Gloo on CPU
// and, when built with CUDA, NCCL on the GPU; tensor-parallel MLP and Ulysses attention step times
// (forward + backward) against the single-rank reference, side by side in this process.
// Parts: gloo, tp_mlp, ulysses, nccl (no arguments: all).
#include <cstdio>
#include <vector>

#include "bench_util.hpp"
#include "parallel/gloo_collectives.hpp"
#include "parallel/layer_steps.hpp"
#if defined(JITEMBED_HAS_NCCL)
#include "parallel/nccl_collectives.hpp"
#endif

int main(int argc, char** argv) {
  using namespace jitembed::bench;
  reporter rep;
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
