// The boundary as the public system (ray-project/multimodal-training) crosses it, composed from this
// project's pieces so the bench can count its bytes: the encoder output is all-gathered over the encoder
// group, each encoder rank sends all of it to its paired LM rank (equal groups paired one to one), and the
// LM rank sends the whole gradient back; the encoder rank keeps its own part of it.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "jitembed/parallel/boundary.hpp"

namespace hybrid {

using namespace jitembed;
using jitembed::parallel::layout;

// invalid_argument unless the two layouts have as many ranks (the public system pairs them one to one).
inline void check_public_pairs(const layout& src, const layout& dst) {
  if (src.ranks.size() != dst.ranks.size()) {
    throw error(errc::invalid_argument, "public boundary: pairs equal groups one to one, the encoder has " +
                                            std::to_string(src.ranks.size()) + " ranks and the language model " +
                                            std::to_string(dst.ranks.size()));
  }
}

// Whole tensors between pairs: src.ranks[k] sends `whole` to dst.ranks[k] (or dst to src when `back`); a
// rank paired with itself keeps it. Returns what this rank received (or kept), undefined elsewhere.
template <parallel::communicator C>
tensor public_pair_send(C& world, const tensor& whole, const shape& global, const layout& from, const layout& to) {
  const int me = world.rank();
  std::vector<parallel::p2p_op> ops;
  tensor got;
  for (std::size_t k = 0; k < from.ranks.size(); ++k) {
    const int a = from.ranks[k], b = to.ranks[k];
    if (a == b) {
      if (a == me) got = whole;
      continue;
    }
    if (a == me) ops.push_back(parallel::p2p_op::isend(whole.view(), b));
    if (b == me) {
      got = tensor::empty(global, dtype::f32);
      ops.push_back(parallel::p2p_op::irecv(got.view(), a));
    }
  }
  if (!ops.empty()) world.batch_p2p(std::span<const parallel::p2p_op>(ops)).value();
  return got;
}

// Forward: `local` is this encoder rank's part under `src` (null off the encoder); returns the whole
// activation on the LM ranks. The all-gather is the boundary transform from src to replicate over src's
// ranks (each rank receives what it lacks: what a ring all_gather receives).
template <parallel::communicator C>
tensor public_forward(C& world, const tensor_view* local, const shape& global, const layout& src, const layout& dst) {
  check_public_pairs(src, dst);
  const layout gathered{src.ranks, parallel::placement::replicate()};
  const tensor whole = parallel::boundary_forward(world, local, global, src, gathered);
  return public_pair_send(world, whole, global, gathered, dst);
}

// Backward: `whole_grad` is the LM rank's whole gradient (undefined off the LM); returns this encoder
// rank's part of it under `src`.
template <parallel::communicator C>
tensor public_backward(C& world, const tensor& whole_grad, const shape& global, const layout& src, const layout& dst) {
  check_public_pairs(src, dst);
  const tensor whole = public_pair_send(world, whole_grad, global, dst, src);
  const auto it = std::find(src.ranks.begin(), src.ranks.end(), world.rank());
  if (it == src.ranks.end()) return {};
  if (!src.p.is_shard()) return whole;
  const int k = static_cast<int>(it - src.ranks.begin()), n = static_cast<int>(src.ranks.size());
  return parallel::local_chunk(whole.view(), static_cast<std::size_t>(src.p.dim), n, k);
}

}  // namespace hybrid
