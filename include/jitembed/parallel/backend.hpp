// The math under the tensor-parallel layers, as a backend the layers are written over: which collective,
// which shard and which gradient is the layers' logic (written once); where tensors live and how a GEMM,
// GELU or bias runs is the backend's. cpu_backend is the reference math of jitembed/nn (CBLAS, f32);
// cuda_backend (parallel/cuda/backend.hpp) runs cuBLAS and CUDA kernels on a caller-given stream.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstring>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/nn/attention.hpp"
#include "jitembed/nn/gelu.hpp"
#include "jitembed/nn/linear.hpp"

namespace jitembed::parallel {

// What a layer needs from its math. Activations and weights have dtype() on device(); gradients of
// parameters are f32 there (accumulated in f32 whatever dtype() is). Each operation may enqueue work and
// return before it completes (a device backend); none waits for the device. A cheap-to-copy handle.
//   empty(s, t), zeros(s, t)                      new tensors on device()
//   zero(v)                                       v = 0
//   upload(cpu)                                   a CPU f32 tensor as a dtype() tensor on device()
//   download(v)                                   a CPU f32 copy of v (waits for the device: tests, checks)
//   linear_forward(x, w, bias*, y)               y = x·wᵀ (+ bias): nn::linear_forward
//   linear_backward(x, w, dy, dx*, dw*, db*)     dx = dy·w, dw += dyᵀ·x, db += Σ dy (dw, db f32)
//   add_bias_rows(y, b)                           y[i, :] += b
//   gelu_forward(x, y), gelu_backward(x, dy, dx)  nn::gelu_* (dx may be dy)
//   before_comm(comm), after_comm(comm)           order the communicator's stream after the work enqueued
//                                                 so far / the compute stream after the collectives
// and, for vocab_parallel_embedding and ulysses_attention (not part of the concept; a backend without them
// still runs the linear layers and the MLP):
//   embedding_forward(ids, table, start, out)     out[i] = table[ids[i] − start] for ids in the shard, else 0
//   embedding_backward(ids, dout, start, dtable)  dtable[ids[i] − start] += dout[i] (f32 dtable)
//   attention_forward(q, k, v, causal, out)       → attention_saved (nn::attention_forward; out an owning
//                                                 tensor that the saved state shares, not a copy)
//   attention_backward(q, k, v, saved, dout, dq, dk, dv)
//   attention_drop_output(saved)                  optional: backward recomputes forward's out instead (for a
//                                                 layer whose out is the caller's in another layout)
//   attention_delta(out, dout) → δ [B, S, H, 1],  optional pair: backward takes δ = rowsum(dO ⊙ O) computed
//   attention_use_delta(saved, δ)                 elsewhere instead of out (Ulysses' exchange_delta)
template <class B>
concept math_backend = std::copy_constructible<B> &&
    requires(const B& b, const shape& s, dtype t, const tensor_view& v, const tensor_view* p) {
  { b.device() } -> std::convertible_to<jitembed::device>;
  { b.dtype() } -> std::convertible_to<jitembed::dtype>;
  { b.empty(s, t) } -> std::same_as<tensor>;
  { b.zeros(s, t) } -> std::same_as<tensor>;
  b.zero(v);
  { b.upload(v) } -> std::same_as<tensor>;
  { b.download(v) } -> std::same_as<tensor>;
  b.linear_forward(v, v, p, v);
  b.linear_backward(v, v, v, p, p, p);
  b.add_bias_rows(v, v);
  b.gelu_forward(v, v);
  b.gelu_backward(v, v, v);
};

// The reference math: jitembed/nn on CPU f32 tensors; collectives need no ordering.
struct cpu_backend {
  jitembed::device device() const noexcept { return jitembed::device::cpu(); }
  jitembed::dtype dtype() const noexcept { return jitembed::dtype::f32; }
  tensor empty(const shape& s, jitembed::dtype t) const { return tensor::empty(s, t); }
  tensor zeros(const shape& s, jitembed::dtype t) const { return tensor::zeros(s, t); }
  void zero(const tensor_view& v) const {
    if (v.nbytes() != 0) std::memset(v.data(), 0, v.nbytes());
  }
  tensor upload(const tensor_view& x) const { return download(x); }
  tensor download(const tensor_view& x) const {
    if (!x.device().is_cpu() || x.dtype() != jitembed::dtype::f32 || (x.numel() > 0 && !x.is_contiguous())) {
      throw error(errc::invalid_argument,
                  "cpu_backend: expected a contiguous CPU f32 tensor, got " + x.shape().to_string());
    }
    return tensor::wrap(nullptr, x).clone();
  }
  void linear_forward(const tensor_view& x, const tensor_view& w, const tensor_view* bias, const tensor_view& y) const {
    nn::linear_forward(x, w, bias, y);
  }
  void linear_backward(const tensor_view& x, const tensor_view& w, const tensor_view& dy, const tensor_view* dx,
                       const tensor_view* dw, const tensor_view* db) const {
    nn::linear_backward(x, w, dy, dx, dw, db);
  }
  void add_bias_rows(const tensor_view& y, const tensor_view& b) const {
    const auto n = static_cast<std::int64_t>(b.numel());
    if (n == 0) return;
    float* out = y.data<float>();
    const float* bias = b.data<const float>();
    const auto rows = static_cast<std::int64_t>(y.numel()) / n;
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < n; ++j) out[i * n + j] += bias[j];
    }
  }
  void gelu_forward(const tensor_view& x, const tensor_view& y) const { nn::gelu_forward(x, y); }
  void gelu_backward(const tensor_view& x, const tensor_view& dy, const tensor_view& dx) const {
    nn::gelu_backward(x, dy, dx);
  }
  // ids i64 [...] in [0, V) (the layer checks them on the CPU), table [local, H], out [..., H].
  void embedding_forward(const tensor_view& ids, const tensor_view& table, std::int64_t start,
                         const tensor_view& out) const {
    const std::int64_t h = table.size(1), local = table.size(0);
    const std::int64_t* id = ids.data<const std::int64_t>();
    const float* t = table.data<const float>();
    float* o = out.data<float>();
    for (std::uint64_t i = 0; i < ids.numel(); ++i) {
      const std::int64_t r = id[i] - start;
      float* row = o + static_cast<std::int64_t>(i) * h;
      if (r < 0 || r >= local) {
        std::fill(row, row + h, 0.0f);
      } else {
        std::copy(t + r * h, t + (r + 1) * h, row);
      }
    }
  }
  void embedding_backward(const tensor_view& ids, const tensor_view& dout, std::int64_t start,
                          const tensor_view& dtable) const {
    const std::int64_t h = dtable.size(1), local = dtable.size(0);
    const std::int64_t* id = ids.data<const std::int64_t>();
    const float* g = dout.data<const float>();
    float* t = dtable.data<float>();
    for (std::uint64_t i = 0; i < ids.numel(); ++i) {
      const std::int64_t r = id[i] - start;
      if (r < 0 || r >= local) continue;
      const float* src = g + static_cast<std::int64_t>(i) * h;
      for (std::int64_t j = 0; j < h; ++j) t[r * h + j] += src[j];
    }
  }
  using attention_saved = nn::attention_saved;
  attention_saved attention_forward(const tensor_view& q, const tensor_view& k, const tensor_view& v, bool causal,
                                    const tensor& out) const {
    return nn::attention_forward(q, k, v, causal, out);
  }
  void attention_backward(const tensor_view& q, const tensor_view& k, const tensor_view& v,
                          const attention_saved& saved, const tensor_view& dout, const tensor_view& dq,
                          const tensor_view& dk, const tensor_view& dv) const {
    nn::attention_backward(q, k, v, saved, dout, dq, dk, dv);
  }
  void attention_drop_output(attention_saved& saved) const { saved.out = tensor(); }
  tensor attention_delta(const tensor_view& out, const tensor_view& dout) const {
    return nn::attention_delta(out, dout);
  }
  void attention_use_delta(attention_saved& saved, tensor delta) const { saved.delta = std::move(delta); }
  template <class C>
  void before_comm(C&) const noexcept {}
  template <class C>
  void after_comm(C&) const noexcept {}
};

static_assert(math_backend<cpu_backend>);

}  // namespace jitembed::parallel
