// CPU f32 reference math for the parallel layers (GEMM through CBLAS/OpenBLAS, linear, GELU, LayerNorm,
// attention, embedding, cross-entropy), forward and backward; the single-rank baseline TP/SP code is checked against.
//
// Conventions: every tensor is an f32 (ids/targets: i64), contiguous, CPU tensor_view; shapes follow PyTorch
// (activations [..., hidden], weights [out, in], attention [B, S, H, D]). Outputs are written through the
// views passed in; parameters documented "accumulated" are added to (+=), "overwritten" are replaced.
// Outputs must not alias inputs unless a function says so. Misuse throws jitembed::error with
// errc::dtype_mismatch (wrong dtype) or errc::invalid_argument (shape, device, layout, id out of range),
// message "<function>: <what>, got <shape>".
#pragma once

// OpenBLAS's openblas_config.h declares a global `bfloat16` typedef, which would make jitembed::bfloat16
// ambiguous for code that says `using namespace jitembed`: it is declared under another name here.
#pragma push_macro("bfloat16")
#define bfloat16 jitembed_openblas_bfloat16
#include <cblas.h>
#pragma pop_macro("bfloat16")

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/dtype.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::parallel::math {

// Threads OpenBLAS uses for one call (ranks that are threads of one process want 1 each). A no-op with
// another CBLAS.
inline void set_blas_threads(int threads) {
#if defined(OPENBLAS_VERSION)
  openblas_set_num_threads(threads);
#else
  (void)threads;
#endif
}

namespace detail {

[[noreturn]] inline void throw_arg(std::string_view fn, const std::string& what) {
  throw error(errc::invalid_argument, std::string(fn) + ": " + what);
}

// f32/i64, CPU, contiguous: the layout every function here reads with plain pointer arithmetic.
inline void require(std::string_view fn, std::string_view name, const tensor_view& v, dtype t = dtype::f32) {
  if (v.dtype() != t)
    throw error(errc::dtype_mismatch, std::string(fn) + ": " + std::string(name) + " must be " + std::string(to_string(t)) +
                                          ", got " + std::string(to_string(v.dtype())) + v.shape().to_string());
  if (!v.dev().is_cpu()) throw_arg(fn, std::string(name) + " must be a CPU tensor, got a CUDA tensor " + v.shape().to_string());
  // (an empty view has nothing to lay out; core's is_contiguous says no for zero extents)
  if (v.numel() != 0 && !v.is_contiguous()) throw_arg(fn, std::string(name) + " must be contiguous, got shape " + v.shape().to_string() +
                                            " strides " + v.strides().to_string());
  if (v.data() == nullptr && v.numel() != 0) throw_arg(fn, std::string(name) + " has no data, got " + v.shape().to_string());
}

inline void require_rank(std::string_view fn, std::string_view name, const tensor_view& v, std::size_t rank) {
  if (v.rank() != rank)
    throw_arg(fn, std::string(name) + " must be " + std::to_string(rank) + "-D, got " + v.shape().to_string());
}

inline void require_shape(std::string_view fn, std::string_view name, const tensor_view& v, const shape& want) {
  if (!(v.shape() == want)) throw_arg(fn, std::string(name) + " must be " + want.to_string() + ", got " + v.shape().to_string());
}

// Leading dims ([..., K] → prod(...)); rank ≥ 1.
inline std::int64_t rows_of(std::string_view fn, std::string_view name, const tensor_view& v) {
  if (v.rank() == 0) throw_arg(fn, std::string(name) + " must have at least 1 dim, got " + v.shape().to_string());
  std::int64_t m = 1;
  for (std::size_t i = 0; i + 1 < v.rank(); ++i) m *= v.size(i);
  return m;
}

inline shape leading_shape(const tensor_view& v) {
  shape s;
  for (std::size_t i = 0; i + 1 < v.rank(); ++i) s.push_back(v.size(i));
  return s;
}

inline shape with_last(const tensor_view& v, std::int64_t last) {
  shape s = leading_shape(v);
  s.push_back(last);
  return s;
}

inline int blas_int(std::string_view fn, std::string_view what, std::int64_t v) {
  if (v < 0 || v > INT_MAX) throw_arg(fn, std::string(what) + " = " + std::to_string(v) + " does not fit a BLAS int");
  return static_cast<int>(v);
}

// Row-major C[M,N] = alpha·op(A)·op(B) + beta·C on strided rows: lda/ldb/ldc are the row pitches in elements
// (e.g. H·D for one head of a [B, S, H, D] tensor), so per-head slices need no copy. Sizes may be zero.
inline void gemm_strided(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                         const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                         std::int64_t ldc) {
  constexpr std::string_view fn = "gemm";
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) {  // BLAS may skip A·B entirely here; keep beta == 0 a true overwrite
    for (std::int64_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      for (std::int64_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              blas_int(fn, "M", m), blas_int(fn, "N", n), blas_int(fn, "K", k), alpha, a, blas_int(fn, "lda", lda), b,
              blas_int(fn, "ldb", ldb), beta, c, blas_int(fn, "ldc", ldc));
}

// Numerically stable in-place softmax of one row; entries at index > `visible` are masked to 0.
inline void softmax_row(float* row, std::int64_t n, std::int64_t visible) {
  const std::int64_t end = std::min(n, visible + 1);
  float mx = -std::numeric_limits<float>::infinity();
  for (std::int64_t j = 0; j < end; ++j) mx = std::max(mx, row[j]);
  double sum = 0.0;
  for (std::int64_t j = 0; j < end; ++j) {
    row[j] = std::exp(row[j] - mx);
    sum += row[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (std::int64_t j = 0; j < end; ++j) row[j] *= inv;
  for (std::int64_t j = end; j < n; ++j) row[j] = 0.0f;
}

inline constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float kGeluA = 0.044715f;

}  // namespace detail

// [..., K] → [prod(...), K] over the same storage (no copy). Rank-1 [K] becomes [1, K].
inline tensor_view as_matrix(const tensor_view& x) {
  constexpr std::string_view fn = "as_matrix";
  if (x.numel() != 0 && !x.is_contiguous()) throw error(errc::invalid_argument, "as_matrix: x must be contiguous, got shape " + x.shape().to_string());
  const std::int64_t rows = detail::rows_of(fn, "x", x);
  return tensor_view(x.data(), x.dtype(), shape{rows, x.size(x.rank() - 1)}, x.dev());
}

// C[M,N] = alpha·op(A)·op(B) + beta·C for 2-D f32 CPU views (op = transpose when trans_*). C must not alias A
// or B. beta == 0 overwrites C (NaNs in C do not propagate).
inline void gemm(bool trans_a, bool trans_b, float alpha, const tensor_view& a, const tensor_view& b, float beta,
                 const tensor_view& c) {
  constexpr std::string_view fn = "gemm";
  detail::require(fn, "a", a);
  detail::require(fn, "b", b);
  detail::require(fn, "c", c);
  detail::require_rank(fn, "a", a, 2);
  detail::require_rank(fn, "b", b, 2);
  detail::require_rank(fn, "c", c, 2);
  const std::int64_t m = trans_a ? a.size(1) : a.size(0);
  const std::int64_t k = trans_a ? a.size(0) : a.size(1);
  const std::int64_t kb = trans_b ? b.size(1) : b.size(0);
  const std::int64_t n = trans_b ? b.size(0) : b.size(1);
  if (k != kb || c.size(0) != m || c.size(1) != n)
    detail::throw_arg(fn, std::string("op(a)") + (trans_a ? "=aT" : "=a") + " [" + std::to_string(m) + "," + std::to_string(k) +
                              "] x op(b)" + (trans_b ? "=bT" : "=b") + " [" + std::to_string(kb) + "," + std::to_string(n) +
                              "] -> c [" + std::to_string(m) + "," + std::to_string(n) + "] shape mismatch, got a " +
                              a.shape().to_string() + " b " + b.shape().to_string() + " c " + c.shape().to_string());
  detail::gemm_strided(trans_a, trans_b, m, n, k, alpha, a.data<const float>(), std::max<std::int64_t>(a.size(1), 1),
                       b.data<const float>(), std::max<std::int64_t>(b.size(1), 1), beta, c.data<float>(),
                       std::max<std::int64_t>(c.size(1), 1));
}

namespace detail {
// x [..., K] and w [N, K] as a linear layer needs them; returns N.
inline std::int64_t check_linear(std::string_view fn, const tensor_view& x, const tensor_view& w) {
  require(fn, "x", x);
  require(fn, "w", w);
  require_rank(fn, "w", w, 2);
  const std::int64_t k = w.size(1);
  rows_of(fn, "x", x);
  if (x.size(x.rank() - 1) != k)
    throw_arg(fn, "x last dim must equal w in-features " + std::to_string(k) + ", got x " + x.shape().to_string() + " w " +
                      w.shape().to_string());
  return w.size(0);
}
}  // namespace detail

// y = x·wᵀ (+ bias): x [..., K], w [N, K], bias [N] or null, y [..., N].
inline void linear_forward(const tensor_view& x, const tensor_view& w, const tensor_view* bias, const tensor_view& y) {
  constexpr std::string_view fn = "linear_forward";
  detail::require(fn, "y", y);
  const std::int64_t n = detail::check_linear(fn, x, w);
  detail::require_shape(fn, "y", y, detail::with_last(x, n));
  const tensor_view xm = as_matrix(x), ym = as_matrix(y);
  float beta = 0.0f;
  if (bias != nullptr) {
    detail::require(fn, "bias", *bias);
    detail::require_shape(fn, "bias", *bias, shape{n});
    const float* b = bias->data<const float>();
    float* out = ym.data<float>();
    for (std::int64_t i = 0; i < ym.size(0); ++i) std::copy(b, b + n, out + i * n);
    beta = 1.0f;
  }
  gemm(false, true, 1.0f, xm, w, beta, ym);
}

// Gradients of y = x·wᵀ + b: dx = dy·w (overwritten), dw += dyᵀ·x, db += Σ_rows dy. Each may be null.
inline void linear_backward(const tensor_view& x, const tensor_view& w, const tensor_view& dy, const tensor_view* dx,
                            const tensor_view* dw, const tensor_view* db) {
  constexpr std::string_view fn = "linear_backward";
  detail::require(fn, "dy", dy);
  const std::int64_t n = detail::check_linear(fn, x, w);
  detail::require_shape(fn, "dy", dy, detail::with_last(x, n));
  const tensor_view xm = as_matrix(x), dym = as_matrix(dy);
  if (dx != nullptr) {
    detail::require(fn, "dx", *dx);
    detail::require_shape(fn, "dx", *dx, x.shape());
    gemm(false, false, 1.0f, dym, w, 0.0f, as_matrix(*dx));
  }
  if (dw != nullptr) {
    detail::require(fn, "dw", *dw);
    detail::require_shape(fn, "dw", *dw, w.shape());
    gemm(true, false, 1.0f, dym, xm, 1.0f, *dw);
  }
  if (db != nullptr) {
    detail::require(fn, "db", *db);
    detail::require_shape(fn, "db", *db, shape{n});
    float* out = db->data<float>();
    const float* g = dym.data<const float>();
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (std::int64_t i = 0; i < dym.size(0); ++i) s += g[i * n + j];
      out[j] += static_cast<float>(s);
    }
  }
}

// y = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), elementwise; y may be x.
inline void gelu_forward(const tensor_view& x, const tensor_view& y) {
  constexpr std::string_view fn = "gelu_forward";
  detail::require(fn, "x", x);
  detail::require(fn, "y", y);
  detail::require_shape(fn, "y", y, x.shape());
  const float* in = x.data<const float>();
  float* out = y.data<float>();
  const auto n = static_cast<std::size_t>(x.numel());
  for (std::size_t i = 0; i < n; ++i) {
    const float v = in[i];
    out[i] = 0.5f * v * (1.0f + std::tanh(detail::kGeluC * (v + detail::kGeluA * v * v * v)));
  }
}

// dx = dy · d gelu(x)/dx (exact derivative of the tanh form), elementwise; dx may be dy.
inline void gelu_backward(const tensor_view& x, const tensor_view& dy, const tensor_view& dx) {
  constexpr std::string_view fn = "gelu_backward";
  detail::require(fn, "x", x);
  detail::require(fn, "dy", dy);
  detail::require(fn, "dx", dx);
  detail::require_shape(fn, "dy", dy, x.shape());
  detail::require_shape(fn, "dx", dx, x.shape());
  const float* in = x.data<const float>();
  const float* g = dy.data<const float>();
  float* out = dx.data<float>();
  const auto n = static_cast<std::size_t>(x.numel());
  for (std::size_t i = 0; i < n; ++i) {
    const float v = in[i];
    const float t = std::tanh(detail::kGeluC * (v + detail::kGeluA * v * v * v));
    const float du = detail::kGeluC * (1.0f + 3.0f * detail::kGeluA * v * v);
    out[i] = g[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

// What layer_norm_backward needs: per-row mean and 1/sqrt(var + eps), both f32 [rows] (rows = prod of x's
// leading dims).
struct layer_norm_saved {
  tensor mean, rstd;
};

// y = (x − mean)·rstd·gamma + beta over the last dim (biased variance). x, y [..., H] (y may be x); gamma,
// beta [H].
inline layer_norm_saved layer_norm_forward(const tensor_view& x, const tensor_view& gamma, const tensor_view& beta,
                                           float eps, const tensor_view& y) {
  constexpr std::string_view fn = "layer_norm_forward";
  detail::require(fn, "x", x);
  detail::require(fn, "gamma", gamma);
  detail::require(fn, "beta", beta);
  detail::require(fn, "y", y);
  const std::int64_t m = detail::rows_of(fn, "x", x);
  const std::int64_t h = x.size(x.rank() - 1);
  detail::require_shape(fn, "gamma", gamma, shape{h});
  detail::require_shape(fn, "beta", beta, shape{h});
  detail::require_shape(fn, "y", y, x.shape());
  if (h == 0) detail::throw_arg(fn, "normalized dim must be > 0, got x " + x.shape().to_string());
  if (!(eps >= 0.0f)) detail::throw_arg(fn, "eps must be >= 0, got " + std::to_string(eps));
  layer_norm_saved saved{tensor::empty(shape{m}, dtype::f32), tensor::empty(shape{m}, dtype::f32)};
  const float* in = x.data<const float>();
  const float* g = gamma.data<const float>();
  const float* b = beta.data<const float>();
  float* out = y.data<float>();
  float* mean = saved.mean.data<float>();
  float* rstd = saved.rstd.data<float>();
  for (std::int64_t i = 0; i < m; ++i) {
    const float* row = in + i * h;
    double s = 0.0;
    for (std::int64_t j = 0; j < h; ++j) s += row[j];
    const double mu = s / static_cast<double>(h);
    double v = 0.0;
    for (std::int64_t j = 0; j < h; ++j) v += (row[j] - mu) * (row[j] - mu);
    const double r = 1.0 / std::sqrt(v / static_cast<double>(h) + static_cast<double>(eps));
    mean[i] = static_cast<float>(mu);
    rstd[i] = static_cast<float>(r);
    float* o = out + i * h;  // may alias row: each element is read before it is written
    for (std::int64_t j = 0; j < h; ++j) o[j] = static_cast<float>((row[j] - mu) * r) * g[j] + b[j];
  }
  return saved;
}

// dx (overwritten) = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·gamma, x̂ = (x − mean)·rstd;
// dgamma += Σ_rows dy·x̂, dbeta += Σ_rows dy (either may be null).
inline void layer_norm_backward(const tensor_view& x, const tensor_view& gamma, const layer_norm_saved& saved,
                                const tensor_view& dy, const tensor_view& dx, const tensor_view* dgamma,
                                const tensor_view* dbeta) {
  constexpr std::string_view fn = "layer_norm_backward";
  detail::require(fn, "x", x);
  detail::require(fn, "gamma", gamma);
  detail::require(fn, "dy", dy);
  detail::require(fn, "dx", dx);
  const std::int64_t m = detail::rows_of(fn, "x", x);
  const std::int64_t h = x.size(x.rank() - 1);
  detail::require_shape(fn, "gamma", gamma, shape{h});
  detail::require_shape(fn, "dy", dy, x.shape());
  detail::require_shape(fn, "dx", dx, x.shape());
  detail::require(fn, "saved.mean", saved.mean);
  detail::require(fn, "saved.rstd", saved.rstd);
  detail::require_shape(fn, "saved.mean", saved.mean, shape{m});
  detail::require_shape(fn, "saved.rstd", saved.rstd, shape{m});
  float* dg = nullptr;
  float* dbt = nullptr;
  if (dgamma != nullptr) {
    detail::require(fn, "dgamma", *dgamma);
    detail::require_shape(fn, "dgamma", *dgamma, shape{h});
    dg = dgamma->data<float>();
  }
  if (dbeta != nullptr) {
    detail::require(fn, "dbeta", *dbeta);
    detail::require_shape(fn, "dbeta", *dbeta, shape{h});
    dbt = dbeta->data<float>();
  }
  if (h == 0) return;
  const float* in = x.data<const float>();
  const float* gm = gamma.data<const float>();
  const float* gy = dy.data<const float>();
  float* out = dx.data<float>();
  const float* mean = saved.mean.data<const float>();
  const float* rstd = saved.rstd.data<const float>();
  std::vector<double> dg_acc(dg ? static_cast<std::size_t>(h) : 0), db_acc(dbt ? static_cast<std::size_t>(h) : 0);
  std::vector<float> xhat(static_cast<std::size_t>(h));
  for (std::int64_t i = 0; i < m; ++i) {
    const float* row = in + i * h;
    const float* gr = gy + i * h;
    const float r = rstd[i];
    double sum_g = 0.0, sum_gx = 0.0;
    for (std::int64_t j = 0; j < h; ++j) {
      const float xh = (row[j] - mean[i]) * r;
      xhat[static_cast<std::size_t>(j)] = xh;
      const double g = static_cast<double>(gr[j]) * gm[j];
      sum_g += g;
      sum_gx += g * xh;
      if (dg) dg_acc[static_cast<std::size_t>(j)] += static_cast<double>(gr[j]) * xh;
      if (dbt) db_acc[static_cast<std::size_t>(j)] += gr[j];
    }
    const double mg = sum_g / static_cast<double>(h), mgx = sum_gx / static_cast<double>(h);
    float* o = out + i * h;
    for (std::int64_t j = 0; j < h; ++j) {
      const double g = static_cast<double>(gr[j]) * gm[j];
      o[j] = static_cast<float>(r * (g - mg - xhat[static_cast<std::size_t>(j)] * mgx));
    }
  }
  for (std::int64_t j = 0; j < h; ++j) {
    if (dg) dg[j] += static_cast<float>(dg_acc[static_cast<std::size_t>(j)]);
    if (dbt) dbt[j] += static_cast<float>(db_acc[static_cast<std::size_t>(j)]);
  }
}

// Softmax probabilities from the forward pass, f32 [B, H, Sq, Sk] (masked entries are exactly 0).
struct attention_saved {
  tensor probs;
};

namespace detail {

struct attention_dims {
  std::int64_t b, sq, sk, h, d;
};

inline attention_dims check_attention(std::string_view fn, const tensor_view& q, const tensor_view& k,
                                      const tensor_view& v) {
  require(fn, "q", q);
  require(fn, "k", k);
  require(fn, "v", v);
  require_rank(fn, "q", q, 4);
  require_rank(fn, "k", k, 4);
  require_shape(fn, "v", v, k.shape());
  if (k.size(0) != q.size(0) || k.size(2) != q.size(2) || k.size(3) != q.size(3))
    throw_arg(fn, "k [B, Sk, H, D] must match q [B, Sq, H, D] in B, H and D, got q " + q.shape().to_string() + " k " +
                      k.shape().to_string());
  return {q.size(0), q.size(1), k.size(1), q.size(2), q.size(3)};
}

}  // namespace detail

// out = softmax(q·kᵀ/√D [+ causal mask])·v per batch and head. q, out [B, Sq, H, D]; k, v [B, Sk, H, D].
// causal: key j is visible to query i iff j ≤ i (torch's scaled_dot_product_attention(is_causal=True)).
// Per-head slices are read in place (row pitch H·D), not copied.
inline attention_saved attention_forward(const tensor_view& q, const tensor_view& k, const tensor_view& v, bool causal,
                                         const tensor_view& out) {
  constexpr std::string_view fn = "attention_forward";
  const auto dm = detail::check_attention(fn, q, k, v);
  detail::require(fn, "out", out);
  detail::require_shape(fn, "out", out, q.shape());
  if (dm.sq > 0 && dm.sk == 0) detail::throw_arg(fn, "no keys to attend to, got k " + k.shape().to_string());
  attention_saved saved{tensor::empty(shape{dm.b, dm.h, dm.sq, dm.sk}, dtype::f32)};
  const std::int64_t ld = dm.h * dm.d;
  const float scale = dm.d > 0 ? 1.0f / std::sqrt(static_cast<float>(dm.d)) : 1.0f;
  for (std::int64_t bi = 0; bi < dm.b; ++bi) {
    for (std::int64_t hi = 0; hi < dm.h; ++hi) {
      const float* qh = q.data<const float>() + bi * dm.sq * ld + hi * dm.d;
      const float* kh = k.data<const float>() + bi * dm.sk * ld + hi * dm.d;
      const float* vh = v.data<const float>() + bi * dm.sk * ld + hi * dm.d;
      float* oh = out.data<float>() + bi * dm.sq * ld + hi * dm.d;
      float* p = saved.probs.data<float>() + (bi * dm.h + hi) * dm.sq * dm.sk;
      detail::gemm_strided(false, true, dm.sq, dm.sk, dm.d, scale, qh, ld, kh, ld, 0.0f, p, std::max<std::int64_t>(dm.sk, 1));
      for (std::int64_t i = 0; i < dm.sq; ++i)
        detail::softmax_row(p + i * dm.sk, dm.sk, causal ? i : dm.sk);
      detail::gemm_strided(false, false, dm.sq, dm.d, dm.sk, 1.0f, p, std::max<std::int64_t>(dm.sk, 1), vh, ld, 0.0f, oh, ld);
    }
  }
  return saved;
}

// dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P ⊙ (dP − rowsum(dP ⊙ P)), dQ = dS·K/√D, dK = dSᵀ·Q/√D; dq, dk, dv overwritten.
inline void attention_backward(const tensor_view& q, const tensor_view& k, const tensor_view& v,
                               const attention_saved& saved, const tensor_view& dout, const tensor_view& dq,
                               const tensor_view& dk, const tensor_view& dv) {
  constexpr std::string_view fn = "attention_backward";
  const auto dm = detail::check_attention(fn, q, k, v);
  detail::require(fn, "saved.probs", saved.probs);
  detail::require_shape(fn, "saved.probs", saved.probs, shape{dm.b, dm.h, dm.sq, dm.sk});
  detail::require(fn, "dout", dout);
  detail::require(fn, "dq", dq);
  detail::require(fn, "dk", dk);
  detail::require(fn, "dv", dv);
  detail::require_shape(fn, "dout", dout, q.shape());
  detail::require_shape(fn, "dq", dq, q.shape());
  detail::require_shape(fn, "dk", dk, k.shape());
  detail::require_shape(fn, "dv", dv, v.shape());
  const std::int64_t ld = dm.h * dm.d;
  const std::int64_t ldp = std::max<std::int64_t>(dm.sk, 1);
  const float scale = dm.d > 0 ? 1.0f / std::sqrt(static_cast<float>(dm.d)) : 1.0f;
  std::vector<float> ds(static_cast<std::size_t>(dm.sq * dm.sk));
  for (std::int64_t bi = 0; bi < dm.b; ++bi) {
    for (std::int64_t hi = 0; hi < dm.h; ++hi) {
      const std::int64_t qo = bi * dm.sq * ld + hi * dm.d, ko = bi * dm.sk * ld + hi * dm.d;
      const float* p = saved.probs.data<const float>() + (bi * dm.h + hi) * dm.sq * dm.sk;
      const float* go = dout.data<const float>() + qo;
      detail::gemm_strided(true, false, dm.sk, dm.d, dm.sq, 1.0f, p, ldp, go, ld, 0.0f, dv.data<float>() + ko, ld);
      detail::gemm_strided(false, true, dm.sq, dm.sk, dm.d, 1.0f, go, ld, v.data<const float>() + ko, ld, 0.0f, ds.data(), ldp);
      for (std::int64_t i = 0; i < dm.sq; ++i) {
        float* r = ds.data() + i * dm.sk;
        const float* pr = p + i * dm.sk;
        double dot = 0.0;
        for (std::int64_t j = 0; j < dm.sk; ++j) dot += static_cast<double>(r[j]) * pr[j];
        const auto d = static_cast<float>(dot);
        for (std::int64_t j = 0; j < dm.sk; ++j) r[j] = pr[j] * (r[j] - d);
      }
      detail::gemm_strided(false, false, dm.sq, dm.d, dm.sk, scale, ds.data(), ldp, k.data<const float>() + ko, ld, 0.0f,
                           dq.data<float>() + qo, ld);
      detail::gemm_strided(true, false, dm.sk, dm.d, dm.sq, scale, ds.data(), ldp, q.data<const float>() + qo, ld, 0.0f,
                           dk.data<float>() + ko, ld);
    }
  }
}

namespace detail {

// All ids in [0, v) before anything is written, so a bad id leaves outputs untouched.
inline void check_ids(std::string_view fn, const tensor_view& ids, std::int64_t v) {
  const std::int64_t* id = ids.data<const std::int64_t>();
  const auto n = static_cast<std::size_t>(ids.numel());
  for (std::size_t i = 0; i < n; ++i)
    if (id[i] < 0 || id[i] >= v)
      throw_arg(fn, "id " + std::to_string(id[i]) + " at index " + std::to_string(i) + " outside [0, " + std::to_string(v) +
                        "), got ids " + ids.shape().to_string());
}

inline void check_embedding(std::string_view fn, const tensor_view& ids, std::string_view table_name, const tensor_view& table,
                            std::string_view out_name, const tensor_view& out) {
  require(fn, "ids", ids, dtype::i64);
  require(fn, table_name, table);
  require(fn, out_name, out);
  require_rank(fn, table_name, table, 2);
  shape want = ids.shape();
  want.push_back(table.size(1));
  require_shape(fn, out_name, out, want);
  check_ids(fn, ids, table.size(0));
}

}  // namespace detail

// out[i, :] = table[ids[i], :]. ids i64 [...], table [V, H], out [..., H]; an id outside [0, V) throws.
inline void embedding_forward(const tensor_view& ids, const tensor_view& table, const tensor_view& out) {
  detail::check_embedding("embedding_forward", ids, "table", table, "out", out);
  const std::int64_t h = table.size(1);
  const std::int64_t* id = ids.data<const std::int64_t>();
  const float* t = table.data<const float>();
  float* o = out.data<float>();
  for (std::uint64_t i = 0; i < ids.numel(); ++i) std::copy(t + id[i] * h, t + (id[i] + 1) * h, o + static_cast<std::int64_t>(i) * h);
}

// dtable[ids[i], :] += dout[i, :] (repeated ids accumulate). ids i64 [...], dout [..., H], dtable [V, H].
inline void embedding_backward(const tensor_view& ids, const tensor_view& dout, const tensor_view& dtable) {
  detail::check_embedding("embedding_backward", ids, "dtable", dtable, "dout", dout);
  const std::int64_t h = dtable.size(1);
  const std::int64_t* id = ids.data<const std::int64_t>();
  const float* g = dout.data<const float>();
  float* t = dtable.data<float>();
  for (std::uint64_t i = 0; i < ids.numel(); ++i) {
    float* row = t + id[i] * h;
    const float* src = g + static_cast<std::int64_t>(i) * h;
    for (std::int64_t j = 0; j < h; ++j) row[j] += src[j];
  }
}

// Mean over M rows of −log softmax(logits)[target]; logits [M, V], targets i64 [M] in [0, V). If dlogits is not
// null it is overwritten with (softmax − onehot(target)) / M (may be logits itself). M == 0 returns 0.
inline float cross_entropy_forward_backward(const tensor_view& logits, const tensor_view& targets, const tensor_view* dlogits) {
  constexpr std::string_view fn = "cross_entropy_forward_backward";
  detail::require(fn, "logits", logits);
  detail::require(fn, "targets", targets, dtype::i64);
  detail::require_rank(fn, "logits", logits, 2);
  const std::int64_t m = logits.size(0), v = logits.size(1);
  detail::require_shape(fn, "targets", targets, shape{m});
  if (dlogits != nullptr) {
    detail::require(fn, "dlogits", *dlogits);
    detail::require_shape(fn, "dlogits", *dlogits, logits.shape());
  }
  detail::check_ids(fn, targets, v);
  if (m == 0) return 0.0f;
  const float* x = logits.data<const float>();
  const std::int64_t* t = targets.data<const std::int64_t>();
  const double inv_m = 1.0 / static_cast<double>(m);
  double loss = 0.0;
  for (std::int64_t i = 0; i < m; ++i) {
    const float* row = x + i * v;
    const float mx = *std::max_element(row, row + v);
    double sum = 0.0;
    for (std::int64_t j = 0; j < v; ++j) sum += std::exp(static_cast<double>(row[j]) - mx);
    const double lse = std::log(sum) + mx;
    loss += lse - row[t[i]];
    if (dlogits != nullptr) {
      float* d = dlogits->data<float>() + i * v;
      for (std::int64_t j = 0; j < v; ++j) {
        const double pj = std::exp(static_cast<double>(row[j]) - lse);
        d[j] = static_cast<float>((pj - (j == t[i] ? 1.0 : 0.0)) * inv_m);
      }
    }
  }
  return static_cast<float>(loss * inv_m);
}

// y += x (same shape); y may be x.
inline void add_inplace(const tensor_view& y, const tensor_view& x) {
  constexpr std::string_view fn = "add_inplace";
  detail::require(fn, "y", y);
  detail::require(fn, "x", x);
  detail::require_shape(fn, "x", x, y.shape());
  float* out = y.data<float>();
  const float* in = x.data<const float>();
  const auto n = static_cast<std::size_t>(y.numel());
  for (std::size_t i = 0; i < n; ++i) out[i] += in[i];
}

}  // namespace jitembed::parallel::math
