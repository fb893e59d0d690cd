// RAII device and pinned-host allocations, usable as jitembed::tensor storage.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "jitembed/core/memory_account.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/cuda/check.hpp"
#include "jitembed/cuda/stream.hpp"

namespace jitembed::cuda {

// Device memory, stream-ordered (cudaMallocAsync / cudaFreeAsync on the stream it was made on).
class device_buffer {
 public:
  device_buffer() = default;  // empty: no memory
  // `bytes` of device memory on `s` (0: empty). resource_exhausted (retryable) when the device is out of
  // memory or the calling thread's memory_scope has a device budget it would pass (core/memory_account.hpp:
  // the bytes count against that scope's tag while the buffer lives), the CUDA error otherwise.
  static result<device_buffer> create(std::size_t bytes, stream_ref s) {
    JITEMBED_ASSIGN_OR_RETURN(auto charged, memory_account::charge_current(bytes, memory_kind::device));
    void* p = nullptr;
    if (bytes) JITEMBED_CUDA_TRY(cudaMallocAsync(&p, bytes, s.get()));
    device_buffer b(p, bytes, s);
    if (charged.counted()) b.charge_ = std::make_unique<memory_account::charge>(std::move(charged));
    return b;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& o) noexcept { swap(o); }
  device_buffer& operator=(device_buffer&& o) noexcept {
    device_buffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~device_buffer() {
    if (p_) cudaFreeAsync(p_, stream_.get());
  }

  void* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return size_; }

 private:
  device_buffer(void* p, std::size_t bytes, stream_ref s) noexcept : p_(p), size_(bytes), stream_(s) {}
  void swap(device_buffer& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(size_, o.size_);
    std::swap(stream_, o.stream_);
    std::swap(charge_, o.charge_);
  }
  void* p_ = nullptr;
  std::size_t size_ = 0;
  stream_ref stream_{};
  std::unique_ptr<memory_account::charge> charge_;  // released after the free (member order)
};

// A CUDA tensor of new device memory; the storage is freed (stream-ordered) with the last tensor. Throws
// jitembed::error when the memory cannot be allocated.
inline tensor empty_device(const shape& s, dtype t, stream_ref st, int ordinal = 0) {
  const auto n = checked_nbytes(s.span(), t).value();
  auto buf = std::make_shared<device_buffer>(device_buffer::create(static_cast<std::size_t>(n), st).value());
  void* p = buf->data();
  return tensor::wrap(std::move(buf), tensor_view(p, t, s, device::cuda(ordinal)));
}

// Page-locked host memory (cudaHostAlloc): the staging area for async H2D copies.
class pinned_buffer {
 public:
  pinned_buffer() = default;  // empty: no memory
  // `bytes` of page-locked host memory (0: empty); the CUDA error when cudaHostAlloc fails.
  static result<pinned_buffer> create(std::size_t bytes, unsigned flags = cudaHostAllocDefault) {
    void* p = nullptr;
    if (bytes) JITEMBED_CUDA_TRY(cudaHostAlloc(&p, bytes, flags));
    return pinned_buffer(p, bytes);
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  pinned_buffer(pinned_buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    if (this != &o) {
      if (p_) cudaFreeHost(p_);
      p_ = std::exchange(o.p_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~pinned_buffer() {
    if (p_) cudaFreeHost(p_);
  }
  void* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return size_; }

 private:
  pinned_buffer(void* p, std::size_t bytes) noexcept : p_(p), size_(bytes) {}
  void* p_ = nullptr;
  std::size_t size_ = 0;
};

// Async copy between two contiguous tensors of the same byte size (any device pair).
inline void copy_async(const tensor_view& dst, const tensor_view& src, stream_ref s) {
  if (dst.nbytes() != src.nbytes()) throw error(errc::invalid_argument, "copy_async: byte sizes differ");
  if (!dst.is_contiguous() || !src.is_contiguous()) throw error(errc::invalid_argument, "copy_async: non-contiguous");
  JITEMBED_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDefault, s.get()));
}

}  // namespace jitembed::cuda
