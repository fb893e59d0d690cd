// Megatron's conjugate tensor-/sequence-parallel operators (megatron/core/tensor_parallel/mappings.py):
// each is a forward collective paired with the backward collective that is its adjoint.
//
// Layout conventions (used by every layer in tensor_parallel.hpp):
//   TP operators split / gather the LAST dim (hidden); the split requires last dim % degree == 0.
//   SP operators split / gather / reduce-scatter the sequence dim `seq_dim`, default 0 ([s, b, h] as in
//   Megatron; [tokens, h] works as is; pass 1 for [b, s, h]). Splits and reduce-scatters require the
//   full sequence length % degree == 0 (as Megatron); gathers produce local × degree rows.
// Every forward/backward returns a new contiguous tensor on the input's device (the CPU, or the
// communicator's when it has device memory, copy2d.hpp); with a group of one rank no collective is
// issued (the result is a copy). forward/backward throw jitembed::error (errc::invalid_argument for bad
// shapes, the collective's error when it fails); try_forward/try_backward return the same error in a
// result<tensor> instead (what the layers use: docs/api.md rule 1.1).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/functional.hpp"
#include "jitembed/parallel/shard.hpp"

namespace jitembed::parallel {

namespace detail {

// A contiguous copy of a CPU view (what identity mappings return): core's tensor::clone.
inline result<tensor> copy_tensor(const tensor_view& x) {
  if (!x.device().is_cpu()) return fail(errc::invalid_argument, "tensor-parallel mapping: CPU tensors only");
  return tensor::wrap(nullptr, x).clone();
}

// A contiguous copy of x on its device: the CPU, or the communicator's (copy2d.hpp).
template <communicator C>
result<tensor> copy_on(C& comm, const tensor_view& x) {
  if (x.device().is_cpu()) return copy_tensor(x);
  if (!x.is_contiguous()) return fail(errc::invalid_argument, "tensor-parallel mapping: tensor is not contiguous");
  JITEMBED_TRY(check_memory(comm, x, "tensor-parallel mapping"));
  return capture("tensor-parallel mapping", [&] { return mem_clone(comm, x); });
}

inline result<std::size_t> last_dim(const tensor_view& x, const char* what) {
  if (x.rank() == 0) return fail(errc::invalid_argument, std::string(what) + ": rank-0 tensor has no last dim");
  return x.rank() - 1;
}

inline result<void> check_mapping_dim(const tensor_view& x, std::size_t dim, const char* what) {
  if (dim >= x.rank()) {
    return fail(errc::invalid_argument, std::string(what) + ": dim " + std::to_string(dim) + " of a rank-" +
                                            std::to_string(x.rank()) + " tensor " + x.shape().to_string());
  }
  return {};
}

inline result<void> check_divisible(const tensor_view& x, std::size_t dim, int degree, const char* what) {
  JITEMBED_TRY(check_mapping_dim(x, dim, what));
  if (x.size(dim) % degree != 0) {
    return fail(errc::invalid_argument, std::string(what) + ": size " + std::to_string(x.size(dim)) + " of dim " +
                                            std::to_string(dim) + " of " + x.shape().to_string() +
                                            " not divisible by parallel degree " + std::to_string(degree));
  }
  return {};
}

// This rank's chunk of x along dim (dim % degree == 0 required).
template <communicator C>
result<tensor> split_dim(C& comm, const tensor_view& x, std::size_t dim, const char* what) {
  JITEMBED_TRY(check_divisible(x, dim, comm.size(), what));
  if (comm.size() == 1) return copy_on(comm, x);
  if (x.device().is_cpu()) return capture(what, [&] { return local_chunk(x, dim, comm.size(), comm.rank()); });
  if (!x.is_contiguous()) return fail(errc::invalid_argument, std::string(what) + ": tensor is not contiguous");
  JITEMBED_TRY(check_memory(comm, x, what));
  const std::int64_t n = x.size(dim);
  return capture(what, [&] {
    return mem_narrow(comm, x, dim, chunk_offset(n, comm.size(), comm.rank()), chunk_size(n, comm.size(), comm.rank()));
  });
}

// Concatenation of every rank's x along dim (each rank holds the same extent).
template <communicator C>
result<tensor> gather_dim(C& comm, const tensor_view& x, std::size_t dim, const char* what) {
  JITEMBED_TRY(check_mapping_dim(x, dim, what));
  if (!x.is_contiguous()) return fail(errc::invalid_argument, std::string(what) + ": tensor is not contiguous");
  if (comm.size() == 1) return copy_on(comm, x);
  return all_gather_dim(comm, x, dim, x.size(dim) * comm.size());
}

// Sum over ranks, chunk `rank` along dim kept (dim % degree == 0 required).
template <communicator C>
result<tensor> reduce_scatter_along(C& comm, const tensor_view& x, std::size_t dim, const char* what) {
  JITEMBED_TRY(check_divisible(x, dim, comm.size(), what));
  if (comm.size() == 1) return copy_on(comm, x);
  return reduce_scatter_dim(comm, x, dim, reduce_op::sum);
}

template <communicator C>
result<tensor> reduce_all(C& comm, const tensor_view& x) {
  if (comm.size() == 1) return copy_on(comm, x);
  return all_reduce_copy(comm, x, reduce_op::sum);
}

template <communicator C>
result<tensor> split_last(C& comm, const tensor_view& x, const char* what) {
  JITEMBED_ASSIGN_OR_RETURN(const std::size_t d, last_dim(x, what));
  return split_dim(comm, x, d, what);
}

template <communicator C>
result<tensor> gather_last(C& comm, const tensor_view& x, const char* what) {
  JITEMBED_ASSIGN_OR_RETURN(const std::size_t d, last_dim(x, what));
  return gather_dim(comm, x, d, what);
}

}  // namespace detail

// f in Megatron: forward identity (input replicated), backward all-reduce (each rank's gradient is partial).
struct copy_to_tp {
  template <communicator C>
  static result<tensor> try_forward(C& comm, const tensor_view& x) {
    return detail::copy_on(comm, x);
  }
  template <communicator C>
  static result<tensor> try_backward(C& comm, const tensor_view& grad) {
    return detail::reduce_all(comm, grad);
  }
  template <communicator C>
  static tensor forward(C& comm, const tensor_view& x) {
    return try_forward(comm, x).value();
  }
  template <communicator C>
  static tensor backward(C& comm, const tensor_view& grad) {
    return try_backward(comm, grad).value();
  }
};

// g in Megatron: forward all-reduce of partial sums, backward identity.
struct reduce_from_tp {
  template <communicator C>
  static result<tensor> try_forward(C& comm, const tensor_view& x) {
    return detail::reduce_all(comm, x);
  }
  template <communicator C>
  static result<tensor> try_backward(C& comm, const tensor_view& grad) {
    return detail::copy_on(comm, grad);
  }
  template <communicator C>
  static tensor forward(C& comm, const tensor_view& x) {
    return try_forward(comm, x).value();
  }
  template <communicator C>
  static tensor backward(C& comm, const tensor_view& grad) {
    return try_backward(comm, grad).value();
  }
};

// Forward keeps this rank's chunk of the last dim; backward all-gathers the last dim.
struct scatter_to_tp {
  template <communicator C>
  static result<tensor> try_forward(C& comm, const tensor_view& x) {
    return detail::split_last(comm, x, "scatter_to_tp");
  }
  template <communicator C>
  static result<tensor> try_backward(C& comm, const tensor_view& grad) {
    return detail::gather_last(comm, grad, "scatter_to_tp backward");
  }
  template <communicator C>
  static tensor forward(C& comm, const tensor_view& x) {
    return try_forward(comm, x).value();
  }
  template <communicator C>
  static tensor backward(C& comm, const tensor_view& grad) {
    return try_backward(comm, grad).value();
  }
};

// Forward all-gathers the last dim; backward keeps this rank's chunk of it.
struct gather_from_tp {
  template <communicator C>
  static result<tensor> try_forward(C& comm, const tensor_view& x) {
    return detail::gather_last(comm, x, "gather_from_tp");
  }
  template <communicator C>
  static result<tensor> try_backward(C& comm, const tensor_view& grad) {
    return detail::split_last(comm, grad, "gather_from_tp backward");
  }
  template <communicator C>
  static tensor forward(C& comm, const tensor_view& x) {
    return try_forward(comm, x).value();
  }
  template <communicator C>
  static tensor backward(C& comm, const tensor_view& grad) {
    return try_backward(comm, grad).value();
  }
};

// Forward keeps this rank's chunk of the sequence dim; backward all-gathers it.
struct scatter_to_sp {
  template <communicator C>
  static result<tensor> try_forward(C& comm, const tensor_view& x, std::size_t seq_dim = 0) {
    return detail::split_dim(comm, x, seq_dim, "scatter_to_sp");
  }
  template <communicator C>
  static result<tensor> try_backward(C& comm, const tensor_view& grad, std::size_t seq_dim = 0) {
    return detail::gather_dim(comm, grad, seq_dim, "scatter_to_sp backward");
  }
  template <communicator C>
  static tensor forward(C& comm, const tensor_view& x, std::size_t seq_dim = 0) {
    return try_forward(comm, x, seq_dim).value();
  }
  template <communicator C>
  static tensor backward(C& comm, const tensor_view& grad, std::size_t seq_dim = 0) {
    return try_backward(comm, grad, seq_dim).value();
  }
};

// Forward all-gathers the sequence dim; backward reduce-scatters it (Megatron's
// tensor_parallel_output_grad=True: the consumer is tensor-parallel, so each rank's gradient is partial).
struct gather_from_sp {
  template <communicator C>
  static result<tensor> try_forward(C& comm, const tensor_view& x, std::size_t seq_dim = 0) {
    return detail::gather_dim(comm, x, seq_dim, "gather_from_sp");
  }
  template <communicator C>
  static result<tensor> try_backward(C& comm, const tensor_view& grad, std::size_t seq_dim = 0) {
    return detail::reduce_scatter_along(comm, grad, seq_dim, "gather_from_sp backward");
  }
  template <communicator C>
  static tensor forward(C& comm, const tensor_view& x, std::size_t seq_dim = 0) {
    return try_forward(comm, x, seq_dim).value();
  }
  template <communicator C>
  static tensor backward(C& comm, const tensor_view& grad, std::size_t seq_dim = 0) {
    return try_backward(comm, grad, seq_dim).value();
  }
};

// gather_from_sp with tensor_parallel_output_grad=False: the gradient is already replicated, backward
// only keeps this rank's chunk of the sequence dim.
struct gather_from_sp_split_grad {
  template <communicator C>
  static result<tensor> try_forward(C& comm, const tensor_view& x, std::size_t seq_dim = 0) {
    return detail::gather_dim(comm, x, seq_dim, "gather_from_sp_split_grad");
  }
  template <communicator C>
  static result<tensor> try_backward(C& comm, const tensor_view& grad, std::size_t seq_dim = 0) {
    return detail::split_dim(comm, grad, seq_dim, "gather_from_sp_split_grad backward");
  }
  template <communicator C>
  static tensor forward(C& comm, const tensor_view& x, std::size_t seq_dim = 0) {
    return try_forward(comm, x, seq_dim).value();
  }
  template <communicator C>
  static tensor backward(C& comm, const tensor_view& grad, std::size_t seq_dim = 0) {
    return try_backward(comm, grad, seq_dim).value();
  }
};

// Forward reduce-scatters partial sums along the sequence dim; backward all-gathers the sequence dim.
struct reduce_scatter_to_sp {
  template <communicator C>
  static result<tensor> try_forward(C& comm, const tensor_view& x, std::size_t seq_dim = 0) {
    return detail::reduce_scatter_along(comm, x, seq_dim, "reduce_scatter_to_sp");
  }
  template <communicator C>
  static result<tensor> try_backward(C& comm, const tensor_view& grad, std::size_t seq_dim = 0) {
    return detail::gather_dim(comm, grad, seq_dim, "reduce_scatter_to_sp backward");
  }
  template <communicator C>
  static tensor forward(C& comm, const tensor_view& x, std::size_t seq_dim = 0) {
    return try_forward(comm, x, seq_dim).value();
  }
  template <communicator C>
  static tensor backward(C& comm, const tensor_view& grad, std::size_t seq_dim = 0) {
    return try_backward(comm, grad, seq_dim).value();
  }
};

}  // namespace jitembed::parallel
