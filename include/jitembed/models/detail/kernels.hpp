// CPU kernels of the reference embedders: the 8x8 DCT-II, RGB -> YCbCr, a seeded PRNG, the `work`
// matmuls, output dtype conversion and the batch checks every model's run() starts with.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/dtype.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/splitmix64.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/model.hpp"

namespace jitembed::models::detail {

// Orthonormal DCT-II basis: c[u][x] = a(u) cos((2x + 1) u pi / 16), a(0) = sqrt(1/8), a(u>0) = sqrt(2/8).
// Computed in double, stored as float, so every platform gets the same table.
inline const std::array<float, 64>& dct8_basis() {
  static const std::array<float, 64> basis = [] {
    std::array<float, 64> c{};
    for (int u = 0; u < 8; ++u) {
      const double a = u == 0 ? std::sqrt(1.0 / 8.0) : std::sqrt(2.0 / 8.0);
      for (int x = 0; x < 8; ++x) c[u * 8 + x] = static_cast<float>(a * std::cos((2 * x + 1) * u * std::numbers::pi / 16.0));
    }
    return c;
  }();
  return basis;
}

// Separable 2-D DCT-II of one 8x8 block (row-major, in[y * 8 + x]): out = C * in * C^T, rows first.
inline void dct8x8(const float* in, float* out) noexcept {
  const auto& c = dct8_basis();
  float tmp[64];
  for (int y = 0; y < 8; ++y)  // 1-D DCT of each row: tmp[y][u] = sum_x c[u][x] in[y][x]
    for (int u = 0; u < 8; ++u) {
      float s = 0.f;
      for (int x = 0; x < 8; ++x) s += c[u * 8 + x] * in[y * 8 + x];
      tmp[y * 8 + u] = s;
    }
  for (int v = 0; v < 8; ++v)  // then of each column: out[v][u] = sum_y c[v][y] tmp[y][u]
    for (int u = 0; u < 8; ++u) {
      float s = 0.f;
      for (int y = 0; y < 8; ++y) s += c[v * 8 + y] * tmp[y * 8 + u];
      out[v * 8 + u] = s;
    }
}

// JFIF (BT.601 full range) RGB -> YCbCr, each channel then centred and scaled: (value - 128) / 128.
struct ycbcr {
  float y, cb, cr;
};
inline ycbcr to_ycbcr(std::uint8_t r8, std::uint8_t g8, std::uint8_t b8) noexcept {
  const float r = r8, g = g8, b = b8;
  constexpr float s = 1.f / 128.f;
  return {(0.299f * r + 0.587f * g + 0.114f * b - 128.f) * s,
          (-0.168736f * r - 0.331264f * g + 0.5f * b) * s,
          (0.5f * r - 0.418688f * g - 0.081312f * b) * s};
}

using jitembed::splitmix64;  // the seeded generator behind every "weight" of the reference models
// Uniform in [-1, 1) with 24 bits of resolution.
constexpr float unit_uniform(std::uint64_t bits) noexcept {
  return static_cast<float>(static_cast<std::int32_t>(bits >> 40) - (1 << 23)) * (1.f / static_cast<float>(1 << 23));
}

inline std::string hex64(std::uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = digits[v & 15];
  return s;
}

// `work` emulation: k products of dim x dim matrices (plain blocked i-k-j loops, no BLAS), seeded by
// `salt` and the item's own outputs so nothing can be hoisted out of the loop. Returns a checksum the
// caller stores in a volatile sink; the model's outputs never depend on it.
inline float run_work(int k, int dim, std::span<const float> item, std::uint64_t salt) {
  if (k <= 0 || dim <= 0) return 0.f;
  const std::size_t n = static_cast<std::size_t>(dim);
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (std::size_t i = 0; i < n * n; ++i) {
    a[i] = unit_uniform(splitmix64(salt + i));
    b[i] = item.empty() ? 0.f : item[i % item.size()];
  }
  const float scale = 1.f / static_cast<float>(dim);
  constexpr std::size_t kb = 64;
  for (int it = 0; it < k; ++it) {
    std::fill(c.begin(), c.end(), 0.f);
    for (std::size_t i0 = 0; i0 < n; i0 += kb)
      for (std::size_t p0 = 0; p0 < n; p0 += kb)
        for (std::size_t i = i0; i < std::min(i0 + kb, n); ++i)
          for (std::size_t p = p0; p < std::min(p0 + kb, n); ++p) {
            const float av = a[i * n + p] * scale;
            const float* brow = b.data() + p * n;
            float* crow = c.data() + i * n;
            for (std::size_t j = 0; j < n; ++j) crow[j] += av * brow[j];
          }
    b.swap(c);
  }
  float sum = 0.f;
  for (float v : b) sum += v;
  return sum;
}

// Where `work` results go, so the compiler keeps the loops (atomic: items run on many threads).
inline std::atomic<float> work_sink{0.f};
inline void sink(float v) noexcept { work_sink.store(v, std::memory_order_relaxed); }

// A new tensor of `type` (f32, bf16 or f16) holding `values` converted with round-to-nearest-even.
inline tensor to_output(std::span<const float> values, dtype type, const shape& s) {
  tensor t = tensor::empty(s, type);
  switch (type) {
    case dtype::bf16: {
      auto* p = t.data<bfloat16>();
      for (std::size_t i = 0; i < values.size(); ++i) p[i] = bfloat16(values[i]);
      break;
    }
    case dtype::f16: {
      auto* p = t.data<float16>();
      for (std::size_t i = 0; i < values.size(); ++i) p[i] = float16(values[i]);
      break;
    }
    default: std::copy(values.begin(), values.end(), t.data<float>()); break;
  }
  return t;
}

inline result<void> check_work(std::string_view model, int work, int work_dim) {
  if (work < 0 || work > 1000) return fail(errc::invalid_argument, std::string(model) + ": work " + std::to_string(work) + " not in [0, 1000]");
  if (work_dim < 1 || work_dim > 4096)
    return fail(errc::invalid_argument, std::string(model) + ": work_dim " + std::to_string(work_dim) + " not in [1, 4096]");
  return {};
}

inline result<void> check_output_dtype(std::string_view model, dtype t) {
  if (t == dtype::f32 || t == dtype::bf16 || t == dtype::f16) return {};
  return fail(errc::invalid_argument, std::string(model) + ": output dtype " + std::string(to_string(t)) + " (f32, bf16 or f16)");
}

// The checks at the top of every run(): batch size, and each item's dtype, device and shape against
// `in` (-1 extents match anything) and contiguity.
inline result<void> check_batch(std::string_view model, std::span<const tensor> batch, std::size_t max_batch,
                                const tensor_meta& in) {
  if (batch.size() > max_batch)
    return fail(errc::limit_exceeded, std::string(model) + ": batch of " + std::to_string(batch.size()) +
                                          " > max_batch_size " + std::to_string(max_batch));
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const tensor& t = batch[i];
    const std::string where = std::string(model) + ": batch[" + std::to_string(i) + "] '" + in.name + "'";
    if (!t.device().is_cpu()) return fail(errc::invalid_argument, where + " is not on the CPU");
    if (t.dtype() != in.type)
      return fail(errc::dtype_mismatch, where + " is " + std::string(to_string(t.dtype())) + ", expected " +
                                            std::string(to_string(in.type)));
    bool ok = t.rank() == in.shape.size();
    for (std::size_t d = 0; ok && d < in.shape.size(); ++d) ok = in.shape[d] < 0 || in.shape[d] == t.size(d);
    if (!ok) {
      std::string want = "[";
      for (std::size_t d = 0; d < in.shape.size(); ++d) want += (d ? "," : "") + std::to_string(in.shape[d]);
      return fail(errc::invalid_argument, where + " has shape " + t.shape().to_string() + ", expected " + want + "]");
    }
    if (t.numel() && !t.is_contiguous()) return fail(errc::invalid_argument, where + " is not contiguous");
  }
  return {};
}

}  // namespace jitembed::models::detail
