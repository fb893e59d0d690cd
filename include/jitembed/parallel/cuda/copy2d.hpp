// The device side of copy2d.hpp: copy2d as cudaMemcpy2DAsync on a stream, and zero fill. The CUDA
// communicators provide parallel::device_memory with these on their own stream (nothing waits for the device).
#pragma once

#include <cuda_runtime_api.h>

#include <climits>
#include <cstddef>

#include "jitembed/core/tensor.hpp"
#include "jitembed/cuda/buffer.hpp"
#include "jitembed/cuda/check.hpp"
#include "jitembed/cuda/stream.hpp"
#include "jitembed/parallel/copy2d.hpp"

namespace jitembed::parallel {

// d on `stream` (cudaMemcpyDefault: any pair of device / pinned / pageable pointers with unified
// addressing). A contiguous copy is one cudaMemcpyAsync; a pitched one is one cudaMemcpy2DAsync, or one
// cudaMemcpyAsync per row when a pitch exceeds what cudaMemcpy2D takes (INT_MAX bytes, the devices'
// cudaDevAttrMaxPitch).
inline void copy2d_async(const copy2d_desc& d, jitembed::cuda::stream_ref stream) {
  if (d.empty()) return;
  if (d.contiguous()) {
    JITEMBED_CUDA_CHECK(cudaMemcpyAsync(d.dst, d.src, d.bytes(), cudaMemcpyDefault, stream.get()));
    return;
  }
  constexpr std::size_t kMaxPitch = INT_MAX;
  if (d.dpitch <= kMaxPitch && d.spitch <= kMaxPitch) {
    JITEMBED_CUDA_CHECK(
        cudaMemcpy2DAsync(d.dst, d.dpitch, d.src, d.spitch, d.width, d.height, cudaMemcpyDefault, stream.get()));
    return;
  }
  auto* dst = static_cast<std::byte*>(d.dst);
  const auto* src = static_cast<const std::byte*>(d.src);
  for (std::size_t i = 0; i < d.height; ++i) {
    JITEMBED_CUDA_CHECK(
        cudaMemcpyAsync(dst + i * d.dpitch, src + i * d.spitch, d.width, cudaMemcpyDefault, stream.get()));
  }
}

// v = 0 on `stream` (v contiguous).
inline void zero_fill_async(const tensor_view& v, jitembed::cuda::stream_ref stream) {
  if (v.nbytes() == 0) return;
  JITEMBED_CUDA_CHECK(cudaMemsetAsync(v.data(), 0, v.nbytes(), stream.get()));
}

}  // namespace jitembed::parallel
