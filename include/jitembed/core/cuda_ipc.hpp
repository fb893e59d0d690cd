// The CUDA IPC operations behind Triton's CUDA shared-memory extension (open a cudaIpcMemHandle_t, copy
// between its memory and the host, close it) as a concept and a type-erased handle: the server calls them
// without linking CUDA, and a program built with the CUDA component installs cuda::ipc_backend
// (cuda/ipc_backend.hpp); tests install an in-memory fake.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>

#include "jitembed/core/error.hpp"

namespace jitembed {

// Bytes of a cudaIpcMemHandle_t (CUDA_IPC_HANDLE_SIZE): the raw_handle a client registers.
inline constexpr std::size_t cuda_ipc_handle_size = 64;

// What open() maps: the exporting allocation, from its start.
struct cuda_ipc_mapping {
  void* base = nullptr;    // device address in this process
  std::uint64_t size = 0;  // the allocation's size in bytes; 0 when the backend cannot tell
};

// A backend B, called from several threads at once:
//   b.open(handle, device) -> result<cuda_ipc_mapping>: opens `handle` (cuda_ipc_handle_size bytes that
//       cudaIpcGetMemHandle made in another process) on `device`; invalid_argument for a device that does
//       not exist or a handle that cannot be opened, with a message naming the CUDA error.
//   b.copy_to_host(device, src, dst) -> result<void>: dst.size() bytes at device address `src` (inside a
//       mapping of `device`) to the host.
//   b.copy_to_device(device, dst, src) -> result<void>: `src` to device address `dst`.
//   b.close(device, base) noexcept: closes a mapping open() returned; called once, after its last copy.
// The caller checks bounds (a copy stays inside the mapping) and names the region in its errors.
template <class B>
concept cuda_ipc_backend = requires(B& b, std::span<const std::byte> in, std::span<std::byte> out, int device, void* p,
                                    const void* cp) {
  { b.open(in, device) } -> std::same_as<result<cuda_ipc_mapping>>;
  { b.copy_to_host(device, cp, out) } -> std::same_as<result<void>>;
  { b.copy_to_device(device, p, in) } -> std::same_as<result<void>>;
  { b.close(device, p) }
  noexcept;
};

// A type-erased cuda_ipc_backend: a copyable handle whose copies share one backend (docs/api.md rule 2.4;
// the service and every region opened through it hold it). Empty: no CUDA shared memory.
class any_cuda_ipc_backend {
 public:
  any_cuda_ipc_backend() = default;
  template <cuda_ipc_backend B>
  requires(!std::same_as<std::remove_cvref_t<B>, any_cuda_ipc_backend>) explicit any_cuda_ipc_backend(B&& backend)
      : impl_(std::make_shared<model<std::remove_cvref_t<B>>>(std::forward<B>(backend))) {}

  explicit operator bool() const noexcept { return impl_ != nullptr; }

  // Preconditions: not empty.
  result<cuda_ipc_mapping> open(std::span<const std::byte> handle, int device) const {
    return impl_->open(handle, device);
  }
  result<void> copy_to_host(int device, const void* src, std::span<std::byte> dst) const {
    return impl_->copy_to_host(device, src, dst);
  }
  result<void> copy_to_device(int device, void* dst, std::span<const std::byte> src) const {
    return impl_->copy_to_device(device, dst, src);
  }
  void close(int device, void* base) const noexcept { impl_->close(device, base); }

  // The backend behind the handle if it is a B, else nullptr.
  template <class B>
  B* target() const noexcept {
    auto* m = dynamic_cast<model<B>*>(impl_.get());
    return m ? &m->backend : nullptr;
  }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual result<cuda_ipc_mapping> open(std::span<const std::byte>, int) = 0;
    virtual result<void> copy_to_host(int, const void*, std::span<std::byte>) = 0;
    virtual result<void> copy_to_device(int, void*, std::span<const std::byte>) = 0;
    virtual void close(int, void*) noexcept = 0;
  };
  template <class B>
  struct model final : concept_t {
    template <class A>
    explicit model(A&& b) : backend(std::forward<A>(b)) {}
    result<cuda_ipc_mapping> open(std::span<const std::byte> h, int d) override { return backend.open(h, d); }
    result<void> copy_to_host(int d, const void* s, std::span<std::byte> o) override {
      return backend.copy_to_host(d, s, o);
    }
    result<void> copy_to_device(int d, void* o, std::span<const std::byte> s) override {
      return backend.copy_to_device(d, o, s);
    }
    void close(int d, void* p) noexcept override { backend.close(d, p); }
    B backend;
  };
  std::shared_ptr<concept_t> impl_;
};

}  // namespace jitembed
