// CUDA error checking: every runtime call goes through JITEMBED_CUDA_CHECK, which keeps file and line,
// clears CUDA's sticky last error, and throws jitembed::error.
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
  return e == cudaErrorMemoryAllocation ? errc::limit_exceeded : errc::internal;
}

inline void check(cudaError_t e, const char* expr, const char* file, int line) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear the sticky error so the next call does not inherit it
  throw error(to_errc(e), std::string("cuda: ") + expr + " failed: " + cudaGetErrorName(e) + " (" +
                              cudaGetErrorString(e) + ") at " + file + ":" + std::to_string(line));
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
