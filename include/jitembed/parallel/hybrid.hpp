// Per-module parallel plans (strategy, degree, ranks) and the boundary transform that moves an activation
// forward, and its gradient backward, between two modules laid out differently, with one batch of sends.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/placement.hpp"
#include "jitembed/parallel/shard.hpp"

namespace jitembed::parallel {

enum class strategy : std::uint8_t { replicate, sequence_parallel, tensor_parallel };

constexpr std::string_view to_string(strategy s) noexcept {
  switch (s) {
    case strategy::replicate:
      return "replicate";
    case strategy::sequence_parallel:
      return "sequence_parallel";
    case strategy::tensor_parallel:
      return "tensor_parallel";
  }
  return "unknown";
}

// One module's layout: `ranks` are ranks of the parent communicator (ranks.size() == degree); the module's
// own group orders them as listed (ranks[k] is the module's rank k).
struct module_plan {
  std::string name;
  strategy s = strategy::replicate;
  int degree = 1;
  std::vector<int> ranks;
};

// How an activation lies on a set of parent ranks: shard(dim) over `ranks` (ranks[k] holds chunk k) or
// replicate (each holds all of it). Partial is not a boundary layout.
struct layout {
  std::vector<int> ranks;
  placement p;
};

// The layout of a module's input/output activation: sequence parallel shards the sequence dim; tensor
// parallel and replicate hold the whole activation on every rank of the module.
inline layout activation_layout(const module_plan& m, int seq_dim) {
  if (m.s == strategy::sequence_parallel) return {m.ranks, placement::shard(seq_dim)};
  return {m.ranks, placement::replicate()};
}

// A set of module plans over a world of `world_size` ranks.
class hybrid_plan {
 public:
  // Validates the plans (invalid_argument naming the module): a name, unique names, a known strategy,
  // degree >= 1, as many ranks as the degree, ranks in [0, world_size) and listed once.
  static result<hybrid_plan> create(std::vector<module_plan> modules, int world_size) {
    if (world_size <= 0) return fail(errc::invalid_argument, "hybrid_plan: world size " + std::to_string(world_size));
    for (std::size_t i = 0; i < modules.size(); ++i) {
      const auto& m = modules[i];
      const std::string who = "hybrid_plan: module '" + m.name + "'";
      if (m.name.empty()) {
        return fail(errc::invalid_argument, "hybrid_plan: module " + std::to_string(i) + " has no name");
      }
      for (std::size_t j = 0; j < i; ++j) {
        if (modules[j].name == m.name) return fail(errc::invalid_argument, who + " is listed twice");
      }
      if (m.s != strategy::replicate && m.s != strategy::sequence_parallel && m.s != strategy::tensor_parallel) {
        return fail(errc::invalid_argument, who + ": unknown strategy");
      }
      if (m.degree < 1) return fail(errc::invalid_argument, who + ": degree " + std::to_string(m.degree) + " < 1");
      if (m.ranks.size() != static_cast<std::size_t>(m.degree)) {
        return fail(errc::invalid_argument,
                    who + ": degree " + std::to_string(m.degree) + " but " + std::to_string(m.ranks.size()) + " ranks");
      }
      for (std::size_t a = 0; a < m.ranks.size(); ++a) {
        if (m.ranks[a] < 0 || m.ranks[a] >= world_size) {
          return fail(errc::invalid_argument, who + ": rank " + std::to_string(m.ranks[a]) + " outside [0, " +
                                                  std::to_string(world_size) + ")");
        }
        for (std::size_t b = 0; b < a; ++b) {
          if (m.ranks[a] == m.ranks[b]) {
            return fail(errc::invalid_argument, who + ": rank " + std::to_string(m.ranks[a]) + " listed twice");
          }
        }
      }
    }
    return hybrid_plan(std::move(modules), world_size);
  }

  int world_size() const noexcept { return world_; }
  const std::vector<module_plan>& modules() const noexcept { return modules_; }
  bool contains(std::string_view name) const noexcept { return find(name) != nullptr; }

  // Throws not_found for a name the plan does not have.
  const module_plan& operator[](std::string_view name) const {
    const module_plan* m = find(name);
    if (!m) throw error(errc::not_found, "hybrid_plan: no module '" + std::string(name) + "'");
    return *m;
  }

  // Whether parent rank `rank` runs the module.
  bool is_member(std::string_view name, int rank) const {
    const auto& r = (*this)[name].ranks;
    return std::find(r.begin(), r.end(), rank) != r.end();
  }

  layout activation_layout(std::string_view name, int seq_dim) const {
    return parallel::activation_layout((*this)[name], seq_dim);
  }

