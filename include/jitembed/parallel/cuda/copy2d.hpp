// The device side of copy2d.hpp: copy2d as cudaMemcpy2DAsync on a stream, and zero fill. The CUDA
// communicators provide parallel::device_memory with these on their own stream (nothing waits for the device).
#pragma once

#include <cuda_runtime_api.h>

#include <climits>
#include <cstddef>
#include <memory>

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

// Uninitialised memory of CUDA device `ordinal` for a communicator's staging and results: allocated on
// `stream` (the communicator's) and freed there (stream-ordered) — after the work that `consumer` (the
// compute stream reading the results; null or `stream`: none) has enqueued by the time of the free, so a
// result the compute stream still reads is not reused early. The caller's current device is `ordinal`.
inline tensor empty_for(const shape& s, dtype t, int ordinal, cudaStream_t stream, cudaStream_t consumer) {
  const auto n = static_cast<std::size_t>(checked_nbytes(s.span(), t).value());
  void* p = nullptr;
  if (n != 0) JITEMBED_CUDA_CHECK(cudaMallocAsync(&p, n, stream));
  std::shared_ptr<void> owner(p, [stream, consumer](void* q) {
    if (q == nullptr) return;
    if (consumer != nullptr && consumer != stream) {  // the free waits for the consumer's work so far
      cudaEvent_t e = nullptr;
      if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess) {
        (void)cudaEventRecord(e, consumer);
        (void)cudaStreamWaitEvent(stream, e, 0);
        (void)cudaEventDestroy(e);  // released once the wait is done
      }
    }
    (void)cudaFreeAsync(q, stream);
  });
  return tensor::wrap(std::move(owner), tensor_view(p, t, s, jitembed::device::cuda(ordinal)));
}

// v = 0 on `stream` (v contiguous).
inline void zero_fill_async(const tensor_view& v, jitembed::cuda::stream_ref stream) {
  if (v.nbytes() == 0) return;
  JITEMBED_CUDA_CHECK(cudaMemsetAsync(v.data(), 0, v.nbytes(), stream.get()));
}

}  // namespace jitembed::parallel
