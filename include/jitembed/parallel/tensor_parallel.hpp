// Megatron-style tensor-parallel layers with explicit forward/backward (no autograd): column- and
// row-parallel linear, vocab-parallel embedding, the column(GELU)→row MLP, each with a sequence-parallel
// variant, and the gradient sync of replicated parameters inside sequence-parallel regions. CPU, f32.
//
// Layout: weights [out, in] (nn.Linear); activations [..., hidden]. With sequence_parallel the activations
// outside the tensor-parallel region are sharded along `seq_dim` (default 0: [s, b, h] as Megatron; pass 1
// for [b, s, h]) and the full sequence length must be divisible by the degree. Each layer saves what its
// backward needs in forward(); backward() returns the input gradient and ACCUMULATES (+=) the parameter
// gradients until zero_grad(). Misuse throws jitembed::error(errc::invalid_argument) naming the numbers.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/functional.hpp"
#include "jitembed/parallel/mappings.hpp"
#include "jitembed/parallel/math.hpp"
#include "jitembed/parallel/shard.hpp"

namespace jitembed::parallel {

namespace detail {

[[noreturn]] inline void tp_invalid(const std::string& what, const std::string& msg) {
  throw error(errc::invalid_argument, what + ": " + msg);
}

inline void tp_require(const tensor_view& x, dtype t, const std::string& what, const char* name) {
  if (!x.dev().is_cpu()) tp_invalid(what, std::string(name) + " must be a CPU tensor");
  if (x.dtype() != t) {
    tp_invalid(what, std::string(name) + " must be " + std::string(to_string(t)) + ", got " +
                         std::string(to_string(x.dtype())));
  }
  if (!x.is_contiguous()) tp_invalid(what, std::string(name) + " must be contiguous, got " + x.shape().to_string());
}

inline void tp_check_group(bool valid, const std::string& what) {
  if (!valid) tp_invalid(what, "this rank is not in the communicator's group (empty communicator)");
}

inline void tp_check_divisible(std::int64_t v, const char* name, int degree, const std::string& what) {
  if (v <= 0) tp_invalid(what, std::string(name) + " " + std::to_string(v) + " must be positive");
  if (v % degree != 0) {
    tp_invalid(what, std::string(name) + " " + std::to_string(v) + " not divisible by tensor-parallel degree " +
                         std::to_string(degree));
  }
}

inline void tp_check_last(const tensor_view& x, std::int64_t want, const std::string& what, const char* name) {
  if (x.rank() == 0 || x.size(x.rank() - 1) != want) {
    tp_invalid(what, std::string(name) + " last dim must be " + std::to_string(want) + ", got " + x.shape().to_string());
  }
}

inline void tp_check_shape(const tensor_view& x, const shape& want, const std::string& what, const char* name) {
  if (x.shape() != want) tp_invalid(what, std::string(name) + " must be " + want.to_string() + ", got " + x.shape().to_string());
}

// With sequence parallelism the sequence dim must exist and must not be the hidden (last) dim.
inline void tp_check_seq_dim(const tensor_view& x, std::size_t seq_dim, const std::string& what, const char* name) {
  if (seq_dim + 1 >= x.rank()) {
    tp_invalid(what, "sequence dim " + std::to_string(seq_dim) + " must be a leading dim of " + std::string(name) + " " +
                         x.shape().to_string());
  }
}

inline void tp_check_seq_divisible(std::int64_t seq, std::size_t seq_dim, int degree, const std::string& what) {
  if (seq % degree != 0) {
    tp_invalid(what, "sequence length " + std::to_string(seq) + " (dim " + std::to_string(seq_dim) +
                         ") not divisible by sequence-parallel degree " + std::to_string(degree));
  }
}

inline shape with_last_extent(const shape& s, std::int64_t last) {
  shape out = s;
  out[out.size() - 1] = last;
  return out;
}

template <communicator C>
void all_reduce_in_place(C& comm, const tensor& t) {
  if (comm.size() > 1) comm.all_reduce(t.view(), reduce_op::sum).value();
}

// y[i, :] += b for every row of y [..., N].
inline void add_bias_rows(const tensor_view& y, const tensor_view& b) {
  const std::int64_t n = b.numel() == 0 ? 0 : static_cast<std::int64_t>(b.numel());
  if (n == 0) return;
  float* out = y.data<float>();
  const float* bias = b.data<const float>();
  const auto rows = static_cast<std::int64_t>(y.numel()) / n;
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < n; ++j) out[i * n + j] += bias[j];
  }
}

