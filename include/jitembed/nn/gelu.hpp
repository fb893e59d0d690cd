// GELU (tanh approximation): forward and backward, elementwise (bodies in nn/pointwise.hpp).
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
#include "jitembed/nn/pointwise.hpp"

namespace jitembed::nn {

// y = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), elementwise; y may be x.
inline void gelu_forward(const tensor_view& x, const tensor_view& y) {
  constexpr std::string_view fn = "gelu_forward";
  detail::require(fn, "x", x);
  detail::require(fn, "y", y);
  detail::require_shape(fn, "y", y, x.shape());
  const float* in = x.data<const float>();
  float* out = y.data<float>();
  const auto n = static_cast<std::size_t>(x.numel());
  for (std::size_t i = 0; i < n; ++i) out[i] = pointwise::gelu(in[i]);
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
  for (std::size_t i = 0; i < n; ++i) out[i] = pointwise::gelu_grad(in[i], g[i]);
}

}  // namespace jitembed::nn
