// Collectives along a tensor dimension (gather, reduce-scatter, all-to-all of shards laid out by
// torch.chunk), over any communicator. Tensors on the CPU, or on the communicator's device when it provides
// device memory (copy2d.hpp: then every staging copy is a copy2d on its stream, and nothing here waits for
// the device). The rank-major staging is packed and unpacked here; when the dimension is the outermost
// non-trivial one no staging copy is made. Every function here returns
// result<tensor> and reports every failure through it (docs/api.md rule 1.1): bad arguments
// (invalid_argument: a dim out of range, a shard of the wrong size, a negative size), a failed collective
// (its comm_failed / timeout / ...), and running out of memory (resource_exhausted). None throws: argument
// checks and collectives return their errors directly; capture() only turns what an allocation or a
// device copy throws into the result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/copy2d.hpp"
#include "jitembed/parallel/detail/capture.hpp"
#include "jitembed/parallel/shard.hpp"

namespace jitembed::parallel {

namespace detail {

inline bool all_equal(const std::vector<std::int64_t>& v) {
  for (auto x : v) {
    if (x != v.front()) return false;
  }
  return true;
}

// Whether chunks of `dim` are contiguous, rank-major pieces of x (every dim before `dim` is 1).
inline bool leading_dim(const tensor_view& x, std::size_t dim) {
  for (std::size_t i = 0; i < dim; ++i) {
    if (x.size(i) != 1) return false;
  }
  return true;
}

inline std::int64_t numel_with(const tensor_view& x, std::size_t dim, std::int64_t extent) {
  std::int64_t n = extent;
  for (std::size_t i = 0; i < x.rank(); ++i) {
    if (i != dim) n *= x.size(i);
  }
  return n;
}

inline tensor_view with_extent(void* data, const tensor_view& like, std::size_t dim, std::int64_t extent) {
  shape s = like.shape();
  s[dim] = extent;
  return tensor_view(data, like.dtype(), s, like.device());
}

// Packs x's chunks along dim (sizes) one after another into a new flat buffer on x's device (rank-major
// staging): one copy2d per chunk.
template <class C>
tensor pack_chunks(C& comm, const tensor_view& x, std::size_t dim, const std::vector<std::int64_t>& sizes) {
  tensor staging = mem_empty(comm, shape{static_cast<std::int64_t>(x.numel())}, x.dtype(), x.device());
  const slab gx = slab_around(x.shape(), dim, x.itemsize());
  auto* at = static_cast<std::byte*>(staging.data());
  std::int64_t start = 0;
  for (auto len : sizes) {
    slab piece = gx;
    piece.extent = len;
    mem_copy2d(comm, x.device(), slab_copy(at, piece, 0, x.data(), gx, start, len));
    at += static_cast<std::size_t>(numel_with(x, dim, len)) * x.itemsize();
    start += len;
  }
  return staging;
}

// The inverse: piece r (extent sizes[r] along dim, shaped like `out` otherwise) is copied to its rows of out.
template <class C>
void unpack_chunks(C& comm, const tensor& staging, const tensor_view& out, std::size_t dim,
                   const std::vector<std::int64_t>& sizes) {
  const slab go = slab_around(out.shape(), dim, out.itemsize());
  auto* at = static_cast<std::byte*>(staging.data());
  std::int64_t start = 0;
  for (auto len : sizes) {
    slab piece = go;
    piece.extent = len;
    mem_copy2d(comm, out.device(), slab_copy(out.data(), go, start, at, piece, 0, len));
    at += static_cast<std::size_t>(numel_with(out, dim, len)) * out.itemsize();
    start += len;
  }
}

inline std::vector<std::int64_t> scaled(const std::vector<std::int64_t>& sizes, std::int64_t by) {
  std::vector<std::int64_t> out(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) out[i] = sizes[i] * by;
  return out;
}

inline result<void> check_dim(const tensor_view& x, std::size_t dim, const char* what) {
  if (dim >= x.rank()) {
    return fail(errc::invalid_argument, std::string(what) + ": dim " + std::to_string(dim) + " of a rank-" +
                                            std::to_string(x.rank()) + " tensor");
  }
  return {};
}

// Contiguous, and on the CPU or the communicator's device.
template <class C>
result<void> check_tensor(const C& comm, const tensor_view& x, const char* what) {
  if (x.numel() > 0 && !x.is_contiguous()) {
    return fail(errc::invalid_argument, std::string(what) + ": tensor is not contiguous");
  }
  return check_memory(comm, x, what);
}

inline result<void> check_group(bool valid, const char* what) {
  if (!valid) return fail(errc::invalid_argument, std::string(what) + ": this rank is not in the communicator's group");
  return {};
}

}  // namespace detail

// Gathers the shards of a tensor split along `dim` (torch.chunk layout of global_size over the group):
// this rank holds chunk `rank`; every rank gets the whole tensor. One all_gather (all_gather_v if uneven).
template <communicator C>
result<tensor> all_gather_dim(C& comm, const tensor_view& local, std::size_t dim, std::int64_t global_size) {
  return detail::capture("all_gather_dim", [&]() -> result<tensor> {
    JITEMBED_TRY(detail::check_group(comm.valid(), "all_gather_dim"));
    JITEMBED_TRY(detail::check_dim(local, dim, "all_gather_dim"));
    JITEMBED_TRY(detail::check_tensor(comm, local, "all_gather_dim"));
    if (global_size < 0) {
      return fail(errc::invalid_argument, "all_gather_dim: negative global_size " + std::to_string(global_size));
    }
    const int n = comm.size();
    const auto sizes = chunk_sizes(global_size, n);
    if (local.size(dim) != sizes[static_cast<std::size_t>(comm.rank())]) {
      return fail(errc::invalid_argument, "all_gather_dim: rank " + std::to_string(comm.rank()) + " holds " +
                                              std::to_string(local.size(dim)) + " rows of dim " + std::to_string(dim) +
                                              ", its chunk of " + std::to_string(global_size) + " over " +
                                              std::to_string(n) + " ranks is " +
                                              std::to_string(sizes[static_cast<std::size_t>(comm.rank())]));
    }
    shape s = local.shape();
    s[dim] = global_size;
    tensor out = detail::mem_empty(comm, s, local.dtype(), local.device());
    const std::int64_t row = detail::numel_with(local, dim, 1);
    const auto counts = detail::scaled(sizes, row);
    const bool direct = detail::leading_dim(local, dim);
    tensor staging =
        direct ? out : detail::mem_empty(comm, shape{static_cast<std::int64_t>(out.numel())}, local.dtype(), local.device());
    const tensor_view flat(staging.data(), local.dtype(), shape{static_cast<std::int64_t>(out.numel())}, local.device());
    const tensor_view in(local.data(), local.dtype(), shape{static_cast<std::int64_t>(local.numel())}, local.device());
    if (detail::all_equal(sizes)) {
      JITEMBED_TRY(comm.all_gather(in, flat));
    } else {
      JITEMBED_TRY(comm.all_gather_v(in, flat, counts));
    }
    if (!direct) detail::unpack_chunks(comm, staging, out.view(), dim, sizes);
    return out;
  });
}

// Reduces `full` over the group and leaves chunk `rank` along `dim` here (torch.chunk layout).
// One reduce_scatter (reduce_scatter_v if uneven).
template <communicator C>
result<tensor> reduce_scatter_dim(C& comm, const tensor_view& full, std::size_t dim, reduce_op op = reduce_op::sum) {
  return detail::capture("reduce_scatter_dim", [&]() -> result<tensor> {
    JITEMBED_TRY(detail::check_group(comm.valid(), "reduce_scatter_dim"));
    JITEMBED_TRY(detail::check_dim(full, dim, "reduce_scatter_dim"));
    JITEMBED_TRY(detail::check_tensor(comm, full, "reduce_scatter_dim"));
    const int n = comm.size();
    const auto sizes = chunk_sizes(full.size(dim), n);
    const std::int64_t mine = sizes[static_cast<std::size_t>(comm.rank())];
    shape s = full.shape();
    s[dim] = mine;
    tensor out = detail::mem_empty(comm, s, full.dtype(), full.device());
    const std::int64_t row = detail::numel_with(full, dim, 1);
    const auto counts = detail::scaled(sizes, row);
    const bool direct = detail::leading_dim(full, dim);
    tensor staging = direct ? tensor() : detail::pack_chunks(comm, full, dim, sizes);
    const tensor_view in(direct ? full.data() : staging.data(), full.dtype(), shape{static_cast<std::int64_t>(full.numel())},
                         full.device());
    const tensor_view flat(out.data(), full.dtype(), shape{static_cast<std::int64_t>(out.numel())}, full.device());
    if (detail::all_equal(sizes)) {
      JITEMBED_TRY(comm.reduce_scatter(in, flat, op));
    } else {
      JITEMBED_TRY(comm.reduce_scatter_v(in, flat, counts, op));
    }
    return out;
  });
}

// A reduced copy of x (x is left as it is). One all_reduce.
template <communicator C>
result<tensor> all_reduce_copy(C& comm, const tensor_view& x, reduce_op op = reduce_op::sum) {
  return detail::capture("all_reduce_copy", [&]() -> result<tensor> {
    JITEMBED_TRY(detail::check_group(comm.valid(), "all_reduce_copy"));
    if (!x.is_contiguous()) return fail(errc::invalid_argument, "all_reduce_copy: tensor is not contiguous");
    JITEMBED_TRY(detail::check_memory(comm, x, "all_reduce_copy"));
    tensor out = detail::mem_clone(comm, x);
    JITEMBED_TRY(comm.all_reduce(out.view(), op));
    return out;
  });
}

// x is chunked along split_dim (torch.chunk over the group); chunk j goes to rank j. Each rank holds its
// chunk of concat_dim (global extent global_concat_size) and receives everyone's, concatenated in rank
// order: shard(concat_dim) → shard(split_dim). Ulysses uses it for sequence ↔ head sharding. One all_to_all
// (all_to_all_v if uneven).
template <communicator C>
result<tensor> all_to_all_dim(C& comm, const tensor_view& x, std::size_t split_dim, std::size_t concat_dim,
                              std::int64_t global_concat_size) {
  return detail::capture("all_to_all_dim", [&]() -> result<tensor> {
    JITEMBED_TRY(detail::check_group(comm.valid(), "all_to_all_dim"));
    JITEMBED_TRY(detail::check_dim(x, split_dim, "all_to_all_dim"));
    JITEMBED_TRY(detail::check_dim(x, concat_dim, "all_to_all_dim"));
    if (global_concat_size < 0) {
      return fail(errc::invalid_argument, "all_to_all_dim: negative global_concat_size " + std::to_string(global_concat_size));
    }
    if (split_dim == concat_dim) return fail(errc::invalid_argument, "all_to_all_dim: split_dim == concat_dim");
    JITEMBED_TRY(detail::check_tensor(comm, x, "all_to_all_dim"));
    const int n = comm.size();
    const auto r = static_cast<std::size_t>(comm.rank());
    const auto split_sizes = chunk_sizes(x.size(split_dim), n);
    const auto concat_sizes = chunk_sizes(global_concat_size, n);
    if (x.size(concat_dim) != concat_sizes[r]) {
      return fail(errc::invalid_argument, "all_to_all_dim: rank " + std::to_string(r) + " holds " +
                                              std::to_string(x.size(concat_dim)) + " rows of dim " +
                                              std::to_string(concat_dim) + ", its chunk of " +
                                              std::to_string(global_concat_size) + " is " + std::to_string(concat_sizes[r]));
    }
    std::vector<std::int64_t> send_counts(static_cast<std::size_t>(n)), recv_counts(static_cast<std::size_t>(n));
    for (std::size_t j = 0; j < static_cast<std::size_t>(n); ++j) {
      send_counts[j] = detail::numel_with(x, split_dim, split_sizes[j]);
      shape piece = x.shape();
      piece[split_dim] = split_sizes[r];
      piece[concat_dim] = concat_sizes[j];
      std::int64_t c = 1;
      for (auto d : piece) c *= d;
      recv_counts[j] = c;
    }
    shape s = x.shape();
    s[split_dim] = split_sizes[r];
    s[concat_dim] = global_concat_size;
    tensor out = detail::mem_empty(comm, s, x.dtype(), x.device());
    tensor send = detail::pack_chunks(comm, x, split_dim, split_sizes);
    std::int64_t recv_total = 0;
    for (auto c : recv_counts) recv_total += c;
    tensor recv = detail::mem_empty(comm, shape{recv_total}, x.dtype(), x.device());
    const tensor_view send_flat(send.data(), x.dtype(), shape{static_cast<std::int64_t>(send.numel())}, x.device());
    const tensor_view recv_flat(recv.data(), x.dtype(), shape{recv_total}, x.device());
    // Decided from the global chunk sizes, so every rank picks the same collective (a rank whose own counts
    // happen to be equal, e.g. all zero, must still join an uneven exchange).
    if (detail::all_equal(split_sizes) && detail::all_equal(concat_sizes)) {
      JITEMBED_TRY(comm.all_to_all(send_flat, recv_flat));
    } else {
      JITEMBED_TRY(comm.all_to_all_v(send_flat, send_counts, recv_flat, recv_counts));
    }
    // Received piece j has split extent split_sizes[r] and concat extent concat_sizes[j]: place it.
    const slab go = slab_around(s, concat_dim, x.itemsize());
    auto* at = static_cast<std::byte*>(recv.data());
    std::int64_t start = 0;
    for (std::size_t j = 0; j < static_cast<std::size_t>(n); ++j) {
      slab piece = go;
      piece.extent = concat_sizes[j];
      detail::mem_copy2d(comm, x.device(), slab_copy(out.data(), go, start, at, piece, 0, concat_sizes[j]));
      at += static_cast<std::size_t>(recv_counts[j]) * x.itemsize();
      start += concat_sizes[j];
    }
    return out;
  });
}

}  // namespace jitembed::parallel