template <communicator C>
tensor gather_rows_or_copy(C& comm, const tensor_view& local, std::size_t dim, std::int64_t global) {
  if (comm.size() == 1) return copy_tensor(local);
  return all_gather_dim(comm, local, dim, global).value();
}

}  // namespace detail

// Weight sharded by output rows: rank r holds rows [r·out/n, (r+1)·out/n) and that slice of the bias.
// forward: x replicated [..., in] (copy_to_tp) — or, with sequence_parallel, x sharded along seq_dim and
// all-gathered (one all_gather of the full input) — then the local linear; the output is the local slice
// [..., out/n], or with gather_output the full [..., out] (one all_gather; not allowed with SP, as Megatron).
// backward(dy) takes the gradient of that output and returns dx: all-reduced (replicated [..., in]) or,
// with SP, reduce-scattered along seq_dim; dW and db accumulate the local shard. The gathered input is
// saved for dW (Megatron re-gathers it in backward instead, trading one all_gather for memory).
template <communicator C>
class column_parallel_linear {
 public:
  column_parallel_linear(C& comm, std::int64_t in_features, std::int64_t out_features, bool bias = true,
                         bool gather_output = false, bool sequence_parallel = false, std::size_t seq_dim = 0)
      : comm_(&comm), in_(in_features), out_(out_features), gather_output_(gather_output), sp_(sequence_parallel),
        seq_dim_(seq_dim) {
    const std::string what = "column_parallel_linear";
    detail::tp_check_group(comm.valid(), what);
    detail::tp_check_divisible(in_features, "in_features", 1, what);
    detail::tp_check_divisible(out_features, "out_features", comm.size(), what);
    if (gather_output && sequence_parallel) detail::tp_invalid(what, "gather_output is not supported with sequence_parallel");
    local_out_ = out_ / comm.size();
    weight_ = tensor::zeros(shape{local_out_, in_}, dtype::f32);
    grad_weight_ = tensor::zeros(shape{local_out_, in_}, dtype::f32);
    if (bias) {
      bias_ = tensor::zeros(shape{local_out_}, dtype::f32);
      grad_bias_ = tensor::zeros(shape{local_out_}, dtype::f32);
    }
  }

  tensor forward(const tensor_view& x) {
    const std::string what = "column_parallel_linear forward";
    detail::tp_require(x, dtype::f32, what, "x");
    detail::tp_check_last(x, in_, what, "x");
    if (sp_) {
      detail::tp_check_seq_dim(x, seq_dim_, what, "x");
      input_ = gather_from_sp::forward(*comm_, x, seq_dim_);
    } else {
      input_ = copy_to_tp::forward(*comm_, x);
    }
    tensor y = tensor::empty(detail::with_last_extent(input_.shape(), local_out_), dtype::f32);
    math::linear_forward(input_, weight_, has_bias() ? &bias_.view() : nullptr, y);
    if (gather_output_) return gather_from_tp::forward(*comm_, y);
    return y;
  }

