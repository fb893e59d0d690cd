// Elementwise bodies of the nn math as __host__ __device__ functions: GELU (tanh) and its derivative, the
// LayerNorm, softmax and cross-entropy pieces, bf16 <-> f32 rounding. The CPU ops in nn/ and the CUDA
// kernels (parallel/cuda/detail/kernels.cuh) both call these, so CI tests the device math on the CPU.
// Plain C++ without nvcc: JITEMBED_HOST_DEVICE is then empty.
#pragma once

#include <math.h>  // tanhf, expf, logf, sqrtf: the same names in host code and in CUDA device code

#include <cstdint>
#include <cstring>

#ifndef JITEMBED_HOST_DEVICE
#if defined(__CUDACC__)
#define JITEMBED_HOST_DEVICE __host__ __device__
#else
#define JITEMBED_HOST_DEVICE
#endif
#endif

namespace jitembed::nn::pointwise {

inline constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float kGeluA = 0.044715f;

// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
JITEMBED_HOST_DEVICE inline float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluC * (x + kGeluA * x * x * x)));
}

// dy · d gelu(x)/dx (the exact derivative of the tanh form).
JITEMBED_HOST_DEVICE inline float gelu_grad(float x, float dy) {
  const float t = tanhf(kGeluC * (x + kGeluA * x * x * x));
  const float du = kGeluC * (1.0f + 3.0f * kGeluA * x * x);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}

// LayerNorm: 1/sqrt(var + eps) from the row's mean of squares about the mean.
JITEMBED_HOST_DEVICE inline float layer_norm_rstd(float var, float eps) { return 1.0f / sqrtf(var + eps); }

// y = (x − mean)·rstd·gamma + beta.
JITEMBED_HOST_DEVICE inline float layer_norm_apply(float x, float mean, float rstd, float gamma, float beta) {
  return ((x - mean) * rstd) * gamma + beta;
}

// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), g = dy·gamma, x̂ = (x − mean)·rstd.
JITEMBED_HOST_DEVICE inline float layer_norm_dx(float rstd, float g, float mean_g, float xhat, float mean_gxhat) {
  return rstd * (g - mean_g - xhat * mean_gxhat);
}

// Softmax: exp(x − max) of a row whose max is `mx`.
JITEMBED_HOST_DEVICE inline float softmax_exp(float x, float mx) { return expf(x - mx); }

// The running (max, sum of exp(x − max)) of a row, merged with another part of the row (online softmax).
struct softmax_state {
  float max = -INFINITY;
  float sum = 0.0f;
};
JITEMBED_HOST_DEVICE inline softmax_state softmax_merge(softmax_state a, softmax_state b) {
  if (a.max == -INFINITY) return b;
  if (b.max == -INFINITY) return a;
  const float m = a.max > b.max ? a.max : b.max;
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}
JITEMBED_HOST_DEVICE inline softmax_state softmax_push(softmax_state a, float x) { return softmax_merge(a, {x, 1.0f}); }

// dS = P ⊙ (dP − rowsum(dP ⊙ P)), one element, given the row's dot = Σ dP·P.
JITEMBED_HOST_DEVICE inline float softmax_grad(float p, float dp, float dot) { return p * (dp - dot); }

// Cross-entropy of one row with log-sum-exp `lse`: loss lse − x[target]; gradient (softmax − onehot) / M.
JITEMBED_HOST_DEVICE inline float cross_entropy_loss(float lse, float x_target) { return lse - x_target; }
JITEMBED_HOST_DEVICE inline float cross_entropy_grad(float x, float lse, bool is_target, float inv_m) {
  return (expf(x - lse) - (is_target ? 1.0f : 0.0f)) * inv_m;
}
JITEMBED_HOST_DEVICE inline float log_sum_exp(softmax_state s) { return logf(s.sum) + s.max; }

// bf16 <-> f32: the top 16 bits of the binary32, rounded to nearest even (NaN stays a quiet NaN), as
// core's bfloat16 and CUDA's __float2bfloat16_rn.
JITEMBED_HOST_DEVICE inline std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
JITEMBED_HOST_DEVICE inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}
JITEMBED_HOST_DEVICE inline std::uint16_t bf16_from_float(float f) {
  std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}
JITEMBED_HOST_DEVICE inline float bf16_to_float(std::uint16_t b) { return bits_float(static_cast<std::uint32_t>(b) << 16); }
// f rounded to the nearest bf16, as a float.
JITEMBED_HOST_DEVICE inline float bf16_round(float f) { return bf16_to_float(bf16_from_float(f)); }

}  // namespace jitembed::nn::pointwise
