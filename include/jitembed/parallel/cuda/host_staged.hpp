// host_staged_communicator<C>: C's collectives (Gloo, on the host) for buffers on a CUDA device, staged
// through pinned memory on the rank's stream. Several ranks on one GPU with NCCL 2.28 (which refuses that;
// NCCL ≥ 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 does not need it), in tests and examples.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "jitembed/core/tensor.hpp"
#include "jitembed/cuda/buffer.hpp"
#include "jitembed/cuda/check.hpp"
#include "jitembed/cuda/stream.hpp"
#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/cuda/copy2d.hpp"
#include "jitembed/parallel/host_staged.hpp"

namespace jitembed::parallel {

// staging_memory on one CUDA stream of one device (a non-owning handle: the stream outlives it). Every
// allocation is stream-ordered on that stream; the caller's current device is `ordinal` (ranks that are
// threads call cudaSetDevice first).
class cuda_staging {
 public:
  cuda_staging(jitembed::cuda::stream_ref stream, int ordinal) noexcept : stream_(stream), ordinal_(ordinal) {}

  jitembed::device device() const noexcept { return jitembed::device::cuda(ordinal_); }
  jitembed::cuda::stream_ref stream() const noexcept { return stream_; }
  // Freed on stream() after the consumer stream's work at that time (see empty_for).
  tensor empty_tensor(const shape& s, dtype t) const { return empty_for(s, t, ordinal_, stream_.get(), consumer_); }
  void set_consumer_stream(cudaStream_t s) noexcept { consumer_ = s; }
  void copy2d(const copy2d_desc& d) const { copy2d_async(d, stream_); }
  void zero_fill(const tensor_view& v) const { zero_fill_async(v, stream_); }
  void synchronize() const { stream_.synchronize(); }
  // Pinned host memory (the copies are truly asynchronous only from and to page-locked memory).
  tensor host_buffer(std::size_t bytes) const {
    auto buf = std::make_shared<jitembed::cuda::pinned_buffer>(jitembed::cuda::pinned_buffer::create(bytes).value());
    void* p = buf->data();
    return tensor::wrap(std::move(buf), tensor_view(p, dtype::u8, shape{static_cast<std::int64_t>(bytes)}));
  }

 private:
  jitembed::cuda::stream_ref stream_;
  int ordinal_ = 0;
  cudaStream_t consumer_ = nullptr;
};

template <communicator C>
using host_staged_communicator = basic_host_staged_communicator<C, cuda_staging>;

}  // namespace jitembed::parallel
