// GEMM on the GPU through cuBLAS with nn::gemm's row-major semantics (C = alpha·op(A)·op(B) + beta·C),
// f32 and bf16 (fp32 accumulation), plus an RAII cuBLAS handle bound to a stream.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>
#include <string>
#include <utility>

#include "jitembed/core/detail/capture.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/cuda/check.hpp"
#include "jitembed/cuda/stream.hpp"

namespace jitembed::parallel {

namespace detail {

inline void cublas_check(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  (void)cudaGetLastError();
  const errc code = s == CUBLAS_STATUS_ALLOC_FAILED ? errc::resource_exhausted : errc::internal;
  throw error(code, std::string("cublas: ") + expr + " failed: " + cublasGetStatusName(s) + " (" +
                        cublasGetStatusString(s) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace detail

}  // namespace jitembed::parallel

#define JITEMBED_CUBLAS_CHECK(expr) ::jitembed::parallel::detail::cublas_check((expr), #expr, __FILE__, __LINE__)

namespace jitembed::parallel {

// A cuBLAS handle on the CUDA device current at creation, enqueueing on `stream`. Move-only; a
// default-constructed (or moved-from) handle holds none.
class cublas_handle {
 public:
  // resource_exhausted when cuBLAS cannot allocate its workspace, internal for another CUDA / cuBLAS error.
  static result<cublas_handle> create(jitembed::cuda::stream_ref stream = {}) {
    return core_detail::capture("cublas_handle::create", [&] {
      cublas_handle h;
      JITEMBED_CUDA_CHECK(cudaGetDevice(&h.device_));
      JITEMBED_CUBLAS_CHECK(cublasCreate(&h.h_));
      h.set_stream(stream);
      return h;
    });
  }
  cublas_handle() = default;
  cublas_handle(const cublas_handle&) = delete;
  cublas_handle& operator=(const cublas_handle&) = delete;
  cublas_handle(cublas_handle&& o) noexcept
      : h_(std::exchange(o.h_, nullptr)), device_(o.device_), stream_(o.stream_) {}
  cublas_handle& operator=(cublas_handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
      device_ = o.device_;
      stream_ = o.stream_;
    }
    return *this;
  }
  ~cublas_handle() { reset(); }

  cublasHandle_t get() const noexcept { return h_; }
  int cuda_device() const noexcept { return device_; }
  jitembed::cuda::stream_ref stream() const noexcept { return stream_; }
  void set_stream(jitembed::cuda::stream_ref s) {
    JITEMBED_CUBLAS_CHECK(cublasSetStream(h_, s.get()));
    stream_ = s;
  }

 private:
  void reset() noexcept {
    if (h_ != nullptr) cublasDestroy(h_);
    h_ = nullptr;
  }
  cublasHandle_t h_ = nullptr;
  int device_ = 0;
  jitembed::cuda::stream_ref stream_{};
};

namespace detail {

struct gemm_dims {
  std::int64_t m = 0, n = 0, k = 0;
};

// The checks gemm() makes before touching the GPU: 2-D contiguous views on `cuda_device`, one dtype
// (f32 or bf16) for A, B and C (or bf16 A, B with an f32 C), op(A) [M,K] · op(B) [K,N] = C [M,N], every extent within cuBLAS's int.
inline result<gemm_dims> check_gemm(bool trans_a, bool trans_b, const tensor_view& a, const tensor_view& b,
                                    const tensor_view& c, int cuda_device) {
  const tensor_view* views[3] = {&a, &b, &c};
  const char* names[3] = {"A", "B", "C"};
  for (int i = 0; i < 3; ++i) {
    const tensor_view& v = *views[i];
    const std::string name = names[i];
    if (v.rank() != 2) {
      return fail(errc::invalid_argument, "gemm: " + name + " is " + v.shape().to_string() + ", expected 2-D");
    }
    if (!v.is_contiguous()) return fail(errc::invalid_argument, "gemm: " + name + " is not contiguous");
    if (v.device() != jitembed::device::cuda(cuda_device)) {
      return fail(errc::invalid_argument, "gemm: " + name + " is not on CUDA device " + std::to_string(cuda_device));
    }
    if (v.numel() > 0 && v.data() == nullptr) return fail(errc::invalid_argument, "gemm: " + name + " has null data");
    for (std::size_t d = 0; d < 2; ++d) {
      if (v.size(d) > INT_MAX) {
        return fail(errc::limit_exceeded, "gemm: " + name + " extent " + std::to_string(v.size(d)) + " > " +
                                              std::to_string(INT_MAX) + " (cuBLAS int)");
      }
    }
  }
  if (a.dtype() != dtype::f32 && a.dtype() != dtype::bf16) {
    return fail(errc::dtype_mismatch, "gemm: dtype " + std::string(to_string(a.dtype())) + " (f32 or bf16 only)");
  }
  const bool f32_out = a.dtype() == dtype::bf16 && c.dtype() == dtype::f32;  // bf16 inputs, f32 accumulator
  if (b.dtype() != a.dtype() || (c.dtype() != a.dtype() && !f32_out)) {
    return fail(errc::dtype_mismatch, "gemm: A is " + std::string(to_string(a.dtype())) + ", B is " +
                                          std::string(to_string(b.dtype())) + ", C is " + std::string(to_string(c.dtype())));
  }
  gemm_dims g;
  g.m = trans_a ? a.size(1) : a.size(0);
  g.k = trans_a ? a.size(0) : a.size(1);
  const std::int64_t kb = trans_b ? b.size(1) : b.size(0);
  g.n = trans_b ? b.size(0) : b.size(1);
  if (kb != g.k) {
    return fail(errc::invalid_argument, "gemm: op(A) is [" + std::to_string(g.m) + "," + std::to_string(g.k) +
                                            "] but op(B) is [" + std::to_string(kb) + "," + std::to_string(g.n) +
                                            "]: inner extents differ");
  }
  if (c.size(0) != g.m || c.size(1) != g.n) {
    return fail(errc::invalid_argument, "gemm: C is " + c.shape().to_string() + ", expected [" + std::to_string(g.m) +
                                            "," + std::to_string(g.n) + "]");
  }
  return g;
}

}  // namespace detail

// C[M,N] = alpha·op(A)·op(B) + beta·C on h's stream, row-major like nn::gemm. cuBLAS is column-major,
// where a row-major X is Xᵀ: so it computes Cᵀ = op(B)ᵀ·op(A)ᵀ with the operands swapped, each leading
// dimension being its row-major column count. bf16 accumulates in fp32; with bf16 A and B, C may be f32
// (gradients accumulated in f32). Throws jitembed::error.
inline void gemm(cublas_handle& h, bool trans_a, bool trans_b, float alpha, const tensor_view& a, const tensor_view& b,
                 float beta, const tensor_view& c) {
  const auto g = detail::check_gemm(trans_a, trans_b, a, b, c, h.cuda_device()).value();
  if (g.m == 0 || g.n == 0) return;
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  const int lda = static_cast<int>(std::max<std::int64_t>(a.size(1), 1));
  const int ldb = static_cast<int>(std::max<std::int64_t>(b.size(1), 1));
  const int ldc = n;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (a.dtype() == dtype::f32) {
    JITEMBED_CUBLAS_CHECK(cublasSgemm(h.get(), op_b, op_a, n, m, k, &alpha, b.data<const float>(), ldb,
                                      a.data<const float>(), lda, &beta, c.data<float>(), ldc));
  } else {
    const cudaDataType_t c_type = c.dtype() == dtype::f32 ? CUDA_R_32F : CUDA_R_16BF;
    JITEMBED_CUBLAS_CHECK(cublasGemmEx(h.get(), op_b, op_a, n, m, k, &alpha, b.data(), CUDA_R_16BF, ldb, a.data(),
                                       CUDA_R_16BF, lda, &beta, c.data(), c_type, ldc, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace jitembed::parallel
