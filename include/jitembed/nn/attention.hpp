// Scaled dot-product attention [B, S, H, D] with an optional causal mask, forward and backward, computed
// blockwise (FlashAttention-2 over the CBLAS GEMM): O(S) saved state and O(block_q·block_k) workspace.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/dtype.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/nn/detail/common.hpp"

namespace jitembed::nn {

// Query and key block sizes (rows of q and k per GEMM tile). 128 × 128: at S 4096, D 64 on one BLAS thread,
// 32/64/128/256 took 1.11/1.03/1.00/1.00× (bench_parallel attention); the workspace, 2·128² floats (128 KiB),
// stays in L2. Any size ≥ 1 gives the same result up to rounding.
struct attention_options {
  std::int64_t block_q = 128;
  std::int64_t block_k = 128;
};

// What backward needs, O(S) per head (never the S² probabilities, which backward recomputes blockwise):
//   lse  f32 [B, H, Sq]      log Σ_visible exp(q·kᵀ/√D), the softmax's normalizer per query row
//   out  f32 [B, Sq, H, D]   forward's output, for backward's rowsum(dO ⊙ O): the caller's own tensor when
//                            forward was given one (shared storage, nothing copied; the caller must not
//                            overwrite it before backward), else a copy of the view it wrote. The backend
//                            interface's attention_backward takes no `out`. Bytes kept: 4·B·H·Sq (lse) plus
//                            4·B·H·Sq·D when it is a copy. A caller that keeps no copy of O itself may
//                            reset it (saved.out = tensor()): backward then recomputes O one query block at
//                            a time (one more forward's work, no S-sized memory), bitwise equal to forward's
//                            when both use the same block sizes (Ulysses' saved_output recompute: its O is in
//                            the other layout, a second copy of the caller's output).
//   delta f32 [B, Sq, H, 1]  optional, instead of out: δ = rowsum(dO ⊙ O) per query row and head, computed by
//                            the caller (attention_delta) where it holds O and dO in another layout (Ulysses'
//                            exchange_delta); backward then needs neither out nor a recompute
//   causal                   forward's mask, which backward applies again
struct attention_saved {
  tensor lse;
  tensor out;
  bool causal = false;
  tensor delta;
};

namespace detail {
// δ_i = dO_i · O_i over the D values of one row, summed in double: the one formula backward and
// attention_delta share, so a δ computed in another layout is bitwise backward's own.
inline float attention_row_delta(const float* dout, const float* out, std::int64_t d) {
  double dot = 0.0;
  for (std::int64_t t = 0; t < d; ++t) dot += static_cast<double>(dout[t]) * out[t];
  return static_cast<float>(dot);
}
}  // namespace detail

// δ = rowsum(dO ⊙ O) of f32 [B, S, H, D] contiguous dout and out: f32 [B, S, H, 1] (attention_saved::delta's
// layout: q's with D = 1, so the sequence/head transforms move it as they move q). Throws invalid_argument on other
// shapes or dtypes, as the attention functions do.
inline tensor attention_delta(const tensor_view& out, const tensor_view& dout) {
  constexpr std::string_view fn = "attention_delta";
  detail::require(fn, "out", out);
  detail::require_rank(fn, "out", out, 4);
  detail::require(fn, "dout", dout);
  detail::require_shape(fn, "dout", dout, out.shape());
  const std::int64_t rows = out.size(0) * out.size(1) * out.size(2), d = out.size(3);
  tensor delta = tensor::empty(shape{out.size(0), out.size(1), out.size(2), 1}, dtype::f32);
  const float* o = out.data<const float>();
  const float* g = dout.data<const float>();
  float* dl = delta.data<float>();
  for (std::int64_t r = 0; r < rows; ++r) dl[r] = detail::attention_row_delta(g + r * d, o + r * d, d);
  return delta;
}

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

inline void check_attention_options(std::string_view fn, const attention_options& opt) {
  if (opt.block_q < 1) throw_arg(fn, "block_q must be >= 1, got " + std::to_string(opt.block_q));
  if (opt.block_k < 1) throw_arg(fn, "block_k must be >= 1, got " + std::to_string(opt.block_k));
}

inline float attention_scale(std::int64_t d) { return d > 0 ? 1.0f / std::sqrt(static_cast<float>(d)) : 1.0f; }

// Keys [j0, j0 + n) visible to query i: all n, or (causal: key j visible iff j ≤ i, whatever Sq and Sk are)
// those up to i; 0 when the whole block lies after i.
inline std::int64_t visible_keys(bool causal, std::int64_t i, std::int64_t j0, std::int64_t n) {
  return causal ? std::clamp<std::int64_t>(i + 1 - j0, 0, n) : n;
}

// Key blocks a causal query block [i0, i1) reaches: those starting at or before i1 − 1 (the rest are skipped).
inline std::int64_t key_end(bool causal, std::int64_t i1, std::int64_t sk) { return causal ? std::min(sk, i1) : sk; }

// Zero `rows` rows of `n` floats at pitch ld.
inline void zero_rows(float* p, std::int64_t rows, std::int64_t n, std::int64_t ld) {
  for (std::int64_t i = 0; i < rows; ++i) std::fill_n(p + i * ld, n, 0.0f);
}

// The forward's per-query-block workspace: scores, output accumulator, running max and sum.
struct attention_tiles {
  attention_tiles(const attention_dims& dm, const attention_options& opt)
      : bq(std::min(opt.block_q, std::max<std::int64_t>(dm.sq, 1))),
        bk(std::min(opt.block_k, std::max<std::int64_t>(dm.sk, 1))),
        s(static_cast<std::size_t>(bq * bk)),
        acc(static_cast<std::size_t>(bq * dm.d)),
        mx(static_cast<std::size_t>(bq)),
        sum(static_cast<std::size_t>(bq)) {}
  std::int64_t bq, bk;
  std::vector<float> s, acc, mx, sum;
};

// Output rows [i0, i0 + bq) of one (batch, head) — qh, kh, vh at its first row, pitch H·D — into o (pitch
// ldo) and their log-sum-exp into lse[0..). Online softmax over the key blocks. Forward and backward's
// recompute (attention_saved without out) both run this, so with equal block sizes their O is bitwise equal.
inline void attention_query_block(const attention_dims& dm, bool causal, attention_tiles& w, const float* qh,
                                  const float* kh, const float* vh, std::int64_t i0, float* o, std::int64_t ldo,
                                  float* lse) {
  const std::int64_t ld = dm.h * dm.d, bk = w.bk;
  const float scale = attention_scale(dm.d);
  const std::int64_t nq = std::min(w.bq, dm.sq - i0);
  float* s = w.s.data();
  float* acc = w.acc.data();
  std::fill_n(w.mx.begin(), nq, -std::numeric_limits<float>::infinity());
  std::fill_n(w.sum.begin(), nq, 0.0f);
  std::fill_n(w.acc.begin(), nq * dm.d, 0.0f);
  const std::int64_t jend = key_end(causal, i0 + nq, dm.sk);
  for (std::int64_t j0 = 0; j0 < jend; j0 += bk) {
    const std::int64_t nk = std::min(bk, dm.sk - j0);
    gemm_strided(false, true, nq, nk, dm.d, scale, qh + i0 * ld, ld, kh + j0 * ld, ld, 0.0f, s, bk);
    for (std::int64_t r = 0; r < nq; ++r) {
      float* row = s + r * bk;
      const std::int64_t vis = visible_keys(causal, i0 + r, j0, nk);
      float m = w.mx[r];
      for (std::int64_t j = 0; j < vis; ++j) m = std::max(m, row[j]);
      float add = 0.0f;
      for (std::int64_t j = 0; j < vis; ++j) {
        row[j] = pointwise::softmax_exp(row[j], m);
        add += row[j];
      }
      std::fill(row + vis, row + nk, 0.0f);
      if (vis == 0) continue;  // nothing new for this row: its running max, sum and acc stand
      // rescale what the earlier key blocks gave to the new running max (exp(−inf) = 0 on the first)
      const float alpha = pointwise::softmax_exp(w.mx[r], m);
      w.sum[r] = w.sum[r] * alpha + add;
      w.mx[r] = m;
      if (alpha != 1.0f)
        for (std::int64_t t = 0; t < dm.d; ++t) acc[r * dm.d + t] *= alpha;
    }
    gemm_strided(false, false, nq, dm.d, nk, 1.0f, s, bk, vh + j0 * ld, ld, 1.0f, acc, std::max<std::int64_t>(dm.d, 1));
  }
  for (std::int64_t r = 0; r < nq; ++r) {
    const float inv = 1.0f / w.sum[r];
    for (std::int64_t t = 0; t < dm.d; ++t) o[r * ldo + t] = acc[r * dm.d + t] * inv;
    if (lse != nullptr) lse[r] = w.mx[r] + std::log(w.sum[r]);
  }
}

}  // namespace detail

