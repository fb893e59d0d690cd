// Megatron's row-parallel linear layer (weight sharded by input columns), with a sequence-parallel variant.
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

// Weight sharded by input columns: rank r holds columns [r·in/n, (r+1)·in/n); the bias is replicated.
// forward: x is this rank's slice [..., in/n] (input_is_parallel) or the replicated [..., in] that is split
// here (scatter_to_tp); the local linear gives partial sums that are all-reduced (one all_reduce of the
// output) or, with sequence_parallel, reduce-scattered along seq_dim (one reduce_scatter of the full
// output); the bias is added AFTER the reduction. backward(dy): dy replicated (or, with SP, this rank's
// sequence shard, all-gathered), dx is [..., in/n] (or all-gathered to [..., in] when !input_is_parallel).
// The bias gradient is computed from the whole (gathered) dy, so it is complete on every rank even with SP:
// do not pass it to sync_replicated_grads.
// The math runs on B (backend.hpp): x, y, weight and bias on B's device in B's dtype, gradients f32 there.
struct row_parallel_linear_options {
  bool bias = true;
  bool input_is_parallel = false;  // x is this rank's [..., in/n] slice (else the replicated [..., in], split here)
  bool sequence_parallel = false;  // the output reduce-scattered along seq_dim; needs input_is_parallel
  std::size_t seq_dim = 0;
};

template <keepable_communicator C, math_backend B = cpu_backend>
class row_parallel_linear {
 public:
  // invalid_argument: this rank outside comm's group, in_features not divisible by the group size,
  // sequence_parallel without input_is_parallel; resource_exhausted when the weights cannot be allocated.
  // The layer keeps a copy of comm (keep_communicator): moving comm afterwards leaves the layer valid.
  static result<row_parallel_linear> create(const C& comm, std::int64_t in_features, std::int64_t out_features,
                                            row_parallel_linear_options opt = {}, B backend = B()) {
    const std::string what = "row_parallel_linear";
    JITEMBED_TRY(detail::tp_check_group(comm.valid(), what));
    JITEMBED_TRY(detail::tp_check_divisible(in_features, "in_features", comm.size(), what));
    JITEMBED_TRY(detail::tp_check_divisible(out_features, "out_features", 1, what));
    if (opt.sequence_parallel && !opt.input_is_parallel) {
      return detail::tp_invalid(what, "sequence_parallel needs input_is_parallel (as Megatron)");
    }
    // The backend allocates the weights and throws when it cannot (bad_alloc, a CUDA error).
    return detail::capture("row_parallel_linear", [&] {
      return row_parallel_linear(comm, in_features, out_features, opt, std::move(backend));
    });
  }

  result<tensor> forward(const tensor_view& x) {
    const std::string what = "row_parallel_linear forward";
    JITEMBED_TRY(detail::tp_require_on(x, be_.device(), be_.dtype(), what, "x"));
    JITEMBED_TRY(detail::tp_check_last(x, input_is_parallel_ ? local_in_ : in_, what, "x"));
    if (sp_) {
      JITEMBED_TRY(detail::tp_check_seq_dim(x, seq_dim_, what, "x"));
      JITEMBED_TRY(detail::tp_check_seq_divisible(x.size(seq_dim_), seq_dim_, comm_.size(), what));
    }
    // capture: only what the backend throws (allocation, a device error); the rest returns its error.
    return detail::capture("row_parallel_linear forward", [&]() -> result<tensor> {
      be_.before_comm(comm_);
      JITEMBED_ASSIGN_OR_RETURN(input_, input_is_parallel_ ? detail::copy_on(comm_, x) : scatter_to_tp::try_forward(comm_, x));
      be_.after_comm(comm_);
      tensor partial = be_.empty(detail::with_last_extent(input_.shape(), out_), be_.dtype());
      be_.linear_forward(input_, weight_, nullptr, partial);
      tensor y;
      be_.before_comm(comm_);
      if (sp_) {
        JITEMBED_ASSIGN_OR_RETURN(y, reduce_scatter_to_sp::try_forward(comm_, partial, seq_dim_));
      } else {
        JITEMBED_TRY(detail::all_reduce_in_place(comm_, partial));  // reduce_from_tp
        y = std::move(partial);
      }
      be_.after_comm(comm_);
      if (has_bias()) be_.add_bias_rows(y, bias_);
      return y;
    });
  }