  tensor backward(const tensor_view& dy) {
    const std::string what = "column_parallel_linear backward";
    if (!input_.defined()) detail::tp_invalid(what, "backward() without a forward()");
    detail::tp_require(dy, dtype::f32, what, "dy");
    const shape want = detail::with_last_extent(input_.shape(), gather_output_ ? out_ : local_out_);
    detail::tp_check_shape(dy, want, what, "dy");
    const tensor dy_local = gather_output_ ? gather_from_tp::backward(*comm_, dy) : tensor();
    const tensor_view& g = gather_output_ ? dy_local.view() : dy;
    tensor dx = tensor::empty(input_.shape(), dtype::f32);
    const tensor_view dxv = dx.view(), gw = grad_weight_.view(), gb = grad_bias_.view();
    math::linear_backward(input_, weight_, g, &dxv, &gw, has_bias() ? &gb : nullptr);
    input_ = tensor();
    if (sp_) return gather_from_sp::backward(*comm_, dx, seq_dim_);
    detail::all_reduce_in_place(*comm_, dx);  // copy_to_tp backward
    return dx;
  }

  // Takes this rank's rows of a full [out, in] weight (and [out] bias).
  void load_full(const tensor_view& full_weight, const tensor_view* full_bias) {
    const std::string what = "column_parallel_linear load_full";
    detail::tp_require(full_weight, dtype::f32, what, "weight");
    detail::tp_check_shape(full_weight, shape{out_, in_}, what, "weight");
    weight_ = local_chunk(full_weight, 0, comm_->size(), comm_->rank());
    if (full_bias != nullptr) {
      if (!has_bias()) detail::tp_invalid(what, "a bias was given to a layer without bias");
      detail::tp_require(*full_bias, dtype::f32, what, "bias");
      detail::tp_check_shape(*full_bias, shape{out_}, what, "bias");
      bias_ = local_chunk(*full_bias, 0, comm_->size(), comm_->rank());
    }
  }

  void load_full(const tensor_view& full_weight, const tensor_view& full_bias) { load_full(full_weight, &full_bias); }

  const tensor& weight() const noexcept { return weight_; }            // [out/n, in]
  const tensor& bias() const noexcept { return bias_; }                // [out/n] (undefined without bias)
  const tensor& grad_weight() const noexcept { return grad_weight_; }  // [out/n, in]
  const tensor& grad_bias() const noexcept { return grad_bias_; }      // [out/n]
  bool has_bias() const noexcept { return bias_.defined(); }
  void zero_grad() {
    std::memset(grad_weight_.data(), 0, grad_weight_.nbytes());
    if (has_bias()) std::memset(grad_bias_.data(), 0, grad_bias_.nbytes());
  }
  // The whole [out, in] weight gradient on every rank (one all_gather).
  tensor full_grad_weight() { return detail::gather_rows_or_copy(*comm_, grad_weight_, 0, out_); }
  // The whole [out] bias gradient on every rank (one all_gather).
  tensor full_grad_bias() {
    if (!has_bias()) detail::tp_invalid("column_parallel_linear full_grad_bias", "the layer has no bias");
    return detail::gather_rows_or_copy(*comm_, grad_bias_, 0, out_);
  }

  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  std::int64_t local_out_features() const noexcept { return local_out_; }
  bool sequence_parallel() const noexcept { return sp_; }
  std::size_t seq_dim() const noexcept { return seq_dim_; }

 private:
  C* comm_;
  std::int64_t in_, out_, local_out_ = 0;
  bool gather_output_, sp_;
  std::size_t seq_dim_;
  tensor weight_, bias_, grad_weight_, grad_bias_;
  tensor input_;  // saved by forward: the (gathered) input
};

