// The cudart model of core/cuda_ipc.hpp's cuda_ipc_backend: what a server built with the CUDA component
// installs (server_config::cuda_ipc) to serve Triton's CUDA shared-memory extension.
#pragma once

#include <cuda.h>  // the types of cuMemGetAddressRange, reached through the runtime (no libcuda link)
#include <cuda_runtime_api.h>

#include <cstring>
#include <span>
#include <string>

#include "jitembed/core/cuda_ipc.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/cuda/check.hpp"

namespace jitembed::cuda {

namespace detail {

// Makes `device` current on this thread for its lifetime (server threads serve regions of any device).
class ipc_device_scope {
 public:
  ipc_device_scope(const ipc_device_scope&) = delete;
  ipc_device_scope& operator=(const ipc_device_scope&) = delete;
  ~ipc_device_scope() {
    if (prev_ >= 0 && prev_ != device_ && cudaSetDevice(prev_) != cudaSuccess) (void)cudaGetLastError();
  }
  static result<ipc_device_scope> create(int device) {
    ipc_device_scope s(device);
    JITEMBED_CUDA_TRY(cudaGetDevice(&s.prev_));
    if (s.prev_ != device) JITEMBED_CUDA_TRY(cudaSetDevice(device));
    return s;
  }
  ipc_device_scope(ipc_device_scope&& o) noexcept : device_(o.device_), prev_(o.prev_) { o.prev_ = -1; }

 private:
  explicit ipc_device_scope(int device) : device_(device) {}
  int device_;
  int prev_ = -1;
};

// "cudaErrorInvalidValue (invalid argument)"; clears the sticky error.
inline std::string ipc_error_text(cudaError_t e) {
  (void)cudaGetLastError();
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

}  // namespace detail

// Opens handles with cudaIpcOpenMemHandle (cudaIpcMemLazyEnablePeerAccess) on the device the client
// names, copies with cudaMemcpy (synchronous: the bytes are there when the call returns) and closes with
// cudaIpcCloseMemHandle. A handle made in this same process cannot be opened (CUDA refuses it). Stateless:
// a server installs it as `cfg.cuda_ipc = any_cuda_ipc_backend(cuda::ipc_backend{})`.
class ipc_backend {
 public:
  result<cuda_ipc_mapping> open(std::span<const std::byte> handle, int device) {
    if (handle.size() != sizeof(cudaIpcMemHandle_t))
      return fail(errc::invalid_argument, "a CUDA IPC handle is " + std::to_string(sizeof(cudaIpcMemHandle_t)) +
                                              " bytes, not " + std::to_string(handle.size()));
    const int n = device_count();
    if (device < 0 || device >= n)
      return fail(errc::invalid_argument,
                  "device " + std::to_string(device) + " does not exist (" + std::to_string(n) + " CUDA devices)");
    auto scope = detail::ipc_device_scope::create(device);
    if (!scope) return fail(errc::invalid_argument, scope.error().message);
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.data(), sizeof h);
    void* base = nullptr;
    if (const auto e = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess)
      return fail(errc::invalid_argument,
                  "cudaIpcOpenMemHandle on device " + std::to_string(device) + " failed: " + detail::ipc_error_text(e));
    return cuda_ipc_mapping{base, allocation_size(base)};
  }

  result<void> copy_to_host(int device, const void* src, std::span<std::byte> dst) {
    JITEMBED_ASSIGN_OR_RETURN(auto scope, detail::ipc_device_scope::create(device));
    if (const auto e = cudaMemcpy(dst.data(), src, dst.size(), cudaMemcpyDeviceToHost); e != cudaSuccess)
      return fail(errc::io_error, "cudaMemcpy device to host failed: " + detail::ipc_error_text(e));
    return {};
  }

  result<void> copy_to_device(int device, void* dst, std::span<const std::byte> src) {
    JITEMBED_ASSIGN_OR_RETURN(auto scope, detail::ipc_device_scope::create(device));
    if (const auto e = cudaMemcpy(dst, src.data(), src.size(), cudaMemcpyHostToDevice); e != cudaSuccess)
      return fail(errc::io_error, "cudaMemcpy host to device failed: " + detail::ipc_error_text(e));
    return {};
  }

  void close(int device, void* base) noexcept {
    auto scope = detail::ipc_device_scope::create(device);
    if (!scope) return;
    if (cudaIpcCloseMemHandle(base) != cudaSuccess) (void)cudaGetLastError();
  }

 private:
  // The size of the allocation that starts at `base` (cuMemGetAddressRange through the runtime's driver
  // entry point, so the program need not link libcuda); 0 when the driver does not say.
  static std::uint64_t allocation_size(void* base) noexcept {
    using get_range = CUresult (*)(CUdeviceptr*, std::size_t*, CUdeviceptr);
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess || !fn) {
      (void)cudaGetLastError();
      return 0;
    }
    CUdeviceptr start = 0;
    std::size_t size = 0;
    if (reinterpret_cast<get_range>(fn)(&start, &size, reinterpret_cast<CUdeviceptr>(base)) != CUDA_SUCCESS) return 0;
    const auto at = reinterpret_cast<CUdeviceptr>(base);
    return start <= at && at - start < size ? size - (at - start) : 0;
  }
};

static_assert(cuda_ipc_backend<ipc_backend>);

}  // namespace jitembed::cuda
