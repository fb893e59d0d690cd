// bench_cuda: normalize_hwc_to_chw (u8 [N,H,W,3] -> bf16 [N,3,H,W]) against cudaMemcpyAsync D2D of the
// same bytes read + written, side by side on one stream. Target: the kernel reaches >= 0.5x the copy's
// effective bandwidth (it is memory-bound; the transpose costs some coalescing).
// With the models component: image-latent on the GPU (cuda_image_latent::run, CPU tensors in and out, and the
// kernel alone) against the CPU reference model (one thread, as its run() is), 64 images at 256x256.
// Target: the GPU run() >= 10x the CPU model's images/s.
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench_util.hpp"
#include "jitembed/cuda/buffer.hpp"
#include "jitembed/cuda/preprocess.cuh"
#if defined(JITEMBED_HAS_MODELS)
#include "jitembed/models/cuda/image_latent.cuh"
#include "jitembed/models/image_latent.hpp"
#endif

using namespace jitembed;

#if defined(JITEMBED_HAS_MODELS)
namespace {
// image-latent rows: CPU model vs cuda_image_latent::run() vs image_latent_cuda() on device-resident input.
void bench_image_latent(bench::reporter& r, cuda::stream_ref s) {
  models::image_latent_options o;  // bucket 256, f32
  const std::int64_t n = 64, b = o.bucket;
  std::vector<tensor> batch;
  for (std::int64_t i = 0; i < n; ++i) {
    tensor t = tensor::empty({b, b, 3}, dtype::u8);
    for (std::size_t k = 0; k < t.nbytes(); ++k) t.data<std::uint8_t>()[k] = static_cast<std::uint8_t>(models::detail::splitmix64(k + i * 7919) >> 56);
    batch.push_back(std::move(t));
  }
  using clock = std::chrono::steady_clock;
  auto best_s = [](int reps, auto&& fn) {
    double best = 1e30;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count());
    }
    return best;
  };
  const models::image_latent cpu = models::image_latent::create(o).value();
  const models::cuda_image_latent gpu = models::cuda_image_latent::create(o).value();
  const double cpu_s = best_s(3, [&] { (void)cpu.run(batch).value(); });
  (void)gpu.run(batch).value();  // warm-up: context, memory pool, pinned staging
  const double gpu_s = best_s(20, [&] { (void)gpu.run(batch).value(); });
  tensor d_in = cuda::empty_device({n, b, b, 3}, dtype::u8, s);
  tensor d_out = cuda::empty_device({n, 4, b / 8, b / 8}, dtype::f32, s);
  JITEMBED_CUDA_CHECK(cudaMemsetAsync(d_in.data(), 99, d_in.nbytes(), s.get()));
  auto a = cuda::event::create(cudaEventDefault).value();
  auto e = cuda::event::create(cudaEventDefault).value();
  models::image_latent_cuda(d_in, d_out, s);
  float kernel_ms = 1e30f;
  for (int i = 0; i < 20; ++i) {
    a.record(s);
    models::image_latent_cuda(d_in, d_out, s);
    e.record(s);
    e.synchronize();
    kernel_ms = std::min(kernel_ms, cuda::event::elapsed_ms(a, e));
  }
  const double images = static_cast<double>(n);
  r.add("cuda/image_latent_cpu_model_1thread", "images_per_s", images / cpu_s, "images/s");
  r.add("cuda/image_latent_gpu_run", "images_per_s", images / gpu_s, "images/s");
  r.add("cuda/image_latent_gpu_kernel", "images_per_s", images / (kernel_ms * 1e-3), "images/s");
  r.add("cuda/image_latent_gpu_run_vs_cpu", "ratio", cpu_s / gpu_s, "x", {}, 10.0);
}
}  // namespace
#endif

int main(int argc, char** argv) {
  bench::command_line cli{"bench_cuda: the fused normalize kernel against a device-to-device copy (and image-latent GPU vs CPU)"};
  CLI11_PARSE(cli.app, argc, argv);
  bench::reporter r;
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  auto s = cuda::stream::create().value();
  const std::int64_t n = 64, h = 512, w = 512;
  tensor in = cuda::empty_device({n, h, w, 3}, dtype::u8, s);
  tensor out = cuda::empty_device({n, 3, h, w}, dtype::bf16, s);
  tensor copy_dst = cuda::empty_device({static_cast<std::int64_t>(in.nbytes() + out.nbytes()) / 2}, dtype::u8, s);
  tensor copy_src = cuda::empty_device({static_cast<std::int64_t>(in.nbytes() + out.nbytes()) / 2}, dtype::u8, s);
  JITEMBED_CUDA_CHECK(cudaMemsetAsync(in.data(), 7, in.nbytes(), s.get()));
  const float mean[3] = {0.5f, 0.5f, 0.5f}, stdev[3] = {0.5f, 0.5f, 0.5f};
  const auto p = cuda::normalize_params::from_mean_std(mean, stdev, 3);
  auto a = cuda::event::create(cudaEventDefault).value();
  auto b = cuda::event::create(cudaEventDefault).value();
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
#if defined(JITEMBED_HAS_MODELS)
  bench_image_latent(r, s);
#endif
  r.print();
  return 0;
}
