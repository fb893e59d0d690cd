// Scaled dot-product attention [B, S, H, D] with an optional causal mask: forward and backward.
#pragma once

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
#include "jitembed/nn/detail/common.hpp"

namespace jitembed::nn {

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
        for (std::int64_t j = 0; j < dm.sk; ++j) r[j] = pointwise::softmax_grad(pr[j], r[j], d);
      }
      detail::gemm_strided(false, false, dm.sq, dm.d, dm.sk, scale, ds.data(), ldp, k.data<const float>() + ko, ld, 0.0f,
                           dq.data<float>() + qo, ld);
      detail::gemm_strided(true, false, dm.sk, dm.d, dm.sq, scale, ds.data(), ldp, q.data<const float>() + qo, ld, 0.0f,
                           dk.data<float>() + ko, ld);
    }
  }
}

}  // namespace jitembed::nn
