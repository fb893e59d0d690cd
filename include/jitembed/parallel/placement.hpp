// DTensor-style placements over one communicator (one mesh dimension): shard(dim) / replicate / partial
// (pending sum), distribute, redistribute with PyTorch DTensor's transition table, and its backward.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/copy2d.hpp"
#include "jitembed/parallel/functional.hpp"
#include "jitembed/parallel/shard.hpp"

namespace jitembed::parallel {

// How a global tensor lies on the ranks of a group. shard(d): rank r holds chunk r of dim d (torch.chunk
// layout, uneven allowed); replicate: every rank holds all of it; partial: the global tensor is the sum of
// the ranks' local tensors.
struct placement {
  enum class kind : std::uint8_t { shard, replicate, partial };
  kind k = kind::replicate;
  int dim = -1;  // the sharded dim (shard only)

  static constexpr placement shard(int d) noexcept { return {kind::shard, d}; }
  static constexpr placement replicate() noexcept { return {kind::replicate, -1}; }
  static constexpr placement partial() noexcept { return {kind::partial, -1}; }

  constexpr bool is_shard() const noexcept { return k == kind::shard; }
  constexpr bool is_replicate() const noexcept { return k == kind::replicate; }
  constexpr bool is_partial() const noexcept { return k == kind::partial; }

  friend constexpr bool operator==(const placement& a, const placement& b) noexcept {
    return a.k == b.k && (a.k != kind::shard || a.dim == b.dim);
  }

