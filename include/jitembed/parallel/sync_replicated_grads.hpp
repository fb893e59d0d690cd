// Gradient sync of replicated parameters inside a sequence-parallel region (one all_reduce of a packed buffer).
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/detail/tp_common.hpp"
#include "jitembed/parallel/functional.hpp"
#include "jitembed/parallel/mappings.hpp"
#include "jitembed/parallel/shard.hpp"

namespace jitembed::parallel {

// All-reduces (sums) the gradients of replicated parameters whose gradient is partial per rank — the
// LayerNorm gamma/beta in a sequence-parallel region, each rank having seen only its sequence shard. The
// tensors (same dtype, contiguous, CPU) are packed into ONE flat buffer: one all_reduce of their total
// bytes, then unpacked in place. No communication with one rank or no tensors.
template <communicator C>
result<void> sync_replicated_grads(C& comm, std::span<const tensor_view> grads) {
  const std::string what = "sync_replicated_grads";
  JITEMBED_TRY(detail::tp_check_group(comm.valid(), what));
  if (grads.empty() || comm.size() == 1) return {};
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const std::string name = "grads[" + std::to_string(i) + "]";
    JITEMBED_TRY(detail::tp_require(grads[i], grads[0].dtype(), what, name.c_str()));
    total += grads[i].numel();
  }
  return detail::capture("sync_replicated_grads", [&]() -> result<void> {  // the allocation may throw
    tensor flat = tensor::empty(shape{static_cast<std::int64_t>(total)}, grads[0].dtype());
    auto* at = static_cast<std::byte*>(flat.data());
    for (const auto& g : grads) {
      if (g.nbytes() != 0) std::memcpy(at, g.data(), g.nbytes());
      at += g.nbytes();
    }
    JITEMBED_TRY(comm.all_reduce(flat.view(), reduce_op::sum));
    at = static_cast<std::byte*>(flat.data());
    for (const auto& g : grads) {
      if (g.nbytes() != 0) std::memcpy(g.data(), at, g.nbytes());
      at += g.nbytes();
    }
    return {};
  });
}

template <communicator C>
result<void> sync_replicated_grads(C& comm, std::initializer_list<tensor_view> grads) {
  return sync_replicated_grads(comm, std::span<const tensor_view>(grads.begin(), grads.size()));
}

}  // namespace jitembed::parallel
