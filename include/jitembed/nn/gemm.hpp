// GEMM on f32 CPU views through CBLAS (OpenBLAS), the [..., K] → [rows, K] matrix view, and the BLAS
// thread count.
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

// Threads OpenBLAS uses for one call (ranks that are threads of one process want 1 each). A no-op with
// another CBLAS.
inline void set_blas_threads(int threads) {
#if defined(OPENBLAS_VERSION)
  openblas_set_num_threads(threads);
#else
  (void)threads;
#endif
}

// [..., K] → [prod(...), K] over the same storage (no copy). Rank-1 [K] becomes [1, K].
inline tensor_view as_matrix(const tensor_view& x) {
  constexpr std::string_view fn = "as_matrix";
  if (x.numel() != 0 && !x.is_contiguous()) throw error(errc::invalid_argument, "as_matrix: x must be contiguous, got shape " + x.shape().to_string());
  const std::int64_t rows = detail::rows_of(fn, "x", x);
  return tensor_view(x.data(), x.dtype(), shape{rows, x.size(x.rank() - 1)}, x.device());
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

}  // namespace jitembed::nn