// out = softmax(q·kᵀ/√D [+ causal mask])·v per batch and head. q, out [B, Sq, H, D]; k, v [B, Sk, H, D].
// causal: key j is visible to query i iff j ≤ i (torch's scaled_dot_product_attention(is_causal=True) when
// Sq == Sk; for Sq ≠ Sk the mask is aligned at the top left, query i sees keys 0..i).
// Blockwise with an online softmax (running max and sum per row): per (batch, head), query blocks × key
// blocks; key blocks wholly after a causal query block are skipped (about half the work). Per-head slices
// are read in place (row pitch H·D), not copied.
// `out` an owning tensor: the saved state shares it (its caller keeps it unchanged until backward); a view:
// the saved state keeps a copy.
inline attention_saved attention_forward(const tensor_view& q, const tensor_view& k, const tensor_view& v, bool causal,
                                         const tensor& out, const attention_options& opt = {}) {
  constexpr std::string_view fn = "attention_forward";
  const auto dm = detail::check_attention(fn, q, k, v);
  detail::require(fn, "out", out.view());
  detail::require_shape(fn, "out", out.view(), q.shape());
  detail::check_attention_options(fn, opt);
  if (dm.sq > 0 && dm.sk == 0) detail::throw_arg(fn, "no keys to attend to, got k " + k.shape().to_string());
  attention_saved saved{tensor::empty(shape{dm.b, dm.h, dm.sq}, dtype::f32), out, causal};
  const std::int64_t ld = dm.h * dm.d;
  detail::attention_tiles w(dm, opt);
  for (std::int64_t bi = 0; bi < dm.b; ++bi) {
    for (std::int64_t hi = 0; hi < dm.h; ++hi) {
      const std::int64_t qo = bi * dm.sq * ld + hi * dm.d, ko = bi * dm.sk * ld + hi * dm.d;
      float* lse = saved.lse.data<float>() + (bi * dm.h + hi) * dm.sq;
      for (std::int64_t i0 = 0; i0 < dm.sq; i0 += w.bq) {
        detail::attention_query_block(dm, causal, w, q.data<const float>() + qo, k.data<const float>() + ko,
                                      v.data<const float>() + ko, i0, out.data<float>() + qo + i0 * ld, ld, lse + i0);
      }
    }
  }
  return saved;
}