// Weight sharded by input columns: rank r holds columns [r·in/n, (r+1)·in/n); the bias is replicated.
// forward: x is this rank's slice [..., in/n] (input_is_parallel) or the replicated [..., in] that is split
// here (scatter_to_tp); the local linear gives partial sums that are all-reduced (one all_reduce of the
// output) or, with sequence_parallel, reduce-scattered along seq_dim (one reduce_scatter of the full
// output); the bias is added AFTER the reduction. backward(dy): dy replicated (or, with SP, this rank's
// sequence shard, all-gathered), dx is [..., in/n] (or all-gathered to [..., in] when !input_is_parallel).
// The bias gradient is computed from the whole (gathered) dy, so it is complete on every rank even with SP:
// do not pass it to sync_replicated_grads.
template <communicator C>
class row_parallel_linear {
 public:
  row_parallel_linear(C& comm, std::int64_t in_features, std::int64_t out_features, bool bias = true,
                      bool input_is_parallel = false, bool sequence_parallel = false, std::size_t seq_dim = 0)
      : comm_(&comm), in_(in_features), out_(out_features), input_is_parallel_(input_is_parallel),
        sp_(sequence_parallel), seq_dim_(seq_dim) {
    const std::string what = "row_parallel_linear";
    detail::tp_check_group(comm.valid(), what);
    detail::tp_check_divisible(in_features, "in_features", comm.size(), what);
    detail::tp_check_divisible(out_features, "out_features", 1, what);
    if (sequence_parallel && !input_is_parallel) {
      detail::tp_invalid(what, "sequence_parallel needs input_is_parallel (as Megatron)");
    }
    local_in_ = in_ / comm.size();
    weight_ = tensor::zeros(shape{out_, local_in_}, dtype::f32);
    grad_weight_ = tensor::zeros(shape{out_, local_in_}, dtype::f32);
    if (bias) {
      bias_ = tensor::zeros(shape{out_}, dtype::f32);
      grad_bias_ = tensor::zeros(shape{out_}, dtype::f32);
    }
  }

  tensor forward(const tensor_view& x) {
    const std::string what = "row_parallel_linear forward";
    detail::tp_require(x, dtype::f32, what, "x");
    if (input_is_parallel_) {
      detail::tp_check_last(x, local_in_, what, "x");
      input_ = detail::copy_tensor(x);
    } else {
      detail::tp_check_last(x, in_, what, "x");
      input_ = scatter_to_tp::forward(*comm_, x);
    }
    if (sp_) {
      detail::tp_check_seq_dim(x, seq_dim_, what, "x");
      detail::tp_check_seq_divisible(x.size(seq_dim_), seq_dim_, comm_->size(), what);
    }
    tensor partial = tensor::empty(detail::with_last_extent(input_.shape(), out_), dtype::f32);
    math::linear_forward(input_, weight_, nullptr, partial);
    tensor y;
    if (sp_) {
      y = reduce_scatter_to_sp::forward(*comm_, partial, seq_dim_);
    } else {
      detail::all_reduce_in_place(*comm_, partial);  // reduce_from_tp
      y = std::move(partial);
    }
    if (has_bias()) detail::add_bias_rows(y, bias_);
    return y;
  }

  tensor backward(const tensor_view& dy) {
    const std::string what = "row_parallel_linear backward";
    if (!input_.defined()) detail::tp_invalid(what, "backward() without a forward()");
    detail::tp_require(dy, dtype::f32, what, "dy");
    shape want = detail::with_last_extent(input_.shape(), out_);
    if (sp_) want[seq_dim_] /= comm_->size();
    detail::tp_check_shape(dy, want, what, "dy");
    const tensor dy_full = sp_ ? reduce_scatter_to_sp::backward(*comm_, dy, seq_dim_) : tensor();
    const tensor_view& g = sp_ ? dy_full.view() : dy;
    tensor dx = tensor::empty(input_.shape(), dtype::f32);
    const tensor_view dxv = dx.view(), gw = grad_weight_.view(), gb = grad_bias_.view();
    math::linear_backward(input_, weight_, g, &dxv, &gw, has_bias() ? &gb : nullptr);
    input_ = tensor();
    if (input_is_parallel_) return dx;
    return scatter_to_tp::backward(*comm_, dx);
  }

