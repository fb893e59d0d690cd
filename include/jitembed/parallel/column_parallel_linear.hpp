// Megatron's column-parallel linear layer (weight sharded by output rows), with a sequence-parallel variant.
// Conventions of all tensor-parallel layers: jitembed/parallel/tensor_parallel.hpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "jitembed/parallel/backend.hpp"
#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/detail/tp_common.hpp"
#include "jitembed/parallel/functional.hpp"
#include "jitembed/parallel/mappings.hpp"
#include "jitembed/parallel/shard.hpp"
#include "jitembed/nn/linear.hpp"

namespace jitembed::parallel {

// Weight sharded by output rows: rank r holds rows [r·out/n, (r+1)·out/n) and that slice of the bias.
// forward: x replicated [..., in] (copy_to_tp) — or, with sequence_parallel, x sharded along seq_dim and
// all-gathered (one all_gather of the full input) — then the local linear; the output is the local slice
// [..., out/n], or with gather_output the full [..., out] (one all_gather; not allowed with SP, as Megatron).
// backward(dy) takes the gradient of that output and returns dx: all-reduced (replicated [..., in]) or,
// with SP, reduce-scattered along seq_dim; dW and db accumulate the local shard. The gathered input is
// saved for dW (Megatron re-gathers it in backward instead, trading one all_gather for memory).
// The math runs on B (backend.hpp): x, y, weight and bias on B's device in B's dtype, gradients f32 there.
struct column_parallel_linear_options {
  bool bias = true;
  bool gather_output = false;      // forward returns the full [..., out] (one all_gather); not with SP
  bool sequence_parallel = false;  // x sharded along seq_dim, all-gathered in forward
  std::size_t seq_dim = 0;
};

template <keepable_communicator C, math_backend B = cpu_backend>
class column_parallel_linear {
 public:
  // invalid_argument: this rank outside comm's group, out_features not divisible by the group size,
  // gather_output with sequence_parallel; resource_exhausted when the weights cannot be allocated.
  // The layer keeps a copy of comm (keep_communicator): moving comm afterwards leaves the layer valid.
  static result<column_parallel_linear> create(const C& comm, std::int64_t in_features, std::int64_t out_features,
                                               column_parallel_linear_options opt = {}, B backend = B()) {
    const std::string what = "column_parallel_linear";
    JITEMBED_TRY(detail::tp_check_group(comm.valid(), what));
    JITEMBED_TRY(detail::tp_check_divisible(in_features, "in_features", 1, what));
    JITEMBED_TRY(detail::tp_check_divisible(out_features, "out_features", comm.size(), what));
    if (opt.gather_output && opt.sequence_parallel) {
      return detail::tp_invalid(what, "gather_output is not supported with sequence_parallel");
    }
    // The backend allocates the weights and throws when it cannot (bad_alloc, a CUDA error).
    return detail::capture("column_parallel_linear", [&] {
      return column_parallel_linear(comm, in_features, out_features, opt, std::move(backend));
    });
  }

  result<tensor> forward(const tensor_view& x) {
    const std::string what = "column_parallel_linear forward";
    JITEMBED_TRY(detail::tp_require_on(x, be_.device(), be_.dtype(), what, "x"));
    JITEMBED_TRY(detail::tp_check_last(x, in_, what, "x"));
    if (sp_) JITEMBED_TRY(detail::tp_check_seq_dim(x, seq_dim_, what, "x"));
    // capture: only what the backend throws (allocation, a device error); the rest returns its error.
    return detail::capture("column_parallel_linear forward", [&]() -> result<tensor> {
      be_.before_comm(comm_);
      JITEMBED_ASSIGN_OR_RETURN(input_, sp_ ? gather_from_sp::try_forward(comm_, x, seq_dim_)
                                            : copy_to_tp::try_forward(comm_, x));
      be_.after_comm(comm_);
      tensor y = be_.empty(detail::with_last_extent(input_.shape(), local_out_), be_.dtype());
      be_.linear_forward(input_, weight_, has_bias() ? &bias_.view() : nullptr, y);
      if (!gather_output_) return y;
      be_.before_comm(comm_);
      JITEMBED_ASSIGN_OR_RETURN(tensor full, gather_from_tp::try_forward(comm_, y));
      be_.after_comm(comm_);
      return full;
    });
  }