  result<tensor> backward(const tensor_view& dy) {
    const std::string what = "row_parallel_linear backward";
    if (!input_.defined()) return detail::tp_invalid(what, "backward() without a forward()");
    JITEMBED_TRY(detail::tp_require_on(dy, be_.device(), be_.dtype(), what, "dy"));
    shape want = detail::with_last_extent(input_.shape(), out_);
    if (sp_) want[seq_dim_] /= comm_.size();
    JITEMBED_TRY(detail::tp_check_shape(dy, want, what, "dy"));
    return detail::capture("row_parallel_linear backward", [&]() -> result<tensor> {
      tensor dy_full;
      if (sp_) {
        be_.before_comm(comm_);
        JITEMBED_ASSIGN_OR_RETURN(dy_full, reduce_scatter_to_sp::try_backward(comm_, dy, seq_dim_));
        be_.after_comm(comm_);
      }
      const tensor_view& g = sp_ ? dy_full.view() : dy;
      tensor dx = be_.empty(input_.shape(), be_.dtype());
      const tensor_view dxv = dx.view(), gw = grad_weight_.view(), gb = grad_bias_.view();
      be_.linear_backward(input_, weight_, g, &dxv, &gw, has_bias() ? &gb : nullptr);
      input_ = tensor();
      if (input_is_parallel_) return dx;
      be_.before_comm(comm_);
      JITEMBED_ASSIGN_OR_RETURN(tensor full, scatter_to_tp::try_backward(comm_, dx));
      be_.after_comm(comm_);
      return full;
    });
  }

  // Takes this rank's columns of a full [out, in] weight; the [out] bias is copied whole.
  void load_full(const tensor_view& full_weight, const tensor_view* full_bias) {
    const std::string what = "row_parallel_linear load_full";
    detail::tp_require(full_weight, dtype::f32, what, "weight").value();
    detail::tp_check_shape(full_weight, shape{out_, in_}, what, "weight").value();
    weight_ = be_.upload(local_chunk(full_weight, 1, comm_.size(), comm_.rank()));
    if (full_bias != nullptr) {
      if (!has_bias()) throw error(detail::tp_invalid(what, "a bias was given to a layer without bias"));
      detail::tp_require(*full_bias, dtype::f32, what, "bias").value();
      detail::tp_check_shape(*full_bias, shape{out_}, what, "bias").value();
      bias_ = be_.upload(*full_bias);
    }
  }

  void load_full(const tensor_view& full_weight, const tensor_view& full_bias) { load_full(full_weight, &full_bias); }

  const tensor& weight() const noexcept { return weight_; }            // [out, in/n]
  const tensor& bias() const noexcept { return bias_; }                // [out], replicated
  const tensor& grad_weight() const noexcept { return grad_weight_; }  // [out, in/n]
  const tensor& grad_bias() const noexcept { return grad_bias_; }      // [out], complete on every rank
  bool has_bias() const noexcept { return bias_.defined(); }
  void zero_grad() {
    be_.zero(grad_weight_);
    if (has_bias()) be_.zero(grad_bias_);
  }
  // The whole [out, in] weight gradient on every rank (one all_gather).
  result<tensor> full_grad_weight() {
    return detail::capture("row_parallel_linear full_grad_weight", [&]() -> result<tensor> {
      be_.before_comm(comm_);
      JITEMBED_ASSIGN_OR_RETURN(tensor g, detail::gather_rows_or_copy(comm_, grad_weight_, 1, in_));
      be_.after_comm(comm_);
      return g;
    });
  }
  // The [out] bias gradient (already replicated: a copy, no communication).
  result<tensor> full_grad_bias() {
    if (!has_bias()) return detail::tp_invalid("row_parallel_linear full_grad_bias", "the layer has no bias");
    return detail::capture("row_parallel_linear full_grad_bias", [&]() -> result<tensor> {
      be_.before_comm(comm_);
      JITEMBED_ASSIGN_OR_RETURN(tensor g, detail::copy_on(comm_, grad_bias_));
      be_.after_comm(comm_);
      return g;
    });
  }

  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  std::int64_t local_in_features() const noexcept { return local_in_; }
  bool sequence_parallel() const noexcept { return sp_; }
  std::size_t seq_dim() const noexcept { return seq_dim_; }
  const B& backend() const noexcept { return be_; }

 private:
  // Arguments checked by create().
  row_parallel_linear(const C& comm, std::int64_t in_features, std::int64_t out_features,
                      const row_parallel_linear_options& opt, B backend)
      : comm_(keep_communicator(comm)), be_(std::move(backend)), in_(in_features), out_(out_features),
        input_is_parallel_(opt.input_is_parallel), sp_(opt.sequence_parallel), seq_dim_(opt.seq_dim) {
    local_in_ = in_ / comm.size();
    weight_ = be_.zeros(shape{out_, local_in_}, be_.dtype());
    grad_weight_ = be_.zeros(shape{out_, local_in_}, dtype::f32);
    if (opt.bias) {
      bias_ = be_.zeros(shape{out_}, be_.dtype());
      grad_bias_ = be_.zeros(shape{out_}, dtype::f32);
    }
  }

  kept_communicator_t<C> comm_;  // a copy of the handle (or its ref() view): valid when the caller's moves
  B be_;
  std::int64_t in_, out_, local_in_ = 0;
  bool input_is_parallel_, sp_;
  std::size_t seq_dim_;
  tensor weight_, bias_, grad_weight_, grad_bias_;
  tensor input_;  // saved by forward: this rank's input slice [..., in/n]
};

}  // namespace jitembed::parallel