  // Takes this rank's columns of a full [out, in] weight; the [out] bias is copied whole.
  void load_full(const tensor_view& full_weight, const tensor_view* full_bias) {
    const std::string what = "row_parallel_linear load_full";
    detail::tp_require(full_weight, dtype::f32, what, "weight");
    detail::tp_check_shape(full_weight, shape{out_, in_}, what, "weight");
    weight_ = local_chunk(full_weight, 1, comm_->size(), comm_->rank());
    if (full_bias != nullptr) {
      if (!has_bias()) detail::tp_invalid(what, "a bias was given to a layer without bias");
      detail::tp_require(*full_bias, dtype::f32, what, "bias");
      detail::tp_check_shape(*full_bias, shape{out_}, what, "bias");
      bias_ = detail::copy_tensor(*full_bias);
    }
  }

  void load_full(const tensor_view& full_weight, const tensor_view& full_bias) { load_full(full_weight, &full_bias); }

  const tensor& weight() const noexcept { return weight_; }            // [out, in/n]
  const tensor& bias() const noexcept { return bias_; }                // [out], replicated
  const tensor& grad_weight() const noexcept { return grad_weight_; }  // [out, in/n]
  const tensor& grad_bias() const noexcept { return grad_bias_; }      // [out], complete on every rank
  bool has_bias() const noexcept { return bias_.defined(); }
  void zero_grad() {
    std::memset(grad_weight_.data(), 0, grad_weight_.nbytes());
    if (has_bias()) std::memset(grad_bias_.data(), 0, grad_bias_.nbytes());
  }
  // The whole [out, in] weight gradient on every rank (one all_gather).
  tensor full_grad_weight() { return detail::gather_rows_or_copy(*comm_, grad_weight_, 1, in_); }
  // The [out] bias gradient (already replicated: a copy, no communication).
  tensor full_grad_bias() const {
    if (!has_bias()) detail::tp_invalid("row_parallel_linear full_grad_bias", "the layer has no bias");
    return detail::copy_tensor(grad_bias_);
  }

  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  std::int64_t local_in_features() const noexcept { return local_in_; }
  bool sequence_parallel() const noexcept { return sp_; }
  std::size_t seq_dim() const noexcept { return seq_dim_; }

 private:
  C* comm_;
  std::int64_t in_, out_, local_in_ = 0;
  bool input_is_parallel_, sp_;
  std::size_t seq_dim_;
  tensor weight_, bias_, grad_weight_, grad_bias_;
  tensor input_;  // saved by forward: this rank's input slice [..., in/n]
};

// Embedding table sharded by vocabulary rows: rank r holds rows [r·V/n, (r+1)·V/n). forward(ids) takes the
// replicated ids (i64 [...], every id in [0, V)); ids outside the local range give zero rows, and the partial
// outputs [..., hidden] are all-reduced (or, with sequence_parallel, reduce-scattered along seq_dim of the
// ids / output). backward(dout) (with SP: this rank's sequence shard, all-gathered) scatter-adds into the
// local shard's gradient only.
template <communicator C>
class vocab_parallel_embedding {
 public:
  vocab_parallel_embedding(C& comm, std::int64_t vocab, std::int64_t hidden, bool sequence_parallel = false,
                           std::size_t seq_dim = 0)
      : comm_(&comm), vocab_(vocab), hidden_(hidden), sp_(sequence_parallel), seq_dim_(seq_dim) {
    const std::string what = "vocab_parallel_embedding";
    detail::tp_check_group(comm.valid(), what);
    detail::tp_check_divisible(vocab, "vocab", comm.size(), what);
    detail::tp_check_divisible(hidden, "hidden", 1, what);
    local_vocab_ = vocab_ / comm.size();
    start_ = local_vocab_ * comm.rank();
    weight_ = tensor::zeros(shape{local_vocab_, hidden_}, dtype::f32);
    grad_weight_ = tensor::zeros(shape{local_vocab_, hidden_}, dtype::f32);
  }

