// The boundary transform between two modules laid out differently: an activation moves forward from one
// layout (shard or replicate over a set of ranks) to another, its gradient backward, point to point with
// only the pieces a rank lacks; boundary_exchange moves one of each in a single batch (pipeline schedules).
// CPU tensors over a host communicator (Gloo), or device tensors over one with device memory (NCCL: the
// pieces are staged, sent and inserted on its stream with grouped send/recv).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/copy2d.hpp"
#include "jitembed/parallel/placement.hpp"
#include "jitembed/parallel/shard.hpp"

namespace jitembed::parallel {

// How an activation lies on a set of parent ranks: shard(dim) over `ranks` (ranks[k] holds chunk k) or
// replicate (each holds all of it). Partial is not a boundary layout.
struct layout {
  std::vector<int> ranks;
  placement p;
};

namespace detail {

// A box of a global tensor: [start, start+len) in every dim.
struct boundary_box {
  shape start, len;

  bool empty() const noexcept {
    for (auto l : len) {
      if (l == 0) return true;
    }
    return false;
  }
  std::uint64_t numel() const noexcept {
    std::uint64_t n = 1;
    for (auto l : len) n *= static_cast<std::uint64_t>(l);
    return n;
  }
};

// The box that the k-th rank of a layout holds.
inline boundary_box boundary_box_of(const shape& global, const layout& l, std::size_t k) {
  boundary_box b{global, global};
  for (std::size_t d = 0; d < global.size(); ++d) b.start[d] = 0;
  if (l.p.is_shard()) {
    const auto d = static_cast<std::size_t>(l.p.dim);
    const int parts = static_cast<int>(l.ranks.size());
    b.start[d] = chunk_offset(global[d], parts, static_cast<int>(k));
    b.len[d] = chunk_size(global[d], parts, static_cast<int>(k));
  }
  return b;
}

inline boundary_box boundary_intersect(const boundary_box& a, const boundary_box& b) {
  boundary_box r = a;
  for (std::size_t d = 0; d < a.start.size(); ++d) {
    const std::int64_t lo = std::max(a.start[d], b.start[d]);
    const std::int64_t hi = std::min(a.start[d] + a.len[d], b.start[d] + b.len[d]);
    r.start[d] = lo;
    r.len[d] = std::max<std::int64_t>(hi - lo, 0);
  }
  return r;
}

// The device a transform's tensors live on: the communicator's when it has device memory (copy2d.hpp),
// else the CPU.
template <class C>
jitembed::device boundary_device(const C& parent) {
  if constexpr (device_memory<C>) {
    return parent.device();
  } else {
    return jitembed::device::cpu();
  }
}

// A contiguous copy of the part `piece` of x, where x holds the box `held` (piece ⊆ held), on x's device
// (device copies on the communicator's stream).
template <class C>
tensor boundary_extract(C& parent, const tensor_view& x, const boundary_box& held, const boundary_box& piece) {
  tensor t;
  tensor_view cur = x;
  for (std::size_t d = 0; d < held.len.size(); ++d) {
    if (piece.start[d] == held.start[d] && piece.len[d] == cur.size(d)) continue;
    t = mem_narrow(parent, cur, d, piece.start[d] - held.start[d], piece.len[d]);
    cur = t.view();
  }
  if (!t.defined()) t = mem_clone(parent, x);
  return t;
}

// out (holding box `held`) receives `piece` (a contiguous tensor of box p ⊆ held). In a boundary
// transform a piece differs from the destination box in one dim at most (the source's shard dim).
template <class C>
void boundary_insert(C& parent, const tensor_view& out, const boundary_box& held, const boundary_box& p,
                     const tensor_view& piece) {
  std::size_t dim = 0;
  int differing = 0;
  for (std::size_t d = 0; d < held.len.size(); ++d) {
    if (p.start[d] != held.start[d] || p.len[d] != held.len[d]) {
      dim = d;
      ++differing;
    }
  }
  if (differing > 1) throw error(errc::internal, "boundary: a piece differs from its destination in two dims");
  if (differing == 0) {
    mem_copy2d(parent, out.device(),
               copy2d_desc{out.data(), piece.nbytes(), piece.data(), piece.nbytes(), piece.nbytes(), 1});
    return;
  }
  const std::size_t es = out.itemsize();
  mem_copy2d(parent, out.device(),
             slab_copy(out.data(), slab_around(out.shape(), dim, es), p.start[dim] - held.start[dim], piece.data(),
                       slab_around(piece.shape(), dim, es), 0, p.len[dim]));
}

inline int boundary_index_in(const std::vector<int>& ranks, int r) {
  const auto it = std::find(ranks.begin(), ranks.end(), r);
  return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

inline void boundary_check_layout(const layout& l, const shape& global, int parent_size, const char* what,
                                  const char* which) {
  const std::string who = std::string(what) + ": " + which + " layout";
  if (l.ranks.empty()) throw error(errc::invalid_argument, who + " has no ranks");
  for (std::size_t a = 0; a < l.ranks.size(); ++a) {
    if (l.ranks[a] < 0 || l.ranks[a] >= parent_size) {
      throw error(errc::invalid_argument,
                  who + ": rank " + std::to_string(l.ranks[a]) + " outside [0, " + std::to_string(parent_size) + ")");
    }
    for (std::size_t b = 0; b < a; ++b) {
      if (l.ranks[a] == l.ranks[b]) {
        throw error(errc::invalid_argument, who + ": rank " + std::to_string(l.ranks[a]) + " listed twice");
      }
    }
  }
  if (l.p.is_partial()) throw error(errc::invalid_argument, who + " is partial (shard or replicate only)");
  placement_check(l.p, global.size(), who.c_str());
}

struct boundary_recv {
  tensor staging;
  boundary_box piece;
};

// What a posted transform still has to do once its batch completed: insert the received pieces into `out`
// (device tensors: copies enqueued on the communicator's stream after the batch's receives).
struct boundary_pending {
  tensor out;  // this rank's dst part (undefined outside dst)
  boundary_box need;
  std::vector<boundary_recv> recvs;

  template <class C>
  tensor finish(C& parent) {
    for (const auto& rv : recvs) boundary_insert(parent, out.view(), need, rv.piece, rv.staging.view());
    return std::move(out);
  }
};

// Checks the arguments of the transform from `src` to `dst` (named src_name / dst_name in errors, which
// start with `what`) and appends this rank's sends and receives to `ops` (the pieces it sends stay alive in
// `sends`); a part it holds itself is copied at once. Posting two transforms into one batch is safe: both
// sides of every pair append in the same order (the first transform's messages, then the second's).
template <communicator C>
boundary_pending boundary_post(C& parent, const tensor_view* local, const shape& global, const layout& src,
                               const layout& dst, jitembed::dtype dt, const char* what, const char* src_name,
                               const char* dst_name, std::vector<p2p_op>& ops, std::vector<tensor>& sends) {
  placement_check_group(parent, what);
  for (std::size_t d = 0; d < global.size(); ++d) {
    if (global[d] < 0)
      throw error(errc::invalid_argument, std::string(what) + ": global shape " + global.to_string() + " is negative");
  }
  boundary_check_layout(src, global, parent.size(), what, src_name);
  boundary_check_layout(dst, global, parent.size(), what, dst_name);
  const int me = parent.rank();
  const jitembed::device dev = boundary_device(parent);
  const int si = boundary_index_in(src.ranks, me);
  const int di = boundary_index_in(dst.ranks, me);
  const bool src_replicated = src.p.is_replicate();

  boundary_box mine_src;
  if (si >= 0) {
    mine_src = boundary_box_of(global, src, static_cast<std::size_t>(si));
    if (local == nullptr) {
      throw error(errc::invalid_argument, std::string(what) + ": parent rank " + std::to_string(me) + " is in " +
                                              src_name + " and passed no tensor");
    }
    if (!(local->shape() == mine_src.len)) {
      throw error(errc::invalid_argument,
                  std::string(what) + ": parent rank " + std::to_string(me) + " holds " + local->shape().to_string() +
                      ", its " + src_name + " part (" + src.p.to_string() + " of " + global.to_string() + " over " +
                      std::to_string(src.ranks.size()) + " ranks) is " + mine_src.len.to_string());
    }
    if (local->dtype() != dt) {
      throw error(errc::dtype_mismatch, std::string(what) + ": the tensor is " +
                                            std::string(to_string(local->dtype())) + ", the transform was asked for " +
                                            std::string(to_string(dt)));
    }
    if (local->device() != dev || (local->numel() > 0 && !local->is_contiguous())) {
      if (dev.is_cpu()) {
        throw error(errc::invalid_argument, std::string(what) + ": the tensor must be a contiguous CPU tensor");
      }
      throw error(errc::invalid_argument, std::string(what) + ": the tensor must be a contiguous tensor on cuda:" +
                                              std::to_string(dev.ordinal) + " (the communicator's device)");
    }
  }

  // Under a replicated src, the src index that sends dst index j its part: none (-1) when that dst rank
  // is in src and holds it already, otherwise j mod |src| (the senders are spread).
  const auto nsrc = src.ranks.size();
  auto replicated_supplier = [&](std::size_t j) -> int {
    if (boundary_index_in(src.ranks, dst.ranks[j]) >= 0) return -1;
    return static_cast<int>(j % nsrc);
  };

  // Tensors own heap storage, so the views in `ops` stay valid while the vectors grow.
  if (si >= 0) {
    for (std::size_t j = 0; j < dst.ranks.size(); ++j) {
      const int peer = dst.ranks[j];
      if (peer == me) continue;
      const boundary_box need = boundary_box_of(global, dst, j);
      boundary_box piece;
      if (src_replicated) {
        if (replicated_supplier(j) != si) continue;
        piece = need;
      } else {
        piece = boundary_intersect(mine_src, need);
      }
      if (piece.empty()) continue;
      sends.push_back(boundary_extract(parent, *local, mine_src, piece));
      ops.push_back(p2p_op::isend(sends.back().view(), peer));
    }
  }

  boundary_pending pending;
  auto& out = pending.out;
  auto& need = pending.need;
  auto& recvs = pending.recvs;
  if (di >= 0) {
    need = boundary_box_of(global, dst, static_cast<std::size_t>(di));
    out = mem_empty(parent, need.len, dt, dev);
    auto take = [&](std::size_t i, const boundary_box& piece) {
      if (piece.empty()) return;
      if (src.ranks[i] == me) {
        const tensor part = boundary_extract(parent, *local, mine_src, piece);
        boundary_insert(parent, out.view(), need, piece, part.view());
      } else {
        recvs.push_back({mem_empty(parent, piece.len, dt, dev), piece});
        ops.push_back(p2p_op::irecv(recvs.back().staging.view(), src.ranks[i]));
      }
    };
    if (src_replicated) {
      const int s = replicated_supplier(static_cast<std::size_t>(di));
      take(s < 0 ? static_cast<std::size_t>(si) : static_cast<std::size_t>(s), need);
    } else {
      for (std::size_t i = 0; i < nsrc; ++i) take(i, boundary_intersect(boundary_box_of(global, src, i), need));
    }
  }

  return pending;
}

// The transform as one batch_p2p.
template <communicator C>
tensor boundary_move(C& parent, const tensor_view* local, const shape& global, const layout& src, const layout& dst,
                     jitembed::dtype dt, const char* what, const char* src_name, const char* dst_name) {
  std::vector<p2p_op> ops;
  std::vector<tensor> sends;
  boundary_pending pending = boundary_post(parent, local, global, src, dst, dt, what, src_name, dst_name, ops, sends);
  if (!ops.empty()) parent.batch_p2p(std::span<const p2p_op>(ops)).value();
  return pending.finish(parent);
}

}  // namespace detail

// Moves an activation laid out as `src` to `dst` over the parent communicator, with one batch_p2p: every
// dst rank needs a box (the whole tensor under replicate, its chunk under shard); each part of it comes
// from the one src rank that holds it (a replicated src spreads the senders: the k-th dst rank takes it
// from src rank k mod |src|); a rank in both layouts that holds a part already copies it (no message).
// `local` is this rank's src part (null when it is not in src); dt is the dtype of the activation (the
// ranks outside src need it). Every rank of src ∪ dst calls it; the others may (they do nothing). Returns
// the dst part on dst ranks and an empty tensor elsewhere. CPU tensors over a host communicator (Gloo); over
// one with device memory (nccl_communicator, host_staged_communicator) tensors on its device: the pieces are
// cut, sent (one NCCL group) and inserted on its stream, the result is ready in stream order there (order
// the compute stream after it, e.g. cuda_backend::after_comm; and `local` before it, before_comm).
template <communicator C>
tensor boundary_forward(C& parent, const tensor_view* local, const shape& global, const layout& src, const layout& dst,
                        jitembed::dtype dt = dtype::f32) {
  return detail::boundary_move(parent, local, global, src, dst, dt, "boundary", "src", "dst");
}

// The gradient's way back: grad_at_dst (this rank's dst part of the gradient, null when not in dst) goes
// to src's layout (the forward transform with src and dst swapped). Returns the src part on src ranks.
template <communicator C>
tensor boundary_backward(C& parent, const tensor_view* grad_at_dst, const shape& global, const layout& src,
                         const layout& dst, jitembed::dtype dt = dtype::f32) {
  return detail::boundary_move(parent, grad_at_dst, global, dst, src, dt, "boundary_backward", "dst", "src");
}

// One direction of a boundary_exchange: the whole tensor's shape and this rank's part of it (null on a rank
// outside the layout it leaves from).
struct boundary_part {
  shape global;
  const tensor_view* local = nullptr;
};

struct boundary_exchanged {
  tensor activation;  // this rank's dst part of the activation (undefined outside dst or without one)
  tensor gradient;    // this rank's src part of the gradient (undefined outside src or without one)
};

// A pipeline step: an activation (of one microbatch) moves src → dst as boundary_forward moves it, and a
// gradient (of another microbatch) moves dst → src as boundary_backward moves it, in ONE batch_p2p, so that
// neither side waits for the other direction. Either may be absent (nullopt on every rank). Every rank of
// src ∪ dst calls it with the same directions and global shapes, in the same order of steps as the others:
// messages are matched by that order (the k-th step of a pair of ranks meets the peer's k-th), so a
// schedule that runs the same sequence of steps on every rank cannot mix up microbatches.
template <communicator C>
boundary_exchanged boundary_exchange(C& parent, const std::optional<boundary_part>& activation,
                                     const std::optional<boundary_part>& gradient, const layout& src, const layout& dst,
                                     jitembed::dtype dt = dtype::f32) {
  std::vector<p2p_op> ops;
  std::vector<tensor> sends;
  std::optional<detail::boundary_pending> fwd, bwd;
  if (activation) {
    fwd = detail::boundary_post(parent, activation->local, activation->global, src, dst, dt, "boundary_exchange", "src",
                                "dst", ops, sends);
  }
  if (gradient) {
    bwd = detail::boundary_post(parent, gradient->local, gradient->global, dst, src, dt, "boundary_exchange", "dst",
                                "src", ops, sends);
  }
  if (!ops.empty()) parent.batch_p2p(std::span<const p2p_op>(ops)).value();
  boundary_exchanged out;
  if (fwd) out.activation = fwd->finish(parent);
  if (bwd) out.gradient = bwd->finish(parent);
  return out;
}

}  // namespace jitembed::parallel
