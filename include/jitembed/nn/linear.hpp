// Linear layer y = x·wᵀ + b: forward and backward.
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
#include "jitembed/nn/gemm.hpp"

namespace jitembed::nn {

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

}  // namespace jitembed::nn