  tensor forward(const tensor_view& ids) {
    const std::string what = "vocab_parallel_embedding forward";
    detail::tp_require(ids, dtype::i64, what, "ids");
    if (sp_) {
      if (seq_dim_ >= ids.rank()) {
        detail::tp_invalid(what, "sequence dim " + std::to_string(seq_dim_) + " outside ids " + ids.shape().to_string());
      }
      detail::tp_check_seq_divisible(ids.size(seq_dim_), seq_dim_, comm_->size(), what);
    }
    const std::int64_t* id = ids.data<const std::int64_t>();
    const auto count = static_cast<std::int64_t>(ids.numel());
    for (std::int64_t i = 0; i < count; ++i) {
      if (id[i] < 0 || id[i] >= vocab_) {
        detail::tp_invalid(what, "id " + std::to_string(id[i]) + " at index " + std::to_string(i) + " outside [0, " +
                                     std::to_string(vocab_) + ")");
      }
    }
    shape s = ids.shape();
    s.push_back(hidden_);
    tensor out = tensor::zeros(s, dtype::f32);
    const float* table = weight_.data<const float>();
    float* o = out.data<float>();
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t local = id[i] - start_;
      if (local < 0 || local >= local_vocab_) continue;  // another rank's row: zero here
      std::memcpy(o + i * hidden_, table + local * hidden_, static_cast<std::size_t>(hidden_) * sizeof(float));
    }
    ids_ = detail::copy_tensor(ids);
    if (sp_) return reduce_scatter_to_sp::forward(*comm_, out, seq_dim_);
    detail::all_reduce_in_place(*comm_, out);  // reduce_from_tp
    return out;
  }

  void backward(const tensor_view& dout) {
    const std::string what = "vocab_parallel_embedding backward";
    if (!ids_.defined()) detail::tp_invalid(what, "backward() without a forward()");
    detail::tp_require(dout, dtype::f32, what, "dout");
    shape want = ids_.shape();
    want.push_back(hidden_);
    if (sp_) want[seq_dim_] /= comm_->size();
    detail::tp_check_shape(dout, want, what, "dout");
    const tensor full = sp_ ? reduce_scatter_to_sp::backward(*comm_, dout, seq_dim_) : tensor();
    const float* g = sp_ ? full.data<const float>() : dout.data<const float>();
    const std::int64_t* id = ids_.data<const std::int64_t>();
    float* dt = grad_weight_.data<float>();
    const auto count = static_cast<std::int64_t>(ids_.numel());
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t local = id[i] - start_;
      if (local < 0 || local >= local_vocab_) continue;
      float* row = dt + local * hidden_;
      const float* src = g + i * hidden_;
      for (std::int64_t j = 0; j < hidden_; ++j) row[j] += src[j];
    }
    ids_ = tensor();
  }

  // Takes this rank's rows of a full [vocab, hidden] table.
  void load_full(const tensor_view& full_weight) {
    const std::string what = "vocab_parallel_embedding load_full";
    detail::tp_require(full_weight, dtype::f32, what, "weight");
    detail::tp_check_shape(full_weight, shape{vocab_, hidden_}, what, "weight");
    weight_ = local_chunk(full_weight, 0, comm_->size(), comm_->rank());
  }

  const tensor& weight() const noexcept { return weight_; }            // [vocab/n, hidden]
  const tensor& grad_weight() const noexcept { return grad_weight_; }  // [vocab/n, hidden]
  void zero_grad() { std::memset(grad_weight_.data(), 0, grad_weight_.nbytes()); }
  // The whole [vocab, hidden] gradient on every rank (one all_gather).
  tensor full_grad_weight() { return detail::gather_rows_or_copy(*comm_, grad_weight_, 0, vocab_); }

  std::int64_t vocab() const noexcept { return vocab_; }
  std::int64_t hidden() const noexcept { return hidden_; }
  std::int64_t vocab_start() const noexcept { return start_; }  // first global id of the local shard
  std::int64_t local_vocab() const noexcept { return local_vocab_; }
  bool sequence_parallel() const noexcept { return sp_; }
  std::size_t seq_dim() const noexcept { return seq_dim_; }

 private:
  C* comm_;
  std::int64_t vocab_, hidden_, local_vocab_ = 0, start_ = 0;
  bool sp_;
  std::size_t seq_dim_;
  tensor weight_, grad_weight_;
  tensor ids_;  // saved by forward
};

