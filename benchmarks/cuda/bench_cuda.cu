// bench_cuda: normalize_hwc_to_chw (u8 [N,H,W,3] -> bf16 [N,3,H,W]) against cudaMemcpyAsync D2D of the
// same bytes read + written, side by side on one stream. Target: the kernel reaches >= 0.5x the copy's
// effective bandwidth (it is memory-bound; the transpose costs some coalescing).
#include <cstdio>

#include "bench_util.hpp"
#include "jitembed/cuda/buffer.hpp"
#include "jitembed/cuda/preprocess.cuh"

using namespace jitembed;

int main() {
  bench::reporter r;
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  cuda::stream s;
  const std::int64_t n = 64, h = 512, w = 512;
  tensor in = cuda::empty_device({n, h, w, 3}, dtype::u8, s);
  tensor out = cuda::empty_device({n, 3, h, w}, dtype::bf16, s);
  tensor copy_dst = cuda::empty_device({static_cast<std::int64_t>(in.nbytes() + out.nbytes()) / 2}, dtype::u8, s);
  tensor copy_src = cuda::empty_device({static_cast<std::int64_t>(in.nbytes() + out.nbytes()) / 2}, dtype::u8, s);
  JITEMBED_CUDA_CHECK(cudaMemsetAsync(in.data(), 7, in.nbytes(), s.get()));
  const float mean[3] = {0.5f, 0.5f, 0.5f}, stdev[3] = {0.5f, 0.5f, 0.5f};
  const auto p = cuda::normalize_params::from_mean_std(mean, stdev, 3);
  cuda::event a(cudaEventDefault), b(cudaEventDefault);
  auto time_ms = [&](auto&& fn) {
    fn();
    s.synchronize();
    float best = 1e30f;
    for (int i = 0; i < 20; ++i) {
      a.record(s);
      fn();
      b.record(s);
      b.synchronize();
      best = std::min(best, cuda::event::elapsed_ms(a, b));
    }
    return best;
  };
  const float kernel_ms = time_ms([&] { cuda::normalize_hwc_to_chw(in, out, p, s); });
  const float copy_ms = time_ms([&] { cuda::copy_async(copy_dst, copy_src, s); });
  const double bytes = static_cast<double>(in.nbytes() + out.nbytes());
  r.add("cuda/normalize_hwc_to_chw_bf16", "GB_per_s", bytes / (kernel_ms * 1e6), "GB/s");
  r.add("cuda/memcpy_d2d_same_bytes", "GB_per_s", 2 * copy_dst.nbytes() / (copy_ms * 1e6), "GB/s");
  r.add("cuda/normalize_vs_memcpy", "ratio", copy_ms / kernel_ms, "x", {}, 0.5);
  r.print();
  return 0;
}
