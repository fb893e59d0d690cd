// Elementwise helpers of the training step (y += x).
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

}  // namespace jitembed::nn