  std::string to_string() const {
    switch (k) {
      case kind::shard:
        return "shard(" + std::to_string(dim) + ")";
      case kind::replicate:
        return "replicate";
      case kind::partial:
        return "partial(sum)";
    }
    return "unknown";
  }
};

// One rank's part of a distributed tensor: its local tensor (contiguous; on the CPU, or on the
// communicator's device when it has device memory, copy2d.hpp), the global shape and the placement over the
// communicator it is used with.
struct dtensor {
  tensor local;
  shape global;
  placement place;
};

namespace detail {

template <communicator C>
void placement_check_group(const C& comm, const char* what) {
  if (!comm.valid() || comm.size() <= 0) {
    throw error(errc::invalid_argument,
                std::string(what) + ": the communicator is empty (this rank is not in the group)");
  }
}

inline void placement_check(const placement& p, std::size_t tensor_rank, const char* what) {
  if (p.k != placement::kind::shard && p.k != placement::kind::replicate && p.k != placement::kind::partial) {
    throw error(errc::invalid_argument, std::string(what) + ": unknown placement kind");
  }
  if (p.is_shard() && (p.dim < 0 || static_cast<std::size_t>(p.dim) >= tensor_rank)) {
    throw error(errc::invalid_argument,
                std::string(what) + ": " + p.to_string() + " of a rank-" + std::to_string(tensor_rank) + " tensor");
  }
}

// The shape rank `index` of `parts` holds for a global shape under p.
inline shape placement_local_shape(const shape& global, const placement& p, int parts, int index) {
  shape s = global;
  if (p.is_shard()) {
    const auto d = static_cast<std::size_t>(p.dim);
    s[d] = chunk_size(global[d], parts, index);
  }
  return s;
}

template <communicator C>
void placement_check_dtensor(const C& comm, const dtensor& x, const char* what) {
  placement_check_group(comm, what);
  placement_check(x.place, x.global.size(), what);
  for (std::size_t i = 0; i < x.global.size(); ++i) {
    if (x.global[i] < 0) {
      throw error(errc::invalid_argument, std::string(what) + ": global shape " + x.global.to_string() +
                                              " has a negative extent at dim " + std::to_string(i));
    }
  }
  const shape want = placement_local_shape(x.global, x.place, comm.size(), comm.rank());
  if (!(x.local.shape() == want)) {
    throw error(errc::invalid_argument, std::string(what) + ": rank " + std::to_string(comm.rank()) + " of " +
                                            std::to_string(comm.size()) + " holds " + x.local.shape().to_string() +
                                            ", " + x.place.to_string() + " of " + x.global.to_string() + " needs " +
                                            want.to_string());
  }
  if (x.local.numel() > 0 && !x.local.is_contiguous()) {
    throw error(errc::invalid_argument, std::string(what) + ": the local tensor must be contiguous");
  }
  check_memory(comm, x.local.view(), what).value();
}

// A contiguous copy of a view, on its device.
template <communicator C>
tensor placement_copy(C& comm, const tensor_view& x, const char* what) {
  if (x.numel() > 0 && !x.is_contiguous()) {
    throw error(errc::invalid_argument, std::string(what) + ": tensor is not contiguous");
  }
  check_memory(comm, x, what).value();
  return mem_clone(comm, x);
}

// replicate → partial: rank 0 keeps the value, the others hold zeros (their sum is the value).
template <communicator C>
tensor placement_partial_of(C& comm, const tensor_view& x, const char* what) {
  if (comm.rank() == 0) return placement_copy(comm, x, what);
  check_memory(comm, x, what).value();
  return mem_zeros(comm, x.shape(), x.dtype(), x.device());
}

// This rank's chunk of x along dim (torch.chunk layout), as a contiguous copy on x's device.
template <communicator C>
tensor placement_chunk(C& comm, const tensor_view& x, std::size_t dim, const char* what) {
  if (x.numel() > 0 && !x.is_contiguous()) {
    throw error(errc::invalid_argument, std::string(what) + ": tensor is not contiguous");
  }
  check_memory(comm, x, what).value();
  const std::int64_t n = x.size(dim);
  return mem_narrow(comm, x, dim, chunk_offset(n, comm.size(), comm.rank()), chunk_size(n, comm.size(), comm.rank()));
}

}  // namespace detail

// Lays out `full` (the same tensor on every rank) as p, without communication: shard → this rank's chunk,
// replicate → a copy, partial → rank 0 holds the value and the others zeros.
template <communicator C>
dtensor distribute(C& comm, const tensor_view& full, placement p) {
  detail::placement_check_group(comm, "distribute");
  detail::placement_check(p, full.rank(), "distribute");
  dtensor out{tensor(), full.shape(), p};
  switch (p.k) {
    case placement::kind::shard:
      out.local = detail::placement_chunk(comm, full, static_cast<std::size_t>(p.dim), "distribute");
      break;
    case placement::kind::replicate:
      out.local = detail::placement_copy(comm, full, "distribute");
      break;
    case placement::kind::partial:
      out.local = detail::placement_partial_of(comm, full, "distribute");
      break;
  }
  return out;
}

// Moves x to placement `to` with DTensor's transition table (one collective at most):
//   shard(i) → replicate     all_gather along i            partial → replicate   all_reduce
//   partial → shard(i)       reduce_scatter along i         replicate → shard(i)  local chunk (no communication)
//   shard(i) → shard(j)      all_to_all (i ≠ j)             replicate → partial   rank 0 keeps, others zero
//   shard(i) → partial       all_gather, then as replicate  same placement        x itself (shares its storage)
// Collective over comm whenever a collective is listed. Throws invalid_argument when a placement does not
// fit the global shape or the local tensor is not this rank's part of it; a failed collective throws its error.
template <communicator C>
dtensor redistribute(C& comm, const dtensor& x, placement to) {
  detail::placement_check_dtensor(comm, x, "redistribute");
  detail::placement_check(to, x.global.size(), "redistribute");
  const placement from = x.place;
  if (from == to) return x;
  dtensor out{tensor(), x.global, to};
  const tensor_view& local = x.local.view();
  if (from.is_shard()) {
    const auto i = static_cast<std::size_t>(from.dim);
    if (to.is_shard()) {
      const auto j = static_cast<std::size_t>(to.dim);
      out.local = all_to_all_dim(comm, local, j, i, x.global[i]).value();
    } else {
      tensor full = all_gather_dim(comm, local, i, x.global[i]).value();
      out.local =
          to.is_partial() ? detail::placement_partial_of(comm, full.view(), "redistribute") : std::move(full);
    }
  } else if (from.is_partial()) {
    if (to.is_shard()) {
      out.local = reduce_scatter_dim(comm, local, static_cast<std::size_t>(to.dim), reduce_op::sum).value();
    } else {
      out.local = all_reduce_copy(comm, local, reduce_op::sum).value();
    }
  } else {  // replicate
    if (to.is_shard()) {
      out.local = detail::placement_chunk(comm, local, static_cast<std::size_t>(to.dim), "redistribute");
    } else {
      out.local = detail::placement_partial_of(comm, local, "redistribute");
    }
  }
  return out;
}

// The whole global tensor on every rank (redistribute to replicate).
template <communicator C>
tensor full_tensor(C& comm, const dtensor& x) {
  return redistribute(comm, x, placement::replicate()).local;
}

// The backward of redistribute(x: from → to): the gradient (laid out as grad_at_to.place, normally `to`)
// goes back to `from` by the inverse transition. DTensor's normalisation: when `from` is partial and the
// gradient is not, the gradient stays replicate (each rank's partial summand has the whole gradient;
// making it partial again would only add a reduction later).
template <communicator C>
dtensor redistribute_backward(C& comm, const dtensor& grad_at_to, placement from) {
  detail::placement_check(from, grad_at_to.global.size(), "redistribute_backward");
  const placement target = from.is_partial() && !grad_at_to.place.is_partial() ? placement::replicate() : from;
  return redistribute(comm, grad_at_to, target);
}

}  // namespace jitembed::parallel
