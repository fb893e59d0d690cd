// Megatron's tensor-parallel MLP: column-parallel linear → GELU → row-parallel linear.
// Conventions of all tensor-parallel layers: jitembed/parallel/tensor_parallel.hpp.
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
#include "jitembed/nn/gelu.hpp"
#include "jitembed/parallel/column_parallel_linear.hpp"
#include "jitembed/parallel/row_parallel_linear.hpp"

namespace jitembed::parallel {

// Megatron's MLP: column_parallel_linear(hidden → ffn) → GELU (tanh) → row_parallel_linear(ffn → hidden,
// input_is_parallel). Without SP: x and y replicated [..., hidden], one all_reduce forward (fc2) and one
// backward (fc1). With SP: x and y sharded along seq_dim, one all_gather + one reduce_scatter each way.
// The math runs on B (backend.hpp), as in the two linear layers.
struct tensor_parallel_mlp_options {
  bool bias = true;                // both linears
  bool sequence_parallel = false;  // x and y sharded along seq_dim
  std::size_t seq_dim = 0;
};

template <keepable_communicator C, math_backend B = cpu_backend>
class tensor_parallel_mlp {
 public:
  // The errors of column_parallel_linear::create (fc1: ffn divisible by the group size) and
  // row_parallel_linear::create (fc2). Both keep a copy of comm (keep_communicator): moving comm afterwards
  // leaves the layer valid.
  static result<tensor_parallel_mlp> create(const C& comm, std::int64_t hidden, std::int64_t ffn,
                                            tensor_parallel_mlp_options opt = {}, B backend = B()) {
    JITEMBED_ASSIGN_OR_RETURN(auto fc1, column_parallel_linear<C, B>::create(
                                            comm, hidden, ffn,
                                            {.bias = opt.bias, .sequence_parallel = opt.sequence_parallel, .seq_dim = opt.seq_dim},
                                            backend));
    JITEMBED_ASSIGN_OR_RETURN(auto fc2, row_parallel_linear<C, B>::create(comm, ffn, hidden,
                                                                          {.bias = opt.bias,
                                                                           .input_is_parallel = true,
                                                                           .sequence_parallel = opt.sequence_parallel,
                                                                           .seq_dim = opt.seq_dim},
                                                                          backend));
    return tensor_parallel_mlp(std::move(fc1), std::move(fc2), std::move(backend));
  }

  result<tensor> forward(const tensor_view& x) {
    JITEMBED_ASSIGN_OR_RETURN(hidden_, fc1_.forward(x));
    tensor act;
    JITEMBED_TRY(detail::capture("tensor_parallel_mlp forward", [&] {  // the backend throws
      act = be_.empty(hidden_.shape(), be_.dtype());
      be_.gelu_forward(hidden_, act);
    }));
    return fc2_.forward(act);
  }

  result<tensor> backward(const tensor_view& dy) {
    if (!hidden_.defined()) return detail::tp_invalid("tensor_parallel_mlp backward", "backward() without a forward()");
    JITEMBED_ASSIGN_OR_RETURN(tensor dact, fc2_.backward(dy));
    JITEMBED_TRY(detail::capture("tensor_parallel_mlp backward", [&] { be_.gelu_backward(hidden_, dact, dact); }));
    hidden_ = tensor();
    return fc1_.backward(dact);
  }

  // Full weights: w1 [ffn, hidden], b1 [ffn], w2 [hidden, ffn], b2 [hidden] (biases may be null).
  void load_full(const tensor_view& w1, const tensor_view* b1, const tensor_view& w2, const tensor_view* b2) {
    fc1_.load_full(w1, b1);
    fc2_.load_full(w2, b2);
  }
  void zero_grad() {
    fc1_.zero_grad();
    fc2_.zero_grad();
  }
  column_parallel_linear<C, B>& fc1() noexcept { return fc1_; }
  row_parallel_linear<C, B>& fc2() noexcept { return fc2_; }
  const column_parallel_linear<C, B>& fc1() const noexcept { return fc1_; }
  const row_parallel_linear<C, B>& fc2() const noexcept { return fc2_; }

 private:
  tensor_parallel_mlp(column_parallel_linear<C, B> fc1, row_parallel_linear<C, B> fc2, B backend)
      : fc1_(std::move(fc1)), fc2_(std::move(fc2)), be_(std::move(backend)) {}

  column_parallel_linear<C, B> fc1_;
  row_parallel_linear<C, B> fc2_;
  B be_;
  tensor hidden_;  // fc1's output, pre-GELU
};

}  // namespace jitembed::parallel
