// Host plumbing shared by the CUDA reference models: device selection, the per-call stream, pinned
// staging of a CPU batch and splitting a batched result back into per-item CPU tensors.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/cuda/buffer.hpp"
#include "jitembed/cuda/check.hpp"
#include "jitembed/cuda/pinned_pool.hpp"
#include "jitembed/cuda/stream.hpp"
#include "jitembed/models/model.hpp"

namespace jitembed::models::detail {

// errc::not_found when `ordinal` names no CUDA device (none at all, or too few).
inline result<void> check_cuda_device(std::string_view model, int ordinal) {
  const int n = cuda::device_count();
  if (ordinal < 0 || ordinal >= n)
    return fail(errc::not_found, std::string(model) + ": no CUDA device " + std::to_string(ordinal) + " (" + std::to_string(n) +
                                     " devices)");
  return {};
}

// Makes `ordinal` current for this thread for the guard's lifetime.
class device_guard {
 public:
  explicit device_guard(int ordinal) {
    JITEMBED_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != ordinal) JITEMBED_CUDA_CHECK(cudaSetDevice(ordinal));
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  ~device_guard() {
    if (cudaSetDevice(prev_) != cudaSuccess) (void)cudaGetLastError();
  }

 private:
  int prev_ = 0;
};

// Waits for the stream on scope exit, whatever the exit path, so pinned staging buffers declared before it
// never go back to their pool while a copy from or into them is still queued.
class sync_on_exit {
 public:
  explicit sync_on_exit(cuda::stream_ref s) noexcept : s_(s) {}
  sync_on_exit(const sync_on_exit&) = delete;
  sync_on_exit& operator=(const sync_on_exit&) = delete;
  ~sync_on_exit() {
    if (cudaStreamSynchronize(s_.get()) != cudaSuccess) (void)cudaGetLastError();
  }

 private:
  cuda::stream_ref s_;
};

// Copies the equally sized, contiguous CPU items of a batch one after another into `staged`.
inline void stage_items(std::span<const tensor> batch, const tensor& staged) {
  auto* dst = static_cast<std::byte*>(staged.data());
  for (const tensor& item : batch) {
    if (item.nbytes()) std::memcpy(dst, item.data(), item.nbytes());
    dst += item.nbytes();
  }
}

// Item i of a batched CPU result [n, item_shape...] as its own CPU tensor (a copy: the batch buffer is
// pinned memory that goes back to its pool).
inline tensor item_of(const tensor& batched, std::size_t i, const shape& item_shape) {
  tensor t = tensor::empty(item_shape, batched.dtype());
  const std::size_t bytes = t.nbytes();
  if (bytes) std::memcpy(t.data(), static_cast<const std::byte*>(batched.data()) + i * bytes, bytes);
  return t;
}

// run() bodies throw jitembed::error (CUDA failures included); the model API returns result<>.
template <class F>
auto run_catching(std::string_view model, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const error& e) {
    return fail(e.code(), std::string(model) + " (cuda): " + e.message());
  } catch (const std::bad_alloc&) {
    return fail(errc::resource_exhausted, std::string(model) + " (cuda): out of host memory");
  }
}

// What every CUDA reference model shares: the CPU model it reproduces (metadata, version and preprocessing
// come from it, so cache keys agree), the device ordinal and a pinned staging pool.
template <class Cpu>
class cuda_model_base {
 public:
  using options_type = std::remove_cvref_t<decltype(std::declval<const Cpu&>().options())>;
  static constexpr std::string_view kName = Cpu::kName;

  std::string_view name() const noexcept { return kName; }
  std::string_view version() const noexcept { return cpu_.version(); }
  std::string_view preprocess_key() const noexcept { return cpu_.preprocess_key(); }
  modality input_modality() const noexcept { return cpu_.input_modality(); }
  std::span<const tensor_meta> inputs() const noexcept { return cpu_.inputs(); }
  std::span<const tensor_meta> outputs() const noexcept { return cpu_.outputs(); }
  std::size_t max_batch_size() const noexcept { return cpu_.max_batch_size(); }
  jitembed::device device() const noexcept { return device::cuda(ordinal_); }
  const options_type& options() const noexcept { return cpu_.options(); }
  // The CPU model this one reproduces (preprocessing runs there).
  const Cpu& reference() const noexcept { return cpu_; }
  result<tensor> preprocess(bytes_view raw, const decode_limits& limits) const { return cpu_.preprocess(raw, limits); }

 protected:
  cuda_model_base(const options_type& opts, int device_ordinal, std::size_t staging_bytes)
      : cpu_(Cpu::create(opts).value()), ordinal_(device_ordinal), pool_(staging_bytes) {
    detail::check_cuda_device(kName, device_ordinal).value();
  }

  Cpu cpu_;
  int ordinal_;
  cuda::pinned_pool pool_;  // a handle: copies of the model share it
};

}  // namespace jitembed::models::detail
