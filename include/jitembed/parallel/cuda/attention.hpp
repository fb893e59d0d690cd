// Scaled dot-product attention on [B, S, H, D] CUDA tensors (nn::attention_forward / backward's layout and
// math) from strided-batched cuBLAS GEMMs over the heads of each batch row and the softmax kernels (the
// exact path: f32 scores and probabilities kept for backward; q/k/v/out in f32 or bf16, then the
// probabilities enter the second GEMM as bf16); and the interface of a fused engine that replaces it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <concepts>
#include <cstdint>
#include <memory>
#include <string_view>

#include "jitembed/core/tensor.hpp"
#include "jitembed/cuda/buffer.hpp"
#include "jitembed/cuda/stream.hpp"
#include "jitembed/parallel/cuda/gemm.hpp"
#include "jitembed/parallel/cuda/kernels.hpp"

namespace jitembed::parallel {

// What the backward needs. The exact path keeps the probabilities; a fused engine (cuda_attention_engine)
// keeps O(S) per head instead:
//   probs  f32 [B, H, Sq, Sk]  the exact path's softmax probabilities (undefined after a fused forward)
//   lse    f32 [B, H, Sq]      a fused forward's log Σ_visible exp(q·kᵀ/√D) per query row
//   out    [B, Sq, H, D]       a fused forward's output: the caller's tensor, shared, not copied (the caller
//                              leaves it unchanged until backward; attention_backward takes no `out`)
//   causal                     a fused forward's mask, which backward applies again
struct cuda_attention_saved {
  tensor probs;
  tensor lse;
  tensor out;
  bool causal = false;
};

// A fused attention kernel that cuda_backend runs instead of the exact path when one is given to
// cuda_backend::create (cudnn_attention, parallel/cuda/cudnn_sdpa.hpp, is one). The math is
// cuda_attention_forward / backward's, on the same [B, S, H, D] tensors, enqueued on the backend's stream;
// forward returns what its backward reads (lse, out, causal; no probs). Failures throw jitembed::error.
class cuda_attention_engine {
 public:
  virtual ~cuda_attention_engine() = default;
  virtual std::string_view name() const noexcept = 0;
  virtual bool supports(dtype t) const noexcept = 0;  // the activations' dtype
  virtual cuda_attention_saved forward(const tensor_view& q, const tensor_view& k, const tensor_view& v, bool causal,
                                       const tensor& out) = 0;
  virtual void backward(const tensor_view& q, const tensor_view& k, const tensor_view& v,
                        const cuda_attention_saved& saved, const tensor_view& dout, const tensor_view& dq,
                        const tensor_view& dk, const tensor_view& dv) = 0;
};

// A fused attention engine as a cuda_backend holds it: a copyable handle (docs/api.md rule 2.4), copies share
// one engine (and its cached graphs); empty: the exact path.
class cuda_attention {
 public:
  cuda_attention() = default;
  template <class Engine>
    requires std::derived_from<Engine, cuda_attention_engine>
  static cuda_attention of(Engine engine) {
    cuda_attention a;
    a.engine_ = std::make_shared<Engine>(std::move(engine));
    return a;
  }
  cuda_attention_engine* get() const noexcept { return engine_.get(); }
  cuda_attention_engine* operator->() const noexcept { return engine_.get(); }
  explicit operator bool() const noexcept { return engine_ != nullptr; }

