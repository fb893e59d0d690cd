// LayerNorm over the last dim: forward (saving mean and rstd) and backward.
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

}  // namespace jitembed::nn
