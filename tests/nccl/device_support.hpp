// What the GPU tests of this folder share: whether a device is here (without one they print the line ctest
// reports as skipped), seeded inputs, the relative error they compare by, and ranks as threads.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "jitembed/core/tensor.hpp"
#include "jitembed/cuda/check.hpp"
#include "jitembed/nn/pointwise.hpp"

namespace cuda_test {

inline bool have_device() {
  if (jitembed::cuda::device_count() > 0) return true;
  std::printf("no CUDA device: skipping\n");
  return false;
}

// Seeded normal values, f32.
inline jitembed::tensor randn(const jitembed::shape& s, std::uint64_t seed, float scale = 1.0f) {
  jitembed::tensor t = jitembed::tensor::empty(s, jitembed::dtype::f32);
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  for (std::uint64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(gen);
  return t;
}

// The same values rounded to bf16 (the inputs a bf16 run sees), as f32.
inline jitembed::tensor rounded(const jitembed::tensor& x) {
  jitembed::tensor r = x.clone();
  for (std::uint64_t i = 0; i < r.numel(); ++i)
    r.data<float>()[i] = jitembed::nn::pointwise::bf16_round(r.data<float>()[i]);
  return r;
}

// max|got − ref| / max|ref|.
inline double rel(const jitembed::tensor& got, const jitembed::tensor& ref) {
  REQUIRE(got.numel() == ref.numel());
  double d = 0, m = 1e-30;
  for (std::uint64_t i = 0; i < ref.numel(); ++i) {
    d = std::max(d, static_cast<double>(std::abs(got.data<float>()[i] - ref.data<float>()[i])));
    m = std::max(m, static_cast<double>(std::abs(ref.data<float>()[i])));
  }
  return d / m;
}

// Runs fn(r) for r in [0, n) on n threads and rethrows the first exception a rank threw, once every thread has
// finished (a rank that throws destroys its communicator, so the others fail instead of waiting).
template <class F>
void on_rank_threads(int n, F fn) {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr first;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace cuda_test