  // The module's communicator, split from `parent` (collective over parent: every parent rank calls it
  // with the same module). Members get a group ordered like module_plan::ranks, the others an empty one.
  template <communicator C>
  result<C> group(C& parent, std::string_view name) const {
    const module_plan* m = find(name);
    if (!m) return fail(errc::not_found, "hybrid_plan: no module '" + std::string(name) + "'");
    if (!parent.valid() || parent.size() != world_) {
      return fail(errc::invalid_argument, "hybrid_plan: a world of " + std::to_string(world_) +
                                              " ranks, the parent communicator has " + std::to_string(parent.size()));
    }
    const auto it = std::find(m->ranks.begin(), m->ranks.end(), parent.rank());
    if (it == m->ranks.end()) return parent.split(kNoColor, 0);
    const int color = static_cast<int>(m - modules_.data());
    return parent.split(color, static_cast<int>(it - m->ranks.begin()));
  }

 private:
  hybrid_plan(std::vector<module_plan> modules, int world_size) : modules_(std::move(modules)), world_(world_size) {}

  const module_plan* find(std::string_view name) const noexcept {
    for (const auto& m : modules_) {
      if (m.name == name) return &m;
    }
    return nullptr;
  }

  std::vector<module_plan> modules_;
  int world_ = 0;
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

// A contiguous copy of the part `piece` of x, where x holds the box `held` (piece ⊆ held).
inline tensor boundary_extract(const tensor_view& x, const boundary_box& held, const boundary_box& piece) {
  tensor t;
  tensor_view cur = x;
  for (std::size_t d = 0; d < held.len.size(); ++d) {
    if (piece.start[d] == held.start[d] && piece.len[d] == cur.size(d)) continue;
    t = narrow(cur, d, piece.start[d] - held.start[d], piece.len[d]);
    cur = t.view();
  }
  if (!t.defined()) {
    t = tensor::empty(x.shape(), x.dtype());
    if (x.nbytes() != 0) std::memcpy(t.data(), x.data(), x.nbytes());
  }
  return t;
}

// out (holding box `held`) receives `piece` (a contiguous tensor of box p ⊆ held). In a boundary
// transform a piece differs from the destination box in one dim at most (the source's shard dim).
inline void boundary_insert(const tensor_view& out, const boundary_box& held, const boundary_box& p,
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
    if (piece.nbytes() != 0) std::memcpy(out.data(), piece.data(), piece.nbytes());
    return;
  }
  copy_into(out, dim, p.start[dim] - held.start[dim], piece);
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

// The transform from `src` to `dst` (named src_name / dst_name in errors, which start with `what`).
template <communicator C>
tensor boundary_move(C& parent, const tensor_view* local, const shape& global, const layout& src, const layout& dst,
                     jitembed::dtype dt, const char* what, const char* src_name, const char* dst_name) {
  placement_check_group(parent, what);
  for (std::size_t d = 0; d < global.size(); ++d) {
    if (global[d] < 0)
      throw error(errc::invalid_argument, std::string(what) + ": global shape " + global.to_string() + " is negative");
  }
  boundary_check_layout(src, global, parent.size(), what, src_name);
  boundary_check_layout(dst, global, parent.size(), what, dst_name);
  const int me = parent.rank();
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
    if (!local->device().is_cpu() || (local->numel() > 0 && !local->is_contiguous())) {
      throw error(errc::invalid_argument, std::string(what) + ": the tensor must be a contiguous CPU tensor");
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
  std::vector<p2p_op> ops;
  std::vector<tensor> sends;
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
      sends.push_back(boundary_extract(*local, mine_src, piece));
      ops.push_back(p2p_op::isend(sends.back().view(), peer));
    }
  }

  tensor out;
  boundary_box need;
  std::vector<boundary_recv> recvs;
  if (di >= 0) {
    need = boundary_box_of(global, dst, static_cast<std::size_t>(di));
    out = tensor::empty(need.len, dt);
    auto take = [&](std::size_t i, const boundary_box& piece) {
      if (piece.empty()) return;
      if (src.ranks[i] == me) {
        const tensor part = boundary_extract(*local, mine_src, piece);
        boundary_insert(out.view(), need, piece, part.view());
      } else {
        recvs.push_back({tensor::empty(piece.len, dt), piece});
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

  if (!ops.empty()) parent.batch_p2p(std::span<const p2p_op>(ops)).value();

  for (const auto& rv : recvs) boundary_insert(out.view(), need, rv.piece, rv.staging.view());
  return out;
}

}  // namespace detail

// Moves an activation laid out as `src` to `dst` over the parent communicator, with one batch_p2p: every
// dst rank needs a box (the whole tensor under replicate, its chunk under shard); each part of it comes
// from the one src rank that holds it (a replicated src spreads the senders: the k-th dst rank takes it
// from src rank k mod |src|); a rank in both layouts that holds a part already copies it (no message).
// `local` is this rank's src part (null when it is not in src); dt is the dtype of the activation (the
// ranks outside src need it). Every rank of src ∪ dst calls it; the others may (they do nothing). Returns
// the dst part on dst ranks and an empty tensor elsewhere. CPU tensors.
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

}  // namespace jitembed::parallel