// All-reduces (sums) the gradients of replicated parameters whose gradient is partial per rank — the
// LayerNorm gamma/beta in a sequence-parallel region, each rank having seen only its sequence shard. The
// tensors (same dtype, contiguous, CPU) are packed into ONE flat buffer: one all_reduce of their total
// bytes, then unpacked in place. No communication with one rank or no tensors.
template <communicator C>
void sync_replicated_grads(C& comm, std::span<const tensor_view> grads) {
  const std::string what = "sync_replicated_grads";
  detail::tp_check_group(comm.valid(), what);
  if (grads.empty() || comm.size() == 1) return;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const std::string name = "grads[" + std::to_string(i) + "]";
    detail::tp_require(grads[i], grads[0].dtype(), what, name.c_str());
    total += grads[i].numel();
  }
  tensor flat = tensor::empty(shape{static_cast<std::int64_t>(total)}, grads[0].dtype());
  auto* at = static_cast<std::byte*>(flat.data());
  for (const auto& g : grads) {
    if (g.nbytes() != 0) std::memcpy(at, g.data(), g.nbytes());
    at += g.nbytes();
  }
  comm.all_reduce(flat.view(), reduce_op::sum).value();
  at = static_cast<std::byte*>(flat.data());
  for (const auto& g : grads) {
    if (g.nbytes() != 0) std::memcpy(g.data(), at, g.nbytes());
    at += g.nbytes();
  }
}

template <communicator C>
void sync_replicated_grads(C& comm, std::initializer_list<tensor_view> grads) {
  sync_replicated_grads(comm, std::span<const tensor_view>(grads.begin(), grads.size()));
}

// Megatron's MLP: column_parallel_linear(hidden → ffn) → GELU (tanh) → row_parallel_linear(ffn → hidden,
// input_is_parallel). Without SP: x and y replicated [..., hidden], one all_reduce forward (fc2) and one
// backward (fc1). With SP: x and y sharded along seq_dim, one all_gather + one reduce_scatter each way.
template <communicator C>
class tensor_parallel_mlp {
 public:
  tensor_parallel_mlp(C& comm, std::int64_t hidden, std::int64_t ffn, bool bias = true, bool sequence_parallel = false,
                      std::size_t seq_dim = 0)
      : fc1_(comm, hidden, ffn, bias, false, sequence_parallel, seq_dim),
        fc2_(comm, ffn, hidden, bias, true, sequence_parallel, seq_dim) {}

  tensor forward(const tensor_view& x) {
    hidden_ = fc1_.forward(x);
    tensor act = tensor::empty(hidden_.shape(), dtype::f32);
    math::gelu_forward(hidden_, act);
    return fc2_.forward(act);
  }

  tensor backward(const tensor_view& dy) {
    if (!hidden_.defined()) detail::tp_invalid("tensor_parallel_mlp backward", "backward() without a forward()");
    tensor dact = fc2_.backward(dy);
    math::gelu_backward(hidden_, dact, dact);
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
  column_parallel_linear<C>& fc1() noexcept { return fc1_; }
  row_parallel_linear<C>& fc2() noexcept { return fc2_; }
  const column_parallel_linear<C>& fc1() const noexcept { return fc1_; }
  const row_parallel_linear<C>& fc2() const noexcept { return fc2_; }

 private:
  column_parallel_linear<C> fc1_;
  row_parallel_linear<C> fc2_;
  tensor hidden_;  // fc1's output, pre-GELU
};

}  // namespace jitembed::parallel
