// RAII CUDA streams and events (owning types) next to non-owning stream_ref / event_ref views.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "jitembed/core/error.hpp"
#include "jitembed/cuda/check.hpp"

namespace jitembed::cuda {

class stream_ref {
 public:
  constexpr stream_ref() noexcept = default;  // the legacy default stream
  constexpr stream_ref(cudaStream_t s) noexcept : s_(s) {}  // NOLINT: views convert implicitly
  cudaStream_t get() const noexcept { return s_; }
  void synchronize() const { JITEMBED_CUDA_CHECK(cudaStreamSynchronize(s_)); }
  bool ready() const {
    const cudaError_t e = cudaStreamQuery(s_);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    JITEMBED_CUDA_CHECK(e);
    return true;
  }

 private:
  cudaStream_t s_ = nullptr;
};

// An owned stream (cudaStreamCreateWithPriority). Movable; a moved-from stream may only be destroyed or
// assigned to.
class stream {
 public:
  // The CUDA error (internal; resource_exhausted for out-of-memory) when the stream cannot be created: no
  // device, bad flags or priority.
  static result<stream> create(unsigned flags = cudaStreamNonBlocking, int priority = 0) {
    cudaStream_t s = nullptr;
    JITEMBED_CUDA_TRY(cudaStreamCreateWithPriority(&s, flags, priority));
    return stream(s);
  }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  stream(stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  stream& operator=(stream&& o) noexcept {
    if (this != &o) {
      reset();
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  ~stream() { reset(); }

  cudaStream_t get() const noexcept { return s_; }
  stream_ref ref() const noexcept { return {s_}; }
  operator stream_ref() const noexcept { return ref(); }  // NOLINT
  void synchronize() const { ref().synchronize(); }

 private:
  explicit stream(cudaStream_t s) noexcept : s_(s) {}
  void reset() noexcept {
    if (s_) cudaStreamDestroy(s_);
    s_ = nullptr;
  }
  cudaStream_t s_ = nullptr;
};

class event_ref {
 public:
  constexpr event_ref(cudaEvent_t e) noexcept : e_(e) {}  // NOLINT
  cudaEvent_t get() const noexcept { return e_; }
  void record(stream_ref s) const { JITEMBED_CUDA_CHECK(cudaEventRecord(e_, s.get())); }
  void synchronize() const { JITEMBED_CUDA_CHECK(cudaEventSynchronize(e_)); }
  // Makes `s` wait for this event without blocking the host.
  void wait_on(stream_ref s) const { JITEMBED_CUDA_CHECK(cudaStreamWaitEvent(s.get(), e_, 0)); }

 private:
  cudaEvent_t e_;
};

// An owned event (cudaEventCreateWithFlags). Movable; a moved-from event may only be destroyed or assigned to.
class event {
 public:
  // flags = cudaEventDefault for elapsed_ms. The CUDA error when the event cannot be created.
  static result<event> create(unsigned flags = cudaEventDisableTiming) {
    cudaEvent_t e = nullptr;
    JITEMBED_CUDA_TRY(cudaEventCreateWithFlags(&e, flags));
    return event(e);
  }
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  event(event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  event& operator=(event&& o) noexcept {
    if (this != &o) {
      if (e_) cudaEventDestroy(e_);
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  ~event() {
    if (e_) cudaEventDestroy(e_);
  }
  cudaEvent_t get() const noexcept { return e_; }
  event_ref ref() const noexcept { return {e_}; }
  void record(stream_ref s) const { ref().record(s); }
  void synchronize() const { ref().synchronize(); }
  void wait_on(stream_ref s) const { ref().wait_on(s); }

  // Milliseconds between two events created with timing enabled (flags = cudaEventDefault).
  static float elapsed_ms(const event& start, const event& stop) {
    float ms = 0;
    JITEMBED_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return ms;
  }

 private:
  explicit event(cudaEvent_t e) noexcept : e_(e) {}
  cudaEvent_t e_ = nullptr;
};

}  // namespace jitembed::cuda
