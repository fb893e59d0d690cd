// The exact O(S²) attention (the full softmax probabilities kept for backward): the reference that tests and
// benchmarks compare nn::attention_forward / attention_backward (blockwise) against. Not for production use.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "jitembed/nn/attention.hpp"

namespace jitembed::nn::detail {

// out as nn::attention_forward; returns the probabilities f32 [B, H, Sq, Sk] (masked entries exactly 0).
inline tensor attention_reference_forward(const tensor_view& q, const tensor_view& k, const tensor_view& v, bool causal,
                                          const tensor_view& out) {
  constexpr std::string_view fn = "attention_reference_forward";
  const auto dm = check_attention(fn, q, k, v);
  require(fn, "out", out);
  require_shape(fn, "out", out, q.shape());
  if (dm.sq > 0 && dm.sk == 0) throw_arg(fn, "no keys to attend to, got k " + k.shape().to_string());
  tensor probs = tensor::empty(shape{dm.b, dm.h, dm.sq, dm.sk}, dtype::f32);
  const std::int64_t ld = dm.h * dm.d;
  const std::int64_t ldp = std::max<std::int64_t>(dm.sk, 1);
  const float scale = attention_scale(dm.d);
  for (std::int64_t bi = 0; bi < dm.b; ++bi) {
    for (std::int64_t hi = 0; hi < dm.h; ++hi) {
      const float* qh = q.data<const float>() + bi * dm.sq * ld + hi * dm.d;
      const float* kh = k.data<const float>() + bi * dm.sk * ld + hi * dm.d;
      const float* vh = v.data<const float>() + bi * dm.sk * ld + hi * dm.d;
      float* oh = out.data<float>() + bi * dm.sq * ld + hi * dm.d;
      float* p = probs.data<float>() + (bi * dm.h + hi) * dm.sq * dm.sk;
      gemm_strided(false, true, dm.sq, dm.sk, dm.d, scale, qh, ld, kh, ld, 0.0f, p, ldp);
      for (std::int64_t i = 0; i < dm.sq; ++i) softmax_row(p + i * dm.sk, dm.sk, causal ? i : dm.sk);
      gemm_strided(false, false, dm.sq, dm.d, dm.sk, 1.0f, p, ldp, vh, ld, 0.0f, oh, ld);
    }
  }
  return probs;
}

// dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P ⊙ (dP − rowsum(dP ⊙ P)), dQ = dS·K/√D, dK = dSᵀ·Q/√D; dq, dk, dv overwritten.
inline void attention_reference_backward(const tensor_view& q, const tensor_view& k, const tensor_view& v,
                                         const tensor_view& probs, const tensor_view& dout, const tensor_view& dq,
                                         const tensor_view& dk, const tensor_view& dv) {
  constexpr std::string_view fn = "attention_reference_backward";
  const auto dm = check_attention(fn, q, k, v);
  require(fn, "probs", probs);
  require_shape(fn, "probs", probs, shape{dm.b, dm.h, dm.sq, dm.sk});
  require(fn, "dout", dout);
  require(fn, "dq", dq);
  require(fn, "dk", dk);
  require(fn, "dv", dv);
  require_shape(fn, "dout", dout, q.shape());
  require_shape(fn, "dq", dq, q.shape());
  require_shape(fn, "dk", dk, k.shape());
  require_shape(fn, "dv", dv, v.shape());
  const std::int64_t ld = dm.h * dm.d;
  const std::int64_t ldp = std::max<std::int64_t>(dm.sk, 1);
  const float scale = attention_scale(dm.d);
  std::vector<float> ds(static_cast<std::size_t>(dm.sq * dm.sk));
  for (std::int64_t bi = 0; bi < dm.b; ++bi) {
    for (std::int64_t hi = 0; hi < dm.h; ++hi) {
      const std::int64_t qo = bi * dm.sq * ld + hi * dm.d, ko = bi * dm.sk * ld + hi * dm.d;
      const float* p = probs.data<const float>() + (bi * dm.h + hi) * dm.sq * dm.sk;
      const float* go = dout.data<const float>() + qo;
      gemm_strided(true, false, dm.sk, dm.d, dm.sq, 1.0f, p, ldp, go, ld, 0.0f, dv.data<float>() + ko, ld);
      gemm_strided(false, true, dm.sq, dm.sk, dm.d, 1.0f, go, ld, v.data<const float>() + ko, ld, 0.0f, ds.data(), ldp);
      for (std::int64_t i = 0; i < dm.sq; ++i) {
        float* r = ds.data() + i * dm.sk;
        const float* pr = p + i * dm.sk;
        double dot = 0.0;
        for (std::int64_t j = 0; j < dm.sk; ++j) dot += static_cast<double>(r[j]) * pr[j];
        const auto d = static_cast<float>(dot);
        for (std::int64_t j = 0; j < dm.sk; ++j) r[j] = pointwise::softmax_grad(pr[j], r[j], d);
      }
      gemm_strided(false, false, dm.sq, dm.d, dm.sk, scale, ds.data(), ldp, k.data<const float>() + ko, ld, 0.0f,
                   dq.data<float>() + qo, ld);
      gemm_strided(true, false, dm.sk, dm.d, dm.sq, scale, ds.data(), ldp, q.data<const float>() + qo, ld, 0.0f,
                   dk.data<float>() + ko, ld);
    }
  }
}

}  // namespace jitembed::nn::detail
