// The torch adapter's GPU data path (a CUDA LibTorch: JITEMBED_TORCH_CUDA, set by the torch component when
// the LibTorch it links has torch_cuda). Each runner thread (a model instance) gets its own copy stream and
// compute stream per device, so while one instance's batch computes, another's host-to-device copy runs:
//   stage    the items into one pinned host tensor (LibTorch's CachingHostAllocator, the pinned pool: one
//            memcpy per item, no pageable bounce buffer);
//   copy     host -> device on the copy stream (non_blocking), an event recorded after it;
//   compute  the compute stream waits for that event (not the host), forward runs there;
//   return   each output cast on the device, copied into pinned host memory on the compute stream, one
//            synchronize of that stream; the items are views of those host tensors.
// Compiled in CI; run only where a GPU and a CUDA LibTorch meet (not the lent GPU machine: docs/models.md).
#pragma once

#if JITEMBED_TORCH_CUDA

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/script.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string_view>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/detail/torch_convert.hpp"
#include "jitembed/models/model.hpp"

namespace jitembed::models::detail {

struct cuda_stream_pair {
  c10::cuda::CUDAStream copy, compute;
};

// This thread's streams on device `index` (from LibTorch's stream pool; made on first use).
inline cuda_stream_pair& thread_streams(c10::DeviceIndex index) {
  thread_local std::map<c10::DeviceIndex, cuda_stream_pair> streams;
  auto it = streams.find(index);
  if (it == streams.end())
    it = streams
             .emplace(index, cuda_stream_pair{c10::cuda::getStreamFromPool(false, index),
                                              c10::cuda::getStreamFromPool(false, index)})
             .first;
  return it->second;
}

// Items (checked: same dtype and shape, contiguous, CPU) -> [N, item...] on `dev`, staged through pinned
// memory and copied on this thread's copy stream; the compute stream (made current by the caller) waits.
inline result<torch::Tensor> stage_to_device(std::string_view model, std::span<const tensor> batch,
                                             const tensor_meta& in, c10::Device dev, const cuda_stream_pair& s) {
  auto host = stack_items(model, batch, in, c10::Device(c10::DeviceType::CPU), /*pinned=*/true);
  if (!host) return host.error();
  torch::Tensor x;
  {
    c10::cuda::CUDAStreamGuard on_copy(s.copy);
    x = host->to(dev, /*non_blocking=*/true);  // the pinned block is reused only after this copy (its event)
  }
  at::cuda::CUDAEvent copied;
  copied.record(s.copy);
  copied.block(s.compute);
  x.record_stream(s.compute);  // allocated on the copy stream, used on the compute stream
  return x;
}

// A device output -> a pinned host tensor of the declared dtype, copied on the compute stream (the caller
// synchronizes that stream once for all outputs).
inline torch::Tensor output_to_pinned_host(torch::Tensor y, const tensor_meta& meta) {
  const auto want = to_torch_dtype(meta.type);
  if (y.scalar_type() != want && c10::isFloatingType(y.scalar_type()) && c10::isFloatingType(want)) y = y.to(want);
  y = y.contiguous();
  torch::Tensor h = torch::empty(y.sizes(), torch::TensorOptions().dtype(y.scalar_type()).pinned_memory(true));
  h.copy_(y, /*non_blocking=*/true);
  return h;
}

}  // namespace jitembed::models::detail

#endif  // JITEMBED_TORCH_CUDA