 private:
  std::shared_ptr<cuda_attention_engine> engine_;
};

namespace detail {

inline cudaDataType_t cublas_type(dtype t) { return t == dtype::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

// Row-major C = alpha·op(A)·op(B) + beta·C for `batch` matrices at the given element strides (row pitches
// lda, ldb, ldc), as cuBLAS's column-major Cᵀ = op(B)ᵀ·op(A)ᵀ. f32 compute whatever the storage types.
inline void gemm_batched(cublas_handle& h, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                         const void* a, dtype at, std::int64_t lda, std::int64_t sa, const void* b, dtype bt,
                         std::int64_t ldb, std::int64_t sb, float beta, void* c, dtype ct, std::int64_t ldc,
                         std::int64_t sc, std::int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  JITEMBED_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h.get(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
      static_cast<int>(k), &alpha, b, cublas_type(bt), static_cast<int>(ldb), sb, a, cublas_type(at),
      static_cast<int>(lda), sa, &beta, c, cublas_type(ct), static_cast<int>(ldc), sc, static_cast<int>(batch),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// A copy of f32 x as dtype t on the stream (x itself when t is f32).
inline tensor as_dtype(const tensor& x, dtype t, jitembed::cuda::stream_ref s, int ordinal) {
  if (t == dtype::f32) return x;
  tensor out = jitembed::cuda::empty_device(x.shape(), t, s, ordinal);
  kernels::cast(dtype::f32, x.data(), t, out.data(), static_cast<std::int64_t>(x.numel()), s.get());
  return out;
}

}  // namespace detail

// out = softmax(q·kᵀ/√D [+ causal mask])·v per batch row and head; q, out [B, Sq, H, D], k, v [B, Sk, H, D],
// one dtype, contiguous, on h's device (checked by the caller). Enqueued on h's stream.
inline cuda_attention_saved cuda_attention_forward(cublas_handle& h, const tensor_view& q, const tensor_view& k,
                                                   const tensor_view& v, bool causal, const tensor_view& out) {
  const std::int64_t b = q.size(0), sq = q.size(1), sk = k.size(1), hh = q.size(2), d = q.size(3), ld = hh * d;
  const dtype t = q.dtype();
  const auto s = h.stream();
  const std::size_t es = q.itemsize();
  cuda_attention_saved saved{jitembed::cuda::empty_device(shape{b, hh, sq, sk}, dtype::f32, s, h.cuda_device())};
  const float scale = d > 0 ? 1.0f / std::sqrt(static_cast<float>(d)) : 1.0f;
  auto* p = saved.probs.data<float>();
  for (std::int64_t bi = 0; bi < b; ++bi) {
    detail::gemm_batched(h, false, true, sq, sk, d, scale, static_cast<const std::byte*>(q.data()) + bi * sq * ld * es, t,
                         ld, d, static_cast<const std::byte*>(k.data()) + bi * sk * ld * es, t, ld, d, 0.0f,
                         p + bi * hh * sq * sk, dtype::f32, sk, sq * sk, hh);
  }
  kernels::softmax_rows(p, b * hh, sq, sk, causal, s.get());
  const tensor pc = detail::as_dtype(saved.probs, t, s, h.cuda_device());
  for (std::int64_t bi = 0; bi < b; ++bi) {
    detail::gemm_batched(h, false, false, sq, d, sk, 1.0f, static_cast<const std::byte*>(pc.data()) + bi * hh * sq * sk * pc.view().itemsize(),
                         t, sk, sq * sk, static_cast<const std::byte*>(v.data()) + bi * sk * ld * es, t, ld, d, 0.0f,
                         static_cast<std::byte*>(out.data()) + bi * sq * ld * es, t, ld, d, hh);
  }
  return saved;
}

// dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P ⊙ (dP − rowsum(dP ⊙ P)), dQ = dS·K/√D, dK = dSᵀ·Q/√D (overwritten).
inline void cuda_attention_backward(cublas_handle& h, const tensor_view& q, const tensor_view& k, const tensor_view& v,
                                    const cuda_attention_saved& saved, const tensor_view& dout, const tensor_view& dq,
                                    const tensor_view& dk, const tensor_view& dv) {
  const std::int64_t b = q.size(0), sq = q.size(1), sk = k.size(1), hh = q.size(2), d = q.size(3), ld = hh * d;
  const dtype t = q.dtype();
  const auto s = h.stream();
  const std::size_t es = q.itemsize();
  const float scale = d > 0 ? 1.0f / std::sqrt(static_cast<float>(d)) : 1.0f;
  const auto at = [&](const tensor_view& x, std::int64_t rows, std::int64_t bi) {
    return static_cast<std::byte*>(x.data()) + bi * rows * ld * es;
  };
  const tensor pc = detail::as_dtype(saved.probs, t, s, h.cuda_device());
  tensor ds = jitembed::cuda::empty_device(shape{b, hh, sq, sk}, dtype::f32, s, h.cuda_device());
  const std::int64_t ps = sq * sk;
  for (std::int64_t bi = 0; bi < b; ++bi) {
    const auto* pb = static_cast<const std::byte*>(pc.data()) + bi * hh * ps * pc.view().itemsize();
    detail::gemm_batched(h, true, false, sk, d, sq, 1.0f, pb, t, sk, ps, at(dout, sq, bi), t, ld, d, 0.0f, at(dv, sk, bi), t,
                         ld, d, hh);
    detail::gemm_batched(h, false, true, sq, sk, d, 1.0f, at(dout, sq, bi), t, ld, d, at(v, sk, bi), t, ld, d, 0.0f,
                         ds.data<float>() + bi * hh * ps, dtype::f32, sk, ps, hh);
  }
  kernels::softmax_backward_rows(saved.probs.data<const float>(), ds.data<float>(), b * hh * sq, sk, s.get());
  const tensor dsc = detail::as_dtype(ds, t, s, h.cuda_device());
  for (std::int64_t bi = 0; bi < b; ++bi) {
    const auto* db = static_cast<const std::byte*>(dsc.data()) + bi * hh * ps * dsc.view().itemsize();
    detail::gemm_batched(h, false, false, sq, d, sk, scale, db, t, sk, ps, at(k, sk, bi), t, ld, d, 0.0f, at(dq, sq, bi), t,
                         ld, d, hh);
    detail::gemm_batched(h, true, false, sk, d, sq, scale, db, t, sk, ps, at(q, sq, bi), t, ld, d, 0.0f, at(dk, sk, bi), t,
                         ld, d, hh);
  }
}

}  // namespace jitembed::parallel
