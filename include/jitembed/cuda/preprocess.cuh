// Preprocessing kernels (need nvcc): decoded u8 images/frames [N,H,W,C] -> normalized [N,C,H,W] in
// f32 / f16 / bf16, the layout and scaling VAE and CLIP encoders take. One fused pass: no u8->f32 copy.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "jitembed/core/tensor.hpp"
#include "jitembed/cuda/check.hpp"
#include "jitembed/cuda/stream.hpp"

namespace jitembed::cuda {

inline constexpr int kMaxChannels = 4;

// out = (in / 255 - mean[c]) / std[c]; precomputed as in * scale[c] + bias[c].
struct normalize_params {
  float scale[kMaxChannels];
  float bias[kMaxChannels];

  static normalize_params from_mean_std(const float* mean, const float* stdev, int channels) {
    normalize_params p{};
    for (int c = 0; c < channels; ++c) {
      p.scale[c] = 1.0f / (255.0f * stdev[c]);
      p.bias[c] = -mean[c] / stdev[c];
    }
    return p;
  }
};

namespace detail {
template <class T>
__device__ inline T from_float(float v);
template <>
__device__ inline float from_float<float>(float v) { return v; }
template <>
__device__ inline __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// One thread per output element; reads are coalesced along W*C, writes along W within each plane.
template <class Out>
__global__ void normalize_hwc_to_chw_kernel(const std::uint8_t* __restrict__ in, Out* __restrict__ out,
                                            std::int64_t n, int h, int w, int c, normalize_params p) {
  const std::int64_t plane = static_cast<std::int64_t>(h) * w;
  const std::int64_t total = n * c * plane;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t pix = i % plane;
    const std::int64_t nc = i / plane;
    const int ch = static_cast<int>(nc % c);
    const std::int64_t img = nc / c;
    const float v = static_cast<float>(in[(img * plane + pix) * c + ch]);
    out[i] = from_float<Out>(v * p.scale[ch] + p.bias[ch]);
  }
}

inline void check_normalize_args(const tensor_view& in, const tensor_view& out) {
  if (in.dtype() != dtype::u8 || in.rank() != 4) throw error(errc::dtype_mismatch, "normalize: input must be u8 [N,H,W,C]");
  if (in.size(3) < 1 || in.size(3) > kMaxChannels) throw error(errc::invalid_argument, "normalize: 1..4 channels");
  const shape want{in.size(0), in.size(3), in.size(1), in.size(2)};
  if (!(out.shape() == want)) throw error(errc::invalid_argument, "normalize: output must be [N,C,H,W] " + want.to_string());
  if (in.device().is_cpu() || out.device().is_cpu()) throw error(errc::invalid_argument, "normalize: tensors must be on a CUDA device");
  if (!in.is_contiguous() || !out.is_contiguous()) throw error(errc::invalid_argument, "normalize: tensors must be contiguous");
}
}  // namespace detail

// Launches the fused normalize + HWC->CHW kernel on `s`. out's dtype picks the output type (f32/f16/bf16).
inline void normalize_hwc_to_chw(const tensor_view& in, const tensor_view& out, const normalize_params& p, stream_ref s) {
  detail::check_normalize_args(in, out);
  const auto n = in.size(0);
  const int h = static_cast<int>(in.size(1)), w = static_cast<int>(in.size(2)), c = static_cast<int>(in.size(3));
  const std::int64_t total = static_cast<std::int64_t>(out.numel());
  if (total == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<std::int64_t>((total + threads - 1) / threads, 65535 * 8));
  const auto* src = static_cast<const std::uint8_t*>(in.data());
  switch (out.dtype()) {
    case dtype::f32:
      detail::normalize_hwc_to_chw_kernel<<<blocks, threads, 0, s.get()>>>(src, static_cast<float*>(out.data()), n, h, w, c, p);
      break;
    case dtype::f16:
      detail::normalize_hwc_to_chw_kernel<<<blocks, threads, 0, s.get()>>>(src, static_cast<__half*>(out.data()), n, h, w, c, p);
      break;
    case dtype::bf16:
      detail::normalize_hwc_to_chw_kernel<<<blocks, threads, 0, s.get()>>>(src, static_cast<__nv_bfloat16*>(out.data()), n, h, w, c, p);
      break;
    default: throw error(errc::dtype_mismatch, "normalize: output must be f32, f16 or bf16");
  }
  JITEMBED_CUDA_CHECK(cudaGetLastError());
}

}  // namespace jitembed::cuda
