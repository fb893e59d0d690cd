// A CUDA shared-memory region, server side: another process's device memory shared by cudaIpcMemHandle_t, opened
// through the service's any_cuda_ipc_backend (core/cuda_ipc.hpp) so that the server never links CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/cuda_ipc.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/server/shm/detail/region.hpp"

namespace jitembed::server::detail {

// `byte_size` bytes from the start of the allocation that `raw_handle` names, on device `device_id`, mapped
// until the last holder lets go. Copies are synchronous.
class cuda_shared_memory_region final : public shared_memory_region {
 public:
  ~cuda_shared_memory_region() override { backend_.close(device_, base_); }

  // Opens `raw_handle` through `backend`. Errors (invalid_argument, naming the region): a handle of the
  // wrong size, a bad device_id, byte_size 0 or past the allocation, the backend's open failing.
  static result<std::shared_ptr<const cuda_shared_memory_region>> open(const any_cuda_ipc_backend& backend,
                                                                       std::string name,
                                                                       std::span<const std::byte> raw_handle,
                                                                       std::int64_t device_id,
                                                                       std::uint64_t byte_size) {
    const std::string w = "CUDA shared memory region '" + name + "'";
    if (raw_handle.size() != cuda_ipc_handle_size)
      return fail(errc::invalid_argument, w + ": raw_handle is " + std::to_string(raw_handle.size()) +
                                              " bytes, a cudaIpcMemHandle_t is " +
                                              std::to_string(cuda_ipc_handle_size));
    if (device_id < 0 || device_id > std::numeric_limits<int>::max())
      return fail(errc::invalid_argument, w + ": device_id " + std::to_string(device_id) + " is not a device");
    if (byte_size == 0) return fail(errc::invalid_argument, w + ": byte_size is 0");
    const int device = static_cast<int>(device_id);
    auto m = backend.open(raw_handle, device);
    if (!m)
      return fail(errc::invalid_argument,
                  w + ": cannot open raw_handle on device " + std::to_string(device) + ": " + m.error().message);
    // Held from here: a check failing below closes the mapping.
    std::shared_ptr<const cuda_shared_memory_region> r(
        new cuda_shared_memory_region(backend, std::move(name), device, m->base, byte_size));
    if (m->size && m->size < byte_size)
      return fail(errc::invalid_argument, w + ": byte_size " + std::to_string(byte_size) + " is past the end of the " +
                                              std::to_string(m->size) + "-byte CUDA allocation");
    return r;
  }

  int device_id() const noexcept { return device_; }

  result<void> read(std::uint64_t at, std::span<std::byte> dst, std::string_view what) const override {
    JITEMBED_TRY(check_bounds(at, dst.size(), what));
    if (dst.empty()) return {};
    auto r = backend_.copy_to_host(device_, static_cast<const std::byte*>(base_) + at, dst);
    if (!r)
      return fail(r.code(), std::string(what) + ": reading CUDA shared memory region '" + name() +
                                "' failed: " + r.error().message);
    return {};
  }

  result<void> write(std::uint64_t at, bytes_view src, std::string_view what) const override {
    JITEMBED_TRY(check_bounds(at, src.size(), what));
    if (src.empty()) return {};
    auto r = backend_.copy_to_device(device_, static_cast<std::byte*>(base_) + at, src);
    if (!r)
      return fail(r.code(), std::string(what) + ": writing CUDA shared memory region '" + name() +
                                "' failed: " + r.error().message);
    return {};
  }

  // Triton's {"name", "device_id", "byte_size"}.
  shared_memory_status status() const override { return {name(), {}, {}, device_, byte_size()}; }

 private:
  cuda_shared_memory_region(any_cuda_ipc_backend backend, std::string name, int device, void* base,
                            std::uint64_t byte_size)
      : shared_memory_region(shared_memory_kind::cuda, std::move(name), byte_size),
        backend_(std::move(backend)),
        device_(device),
        base_(base) {}

  any_cuda_ipc_backend backend_;
  int device_ = 0;
  void* base_ = nullptr;
};

}  // namespace jitembed::server::detail
