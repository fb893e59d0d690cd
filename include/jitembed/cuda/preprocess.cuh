// Preprocessing kernels (need nvcc): decoded u8 images/frames [N,H,W,C] -> normalized [N,C,H,W] in
// f32 / f16 / bf16, the layout and scaling VAE and CLIP encoders take. One fused pass: no u8->f32 copy.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
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

// The fast path: one thread per 8 pixels of one image, C in 1..4 known at compile time. It loads the 8*C
// input bytes as C 8-byte words and stores each channel's 8 outputs as 16-byte words, so neighbouring threads
// read and write neighbouring memory and no thread divides per element (the generic kernel above does three
// 64-bit divisions per output and moves 1-2 bytes per access: 0.10x a device copy on an H200, where this one
// is memory bound). Needs h*w % 8 == 0, `in` 8-byte and `out` 16-byte aligned (normalize_hwc_to_chw checks).
// blockIdx.y walks the images.
template <class Out, int C>
__global__ void normalize_hwc_to_chw_vec8_kernel(const std::uint8_t* __restrict__ in, Out* __restrict__ out,
                                                 std::int64_t n, std::int64_t plane, normalize_params p) {
  static_assert(sizeof(Out) == 2 || sizeof(Out) == 4);
  const std::int64_t groups = plane / 8;
  for (std::int64_t img = blockIdx.y; img < n; img += gridDim.y) {
    for (std::int64_t g = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; g < groups;
         g += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
      const std::int64_t pix = g * 8;
      union {
        uint2 words[C];
        std::uint8_t bytes[8 * C];
      } px;
      const auto* src = reinterpret_cast<const uint2*>(in + (img * plane + pix) * C);
#pragma unroll
      for (int k = 0; k < C; ++k) px.words[k] = src[k];
#pragma unroll
      for (int ch = 0; ch < C; ++ch) {
        union {
          uint4 words[8 * sizeof(Out) / 16];
          Out v[8];
        } o;
#pragma unroll
        for (int j = 0; j < 8; ++j) o.v[j] = from_float<Out>(static_cast<float>(px.bytes[j * C + ch]) * p.scale[ch] + p.bias[ch]);
        auto* dst = reinterpret_cast<uint4*>(out + (img * C + ch) * plane + pix);
#pragma unroll
        for (int k = 0; k < static_cast<int>(8 * sizeof(Out) / 16); ++k) dst[k] = o.words[k];
      }
    }
  }
}

template <class Out>
void launch_normalize(const std::uint8_t* in, Out* out, std::int64_t n, int h, int w, int c, const normalize_params& p,
                      cudaStream_t s) {
  const std::int64_t plane = static_cast<std::int64_t>(h) * w;
  const int threads = 256;
  const bool vec8 = plane % 8 == 0 && reinterpret_cast<std::uintptr_t>(in) % 8 == 0 &&
                    reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
  if (vec8) {
    const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>((plane / 8 + threads - 1) / threads, 65535)),
                    static_cast<unsigned>(std::min<std::int64_t>(n, 65535)));
    switch (c) {
      case 1: normalize_hwc_to_chw_vec8_kernel<Out, 1><<<grid, threads, 0, s>>>(in, out, n, plane, p); return;
      case 2: normalize_hwc_to_chw_vec8_kernel<Out, 2><<<grid, threads, 0, s>>>(in, out, n, plane, p); return;
      case 3: normalize_hwc_to_chw_vec8_kernel<Out, 3><<<grid, threads, 0, s>>>(in, out, n, plane, p); return;
      default: normalize_hwc_to_chw_vec8_kernel<Out, 4><<<grid, threads, 0, s>>>(in, out, n, plane, p); return;
    }
  }
  const std::int64_t total = n * c * plane;
  const int blocks = static_cast<int>(std::min<std::int64_t>((total + threads - 1) / threads, 65535 * 8));
  normalize_hwc_to_chw_kernel<<<blocks, threads, 0, s>>>(in, out, n, h, w, c, p);
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
  if (out.numel() == 0) return;
  const auto* src = static_cast<const std::uint8_t*>(in.data());
  switch (out.dtype()) {
    case dtype::f32: detail::launch_normalize(src, static_cast<float*>(out.data()), n, h, w, c, p, s.get()); break;
    case dtype::f16: detail::launch_normalize(src, static_cast<__half*>(out.data()), n, h, w, c, p, s.get()); break;
    case dtype::bf16: detail::launch_normalize(src, static_cast<__nv_bfloat16*>(out.data()), n, h, w, c, p, s.get()); break;
    default: throw error(errc::dtype_mismatch, "normalize: output must be f32, f16 or bf16");
  }
  JITEMBED_CUDA_CHECK(cudaGetLastError());
}

}  // namespace jitembed::cuda
