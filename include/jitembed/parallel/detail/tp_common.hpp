// Internals of the tensor-parallel layers: argument checks with the layers' messages, shape helpers, and the
// in-place collectives the layers issue.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/detail/capture.hpp"
#include "jitembed/parallel/functional.hpp"
#include "jitembed/parallel/mappings.hpp"
#include "jitembed/parallel/shard.hpp"

namespace jitembed::parallel {

namespace detail {

// The layers' argument checks return their invalid_argument (the layers' result-returning members
// propagate it; load_full, which returns void, throws it with .value()).
inline error_info tp_invalid(const std::string& what, const std::string& msg) {
  return fail(errc::invalid_argument, what + ": " + msg);
}

inline result<void> tp_require(const tensor_view& x, dtype t, const std::string& what, const char* name) {
  if (!x.device().is_cpu()) return tp_invalid(what, std::string(name) + " must be a CPU tensor");
  if (x.dtype() != t) {
    return tp_invalid(what, std::string(name) + " must be " + std::string(to_string(t)) + ", got " +
                         std::string(to_string(x.dtype())));
  }
  if (!x.is_contiguous()) return tp_invalid(what, std::string(name) + " must be contiguous, got " + x.shape().to_string());
  return {};
}

// tp_require for a layer's backend: on its device (the CPU message is tp_require's), of its dtype.
inline result<void> tp_require_on(const tensor_view& x, jitembed::device dev, dtype t, const std::string& what, const char* name) {
  if (dev.is_cpu()) return tp_require(x, t, what, name);
  if (x.device() != dev) return tp_invalid(what, std::string(name) + " must be on CUDA device " + std::to_string(dev.ordinal));
  if (x.dtype() != t) {
    return tp_invalid(what, std::string(name) + " must be " + std::string(to_string(t)) + ", got " +
                         std::string(to_string(x.dtype())));
  }
  if (!x.is_contiguous()) return tp_invalid(what, std::string(name) + " must be contiguous, got " + x.shape().to_string());
  return {};
}

inline result<void> tp_check_group(bool valid, const std::string& what) {
  if (!valid) return tp_invalid(what, "this rank is not in the communicator's group (empty communicator)");
  return {};
}

inline result<void> tp_check_divisible(std::int64_t v, const char* name, int degree, const std::string& what) {
  if (v <= 0) return tp_invalid(what, std::string(name) + " " + std::to_string(v) + " must be positive");
  if (v % degree != 0) {
    return tp_invalid(what, std::string(name) + " " + std::to_string(v) + " not divisible by tensor-parallel degree " +
                         std::to_string(degree));
  }
  return {};
}

inline result<void> tp_check_last(const tensor_view& x, std::int64_t want, const std::string& what, const char* name) {
  if (x.rank() == 0 || x.size(x.rank() - 1) != want) {
    return tp_invalid(what, std::string(name) + " last dim must be " + std::to_string(want) + ", got " + x.shape().to_string());
  }
  return {};
}

inline result<void> tp_check_shape(const tensor_view& x, const shape& want, const std::string& what, const char* name) {
  if (x.shape() != want) return tp_invalid(what, std::string(name) + " must be " + want.to_string() + ", got " + x.shape().to_string());
  return {};
}

// With sequence parallelism the sequence dim must exist and must not be the hidden (last) dim.
inline result<void> tp_check_seq_dim(const tensor_view& x, std::size_t seq_dim, const std::string& what, const char* name) {
  if (seq_dim + 1 >= x.rank()) {
    return tp_invalid(what, "sequence dim " + std::to_string(seq_dim) + " must be a leading dim of " + std::string(name) + " " +
                         x.shape().to_string());
  }
  return {};
}

inline result<void> tp_check_seq_divisible(std::int64_t seq, std::size_t seq_dim, int degree, const std::string& what) {
  if (seq % degree != 0) {
    return tp_invalid(what, "sequence length " + std::to_string(seq) + " (dim " + std::to_string(seq_dim) +
                         ") not divisible by sequence-parallel degree " + std::to_string(degree));
  }
  return {};
}

inline shape with_last_extent(const shape& s, std::int64_t last) {
  shape out = s;
  out[out.size() - 1] = last;
  return out;
}

template <communicator C>
result<void> all_reduce_in_place(C& comm, const tensor& t) {
  if (comm.size() > 1) return comm.all_reduce(t.view(), reduce_op::sum);
  return {};
}

template <communicator C>
result<tensor> gather_rows_or_copy(C& comm, const tensor_view& local, std::size_t dim, std::int64_t global) {
  if (comm.size() == 1) return copy_on(comm, local);
  return all_gather_dim(comm, local, dim, global);
}

}  // namespace detail

}  // namespace jitembed::parallel
