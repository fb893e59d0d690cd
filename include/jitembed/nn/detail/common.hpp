// Internals of the nn area: argument checks with the messages the ops document, the strided CBLAS GEMM,
// the row softmax and the GELU constants.
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
#include "jitembed/nn/pointwise.hpp"

namespace jitembed::nn {

namespace detail {

[[noreturn]] inline void throw_arg(std::string_view fn, const std::string& what) {
  throw error(errc::invalid_argument, std::string(fn) + ": " + what);
}

// f32/i64, CPU, contiguous: the layout every function here reads with plain pointer arithmetic.
inline void require(std::string_view fn, std::string_view name, const tensor_view& v, dtype t = dtype::f32) {
  if (v.dtype() != t)
    throw error(errc::dtype_mismatch, std::string(fn) + ": " + std::string(name) + " must be " + std::string(to_string(t)) +
                                          ", got " + std::string(to_string(v.dtype())) + v.shape().to_string());
  if (!v.device().is_cpu()) throw_arg(fn, std::string(name) + " must be a CPU tensor, got a CUDA tensor " + v.shape().to_string());
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
    row[j] = pointwise::softmax_exp(row[j], mx);
    sum += row[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (std::int64_t j = 0; j < end; ++j) row[j] *= inv;
  for (std::int64_t j = end; j < n; ++j) row[j] = 0.0f;
}

inline constexpr float kGeluC = pointwise::kGeluC;  // sqrt(2/pi)
inline constexpr float kGeluA = pointwise::kGeluA;

// All ids in [0, v) before anything is written, so a bad id leaves outputs untouched.
inline void check_ids(std::string_view fn, const tensor_view& ids, std::int64_t v) {
  const std::int64_t* id = ids.data<const std::int64_t>();
  const auto n = static_cast<std::size_t>(ids.numel());
  for (std::size_t i = 0; i < n; ++i)
    if (id[i] < 0 || id[i] >= v)
      throw_arg(fn, "id " + std::to_string(id[i]) + " at index " + std::to_string(i) + " outside [0, " + std::to_string(v) +
                        "), got ids " + ids.shape().to_string());
}

}  // namespace detail

}  // namespace jitembed::nn