inline attention_saved attention_forward(const tensor_view& q, const tensor_view& k, const tensor_view& v, bool causal,
                                         const tensor_view& out, const attention_options& opt = {}) {
  detail::require("attention_forward", "out", out);
  detail::require_shape("attention_forward", "out", out, q.shape());
  attention_saved saved = attention_forward(q, k, v, causal, tensor::empty(q.shape(), dtype::f32), opt);
  if (out.numel() != 0) std::memcpy(out.data<float>(), saved.out.data<const float>(), out.numel() * sizeof(float));
  return saved;
}

// FlashAttention-2's backward: per key block (dK, dV accumulated there), over the query blocks that see it,
// P = exp(q·kᵀ/√D − lse) recomputed, dV += Pᵀ·dO, dP = dO·Vᵀ, dS = P ⊙ (dP − δ) with δ = rowsum(dO ⊙ O),
// dQ += dS·K/√D, dK += dSᵀ·Q/√D. The mask is forward's (saved.causal). dq, dk, dv are overwritten; keys no
// query sees get 0. `opt` need not match forward's. saved.delta given: δ as is (out not read); else saved.out
// empty: O recomputed per query block with `opt`'s blocks (forward's blocks: forward's O bitwise, hence the
// same gradients as with it kept).
inline void attention_backward(const tensor_view& q, const tensor_view& k, const tensor_view& v,
                               const attention_saved& saved, const tensor_view& dout, const tensor_view& dq,
                               const tensor_view& dk, const tensor_view& dv, const attention_options& opt = {}) {
  constexpr std::string_view fn = "attention_backward";
  const auto dm = detail::check_attention(fn, q, k, v);
  detail::require(fn, "saved.lse", saved.lse);
  detail::require_shape(fn, "saved.lse", saved.lse, shape{dm.b, dm.h, dm.sq});
  const bool given_delta = saved.delta.defined();
  const bool recompute = !given_delta && !saved.out.defined();
  if (given_delta) {
    detail::require(fn, "saved.delta", saved.delta);
    detail::require_shape(fn, "saved.delta", saved.delta, shape{dm.b, dm.sq, dm.h, 1});
  } else if (!recompute) {
    detail::require(fn, "saved.out", saved.out);
    detail::require_shape(fn, "saved.out", saved.out, q.shape());
  }
  detail::require(fn, "dout", dout);
  detail::require(fn, "dq", dq);
  detail::require(fn, "dk", dk);
  detail::require(fn, "dv", dv);
  detail::require_shape(fn, "dout", dout, q.shape());
  detail::require_shape(fn, "dq", dq, q.shape());
  detail::require_shape(fn, "dk", dk, k.shape());
  detail::require_shape(fn, "dv", dv, v.shape());
  detail::check_attention_options(fn, opt);
  const bool causal = saved.causal;
  const std::int64_t ld = dm.h * dm.d;
  const std::int64_t ldd = std::max<std::int64_t>(dm.d, 1);
  const float scale = detail::attention_scale(dm.d);
  const std::int64_t bq = std::min(opt.block_q, std::max<std::int64_t>(dm.sq, 1));
  const std::int64_t bk = std::min(opt.block_k, std::max<std::int64_t>(dm.sk, 1));
  std::vector<float> p(static_cast<std::size_t>(bq * bk)), dp(static_cast<std::size_t>(bq * bk));
  std::vector<float> dkb(static_cast<std::size_t>(bk * dm.d)), dvb(static_cast<std::size_t>(bk * dm.d));
  std::vector<float> delta(static_cast<std::size_t>(dm.sq));  // O(Sq) per head, reused
  // without a saved out: forward's tiles, one query block of O at a time (O(block) workspace)
  std::optional<detail::attention_tiles> fw;
  std::vector<float> oblock;
  if (recompute) {
    fw.emplace(dm, opt);
    oblock.resize(static_cast<std::size_t>(fw->bq * dm.d));
  }
  for (std::int64_t bi = 0; bi < dm.b; ++bi) {
    for (std::int64_t hi = 0; hi < dm.h; ++hi) {
      const std::int64_t qo = bi * dm.sq * ld + hi * dm.d, ko = bi * dm.sk * ld + hi * dm.d;
      const float* qh = q.data<const float>() + qo;
      const float* kh = k.data<const float>() + ko;
      const float* vh = v.data<const float>() + ko;
      const float* go = dout.data<const float>() + qo;
      const float* lse = saved.lse.data<const float>() + (bi * dm.h + hi) * dm.sq;
      float* dqh = dq.data<float>() + qo;
      const auto row_delta = [&](std::int64_t i, const float* o) {
        delta[static_cast<std::size_t>(i)] = detail::attention_row_delta(go + i * ld, o, dm.d);
      };
      if (given_delta) {
        const float* dh = saved.delta.data<const float>() + bi * dm.sq * dm.h + hi;
        for (std::int64_t i = 0; i < dm.sq; ++i) delta[static_cast<std::size_t>(i)] = dh[i * dm.h];
      } else if (recompute) {
        for (std::int64_t i0 = 0; i0 < dm.sq; i0 += fw->bq) {
          detail::attention_query_block(dm, causal, *fw, qh, kh, vh, i0, oblock.data(), dm.d, nullptr);
          const std::int64_t i1 = std::min(i0 + fw->bq, dm.sq);
          for (std::int64_t i = i0; i < i1; ++i) row_delta(i, oblock.data() + (i - i0) * dm.d);
        }
      } else {
        const float* oh = saved.out.data<const float>() + qo;
        for (std::int64_t i = 0; i < dm.sq; ++i) row_delta(i, oh + i * ld);
      }
      detail::zero_rows(dqh, dm.sq, dm.d, ld);
      for (std::int64_t j0 = 0; j0 < dm.sk; j0 += bk) {
        const std::int64_t nk = std::min(bk, dm.sk - j0);
        std::fill_n(dkb.begin(), nk * dm.d, 0.0f);
        std::fill_n(dvb.begin(), nk * dm.d, 0.0f);
        // causal: queries before j0 see none of this block; start at the query block holding j0
        for (std::int64_t i0 = causal ? j0 / bq * bq : 0; i0 < dm.sq; i0 += bq) {
          const std::int64_t nq = std::min(bq, dm.sq - i0);
          detail::gemm_strided(false, true, nq, nk, dm.d, scale, qh + i0 * ld, ld, kh + j0 * ld, ld, 0.0f, p.data(),
                               bk);
          detail::gemm_strided(false, true, nq, nk, dm.d, 1.0f, go + i0 * ld, ld, vh + j0 * ld, ld, 0.0f, dp.data(),
                               bk);
          for (std::int64_t r = 0; r < nq; ++r) {
            float* pr = p.data() + r * bk;
            float* dr = dp.data() + r * bk;
            const std::int64_t vis = detail::visible_keys(causal, i0 + r, j0, nk);
            const float l = lse[i0 + r], dl = delta[static_cast<std::size_t>(i0 + r)];
            for (std::int64_t j = 0; j < vis; ++j) {
              pr[j] = pointwise::softmax_exp(pr[j], l);
              dr[j] = pointwise::softmax_grad(pr[j], dr[j], dl);
            }
            std::fill(pr + vis, pr + nk, 0.0f);
            std::fill(dr + vis, dr + nk, 0.0f);
          }
          detail::gemm_strided(true, false, nk, dm.d, nq, 1.0f, p.data(), bk, go + i0 * ld, ld, 1.0f, dvb.data(), ldd);
          detail::gemm_strided(false, false, nq, dm.d, nk, scale, dp.data(), bk, kh + j0 * ld, ld, 1.0f, dqh + i0 * ld,
                               ld);
          detail::gemm_strided(true, false, nk, dm.d, nq, scale, dp.data(), bk, qh + i0 * ld, ld, 1.0f, dkb.data(),
                               ldd);
        }
        float* dkh = dk.data<float>() + ko + j0 * ld;
        float* dvh = dv.data<float>() + ko + j0 * ld;
        for (std::int64_t r = 0; r < nk; ++r) {
          std::copy_n(dkb.data() + r * dm.d, dm.d, dkh + r * ld);
          std::copy_n(dvb.data() + r * dm.d, dm.d, dvh + r * ld);
        }
      }
    }
  }
}

}  // namespace jitembed::nn
