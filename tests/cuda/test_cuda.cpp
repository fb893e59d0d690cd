// CUDA component: RAII, pinned pool, preprocessing kernel vs a CPU reference. Skips without a device.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <utility>

#include "jitembed/cuda.hpp"
#include "kernels.hpp"

using namespace jitembed;

namespace {
bool have_device() {
  if (cuda::device_count() > 0) return true;
  std::printf("no CUDA device: skipping\n");
  return false;
}
}  // namespace

TEST_CASE("device_count never throws without a driver") { CHECK(cuda::device_count() >= 0); }

// The factories return the CUDA error their constructors used to throw (same errc, cuda::to_errc).
TEST_CASE("stream, event and buffer factories report CUDA failures in the result") {
  auto is_cuda_error = [](const auto& r) {
    return !r.has_value() && r.code() != errc::ok && r.error().message.rfind("cuda: ", 0) == 0;
  };
  // Zero bytes: an empty buffer, no CUDA call (so also without a device).
  auto empty_pinned = cuda::pinned_buffer::create(0);
  REQUIRE(empty_pinned);
  CHECK(empty_pinned->data() == nullptr);
  CHECK(cuda::device_buffer::create(0, cuda::stream_ref())->size() == 0);
  if (cuda::device_count() == 0) {
    // No device or no driver: every factory fails with the CUDA error, none throws.
    CHECK(is_cuda_error(cuda::stream::create()));
    CHECK(cuda::stream::create().code() == errc::internal);
    CHECK(is_cuda_error(cuda::event::create()));
    CHECK(is_cuda_error(cuda::device_buffer::create(64, cuda::stream_ref())));
    CHECK(is_cuda_error(cuda::pinned_buffer::create(64)));
    return;
  }
  // Flags CUDA rejects are the caller's input: the error comes back in the result.
  CHECK(is_cuda_error(cuda::stream::create(0xFFFFu)));
  CHECK(is_cuda_error(cuda::event::create(0xFFFFu)));
  CHECK(is_cuda_error(cuda::pinned_buffer::create(64, 0xFFFFu)));
  auto s = cuda::stream::create().value();
  CHECK(is_cuda_error(cuda::device_buffer::create(std::size_t{1} << 60, s)));  // more than any device has
  auto moved = std::move(s);
  CHECK(moved.get() != nullptr);
  moved.synchronize();
}

TEST_CASE("stream, event and device tensor round trip") {
  if (!have_device()) return;
  auto s = cuda::stream::create().value();
  tensor host = tensor::empty({1000}, dtype::i32);
  for (int i = 0; i < 1000; ++i) host.data<int>()[i] = i * 3;
  tensor dev = cuda::empty_device(host.shape(), dtype::i32, s);
  CHECK(dev.device() == device::cuda(0));
  cuda::copy_async(dev, host, s);
  auto done = cuda::event::create().value();
  done.record(s);
  tensor back = tensor::zeros({1000}, dtype::i32);
  cuda::copy_async(back, dev, s);
  s.synchronize();
  CHECK(std::memcmp(back.data(), host.data(), host.nbytes()) == 0);
}

TEST_CASE("pinned pool recycles buffers") {
  if (!have_device()) return;
  cuda::pinned_pool pool;
  cuda::pinned_pool copy = pool;  // copies share the pool
  void* first = nullptr;
  {
    tensor a = pool.acquire({256, 256}, dtype::f32);
    first = a.data();
  }
  tensor b = copy.acquire({200, 200}, dtype::f32);  // same size class
  CHECK(b.data() == first);
  CHECK(pool.hits() == 1);
}

TEST_CASE("normalize_hwc_to_chw matches the CPU reference in f32, f16, bf16") {
  if (!have_device()) return;
  // h*w % 8 != 0 takes the generic kernel, h*w % 8 == 0 the 8-pixel one (each channel count it specializes)
  struct geometry {
    int n, h, w, c;
  };
  const float mean[4] = {0.485f, 0.456f, 0.406f, 0.5f}, stdev[4] = {0.229f, 0.224f, 0.225f, 0.25f};
  for (const geometry g : {geometry{2, 17, 23, 3}, geometry{3, 16, 24, 3}, geometry{2, 8, 8, 1}, geometry{2, 4, 6, 2},
                           geometry{2, 8, 16, 4}, geometry{1, 3, 5, 4}}) {
    const int n = g.n, h = g.h, w = g.w, c = g.c;
    tensor in = tensor::empty({n, h, w, c}, dtype::u8);
    for (std::size_t i = 0; i < in.nbytes(); ++i)
      in.data<std::uint8_t>()[i] = static_cast<std::uint8_t>((i * 37) % 256);
    for (dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
      tensor out = cuda::test::normalize_on_device(in, t, mean, stdev);
      double max_err = 0;
      for (int b = 0; b < n; ++b)
        for (int ch = 0; ch < c; ++ch)
          for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x) {
              const float ref =
                  (in.data<std::uint8_t>()[((b * h + y) * w + x) * c + ch] / 255.0f - mean[ch]) / stdev[ch];
              const std::size_t o = ((static_cast<std::size_t>(b) * c + ch) * h + y) * w + x;
              float got = 0;
              if (t == dtype::f32) got = out.data<float>()[o];
              if (t == dtype::f16) got = static_cast<float>(out.data<float16>()[o]);
              if (t == dtype::bf16) got = static_cast<float>(out.data<bfloat16>()[o]);
              max_err = std::max(max_err, static_cast<double>(std::fabs(got - ref)));
            }
      CHECK_MESSAGE(max_err < (t == dtype::f32   ? 1e-5
                               : t == dtype::f16 ? 4e-3
                                                 : 3e-2),
                    to_string(t) << " " << n << "x" << h << "x" << w << "x" << c);
    }
  }
}