  result<tensor> backward(const tensor_view& dy) {
    const std::string what = "column_parallel_linear backward";
    if (!input_.defined()) return detail::tp_invalid(what, "backward() without a forward()");
    JITEMBED_TRY(detail::tp_require_on(dy, be_.device(), be_.dtype(), what, "dy"));
    const shape want = detail::with_last_extent(input_.shape(), gather_output_ ? out_ : local_out_);
    JITEMBED_TRY(detail::tp_check_shape(dy, want, what, "dy"));
    return detail::capture("column_parallel_linear backward", [&]() -> result<tensor> {
      tensor dy_local;
      if (gather_output_) {
        be_.before_comm(comm_);
        JITEMBED_ASSIGN_OR_RETURN(dy_local, gather_from_tp::try_backward(comm_, dy));  // no collective: this rank's columns
        be_.after_comm(comm_);
      }
      const tensor_view& g = gather_output_ ? dy_local.view() : dy;
      tensor dx = be_.empty(input_.shape(), be_.dtype());
      const tensor_view dxv = dx.view(), gw = grad_weight_.view(), gb = grad_bias_.view();
      be_.linear_backward(input_, weight_, g, &dxv, &gw, has_bias() ? &gb : nullptr);
      input_ = tensor();
      be_.before_comm(comm_);
      // dx stays alive past after_comm: it is freed on the compute stream, which must first wait for the
      // collective that reads it.
      tensor out = dx;
      if (sp_) {
        JITEMBED_ASSIGN_OR_RETURN(out, gather_from_sp::try_backward(comm_, dx, seq_dim_));
      } else {
        JITEMBED_TRY(detail::all_reduce_in_place(comm_, dx));  // copy_to_tp backward
      }
      be_.after_comm(comm_);
      return out;
    });
  }

  // Takes this rank's rows of a full [out, in] weight (and [out] bias).
  void load_full(const tensor_view& full_weight, const tensor_view* full_bias) {
    const std::string what = "column_parallel_linear load_full";
    detail::tp_require(full_weight, dtype::f32, what, "weight").value();
    detail::tp_check_shape(full_weight, shape{out_, in_}, what, "weight").value();
    weight_ = be_.upload(local_chunk(full_weight, 0, comm_.size(), comm_.rank()));
    if (full_bias != nullptr) {
      if (!has_bias()) throw error(detail::tp_invalid(what, "a bias was given to a layer without bias"));
      detail::tp_require(*full_bias, dtype::f32, what, "bias").value();
      detail::tp_check_shape(*full_bias, shape{out_}, what, "bias").value();
      bias_ = be_.upload(local_chunk(*full_bias, 0, comm_.size(), comm_.rank()));
    }
  }

  void load_full(const tensor_view& full_weight, const tensor_view& full_bias) { load_full(full_weight, &full_bias); }

  const tensor& weight() const noexcept { return weight_; }            // [out/n, in]
  const tensor& bias() const noexcept { return bias_; }                // [out/n] (undefined without bias)
  const tensor& grad_weight() const noexcept { return grad_weight_; }  // [out/n, in]
  const tensor& grad_bias() const noexcept { return grad_bias_; }      // [out/n]
  bool has_bias() const noexcept { return bias_.defined(); }
  void zero_grad() {
    be_.zero(grad_weight_);
    if (has_bias()) be_.zero(grad_bias_);
  }
  // The whole [out, in] weight gradient on every rank (one all_gather).
  result<tensor> full_grad_weight() {
    return detail::capture("column_parallel_linear full_grad_weight", [&]() -> result<tensor> {
      be_.before_comm(comm_);
      JITEMBED_ASSIGN_OR_RETURN(tensor g, detail::gather_rows_or_copy(comm_, grad_weight_, 0, out_));
      be_.after_comm(comm_);
      return g;
    });
  }
  // The whole [out] bias gradient on every rank (one all_gather).
  result<tensor> full_grad_bias() {
    if (!has_bias()) return detail::tp_invalid("column_parallel_linear full_grad_bias", "the layer has no bias");
    return detail::capture("column_parallel_linear full_grad_bias", [&]() -> result<tensor> {
      be_.before_comm(comm_);
      JITEMBED_ASSIGN_OR_RETURN(tensor g, detail::gather_rows_or_copy(comm_, grad_bias_, 0, out_));
      be_.after_comm(comm_);
      return g;
    });
  }

  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  std::int64_t local_out_features() const noexcept { return local_out_; }
  bool sequence_parallel() const noexcept { return sp_; }
  std::size_t seq_dim() const noexcept { return seq_dim_; }
  const B& backend() const noexcept { return be_; }

 private:
  // Arguments checked by create().
  column_parallel_linear(const C& comm, std::int64_t in_features, std::int64_t out_features,
                         const column_parallel_linear_options& opt, B backend)
      : comm_(keep_communicator(comm)), be_(std::move(backend)), in_(in_features), out_(out_features),
        gather_output_(opt.gather_output), sp_(opt.sequence_parallel), seq_dim_(opt.seq_dim) {
    local_out_ = out_ / comm.size();
    weight_ = be_.zeros(shape{local_out_, in_}, be_.dtype());
    grad_weight_ = be_.zeros(shape{local_out_, in_}, dtype::f32);
    if (opt.bias) {
      bias_ = be_.zeros(shape{local_out_}, be_.dtype());
      grad_bias_ = be_.zeros(shape{local_out_}, dtype::f32);
    }
  }

  kept_communicator_t<C> comm_;  // a copy of the handle (or its ref() view): valid when the caller's moves
  B be_;
  std::int64_t in_, out_, local_out_ = 0;
  bool gather_output_, sp_;
  std::size_t seq_dim_;
  tensor weight_, bias_, grad_weight_, grad_bias_;
  tensor input_;  // saved by forward: the (gathered) input
};

}  // namespace jitembed::parallel
