// Mean cross-entropy over rows of logits, with its gradient in the same pass.
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

}  // namespace jitembed::nn
