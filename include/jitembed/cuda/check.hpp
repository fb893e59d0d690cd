// CUDA error checking: every runtime call goes through JITEMBED_CUDA_CHECK (throws jitembed::error) or, in a
// function returning result<T>, JITEMBED_CUDA_TRY (returns the error); both keep file and line and clear
// CUDA's sticky last error.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "jitembed/core/error.hpp"

#if defined(__CUDACC__)
#define JITEMBED_HOST_DEVICE __host__ __device__
#else
#define JITEMBED_HOST_DEVICE
#endif

namespace jitembed::cuda {

// errc for a CUDA failure: out-of-memory is a limit, the rest are internal errors of the device path.
inline errc to_errc(cudaError_t e) noexcept {
  return e == cudaErrorMemoryAllocation ? errc::resource_exhausted : errc::internal;
}

// The error_info of a failed call (e != cudaSuccess); clears the sticky error so the next call does not
// inherit it.
inline error_info failure(cudaError_t e, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();
  return error_info{to_errc(e), std::string("cuda: ") + expr + " failed: " + cudaGetErrorName(e) + " (" +
                                    cudaGetErrorString(e) + ") at " + file + ":" + std::to_string(line)};
}

inline void check(cudaError_t e, const char* expr, const char* file, int line) {
  if (e == cudaSuccess) return;
  throw error(failure(e, expr, file, line));
}

// Number of usable devices; 0 (never an exception) when there is no device or no driver.
inline int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace jitembed::cuda

#define JITEMBED_CUDA_CHECK(expr) ::jitembed::cuda::check((expr), #expr, __FILE__, __LINE__)

// In a function returning result<T>: returns the failure of a CUDA call (file and line kept) instead of
// throwing it.
#define JITEMBED_CUDA_TRY(expr)                                                           \
  do {                                                                                    \
    if (const cudaError_t jitembed_cuda_e_ = (expr); jitembed_cuda_e_ != cudaSuccess) {   \
      return ::jitembed::cuda::failure(jitembed_cuda_e_, #expr, __FILE__, __LINE__);      \
    }                                                                                     \
  } while (false)
