// cuda_backend: the tensor-parallel layers' math (backend.hpp) on one CUDA device, enqueued on a stream the
// caller gives: cuBLAS GEMMs (f32, or bf16 with f32 compute and f32 gradient accumulation) and the kernels of
// parallel/cuda/kernels.hpp (defined in kernels.cuh: include it in one .cu file of the program).
// Stream contract: every operation enqueues on stream() and returns; collectives run on the communicator's
// stream, ordered against stream() by events (before_comm / after_comm). upload() (from pageable memory,
// load time) and download() (checks) are the only calls that wait for the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "jitembed/core/dtype.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/cuda/buffer.hpp"
#include "jitembed/cuda/check.hpp"
#include "jitembed/cuda/stream.hpp"
#include "jitembed/nn/pointwise.hpp"
#include "jitembed/parallel/backend.hpp"
#include "jitembed/parallel/detail/capture.hpp"
#include "jitembed/parallel/cuda/attention.hpp"
#include "jitembed/parallel/cuda/gemm.hpp"
#include "jitembed/parallel/cuda/kernels.hpp"

namespace jitembed::parallel {

namespace detail {

inline cudaStream_t raw_stream(cudaStream_t s) noexcept { return s; }
inline cudaStream_t raw_stream(jitembed::cuda::stream_ref s) noexcept { return s.get(); }

// The stream a communicator's collectives run on (nccl_communicator: stream(); host_staged: its memory's).
template <class C>
cudaStream_t comm_stream(C& comm) {
  if constexpr (requires { comm.stream(); }) {
    return raw_stream(comm.stream());
  } else if constexpr (requires { comm.memory().stream(); }) {
    return raw_stream(comm.memory().stream());
  } else {
    static_assert(sizeof(C) == 0, "cuda_backend: the communicator has no CUDA stream");
    return nullptr;
  }
}

struct cuda_backend_state {
  cublas_handle blas;
  jitembed::cuda::event fork, join;  // compute → communication, communication → compute
  cuda_attention attention;  // empty: the exact path (parallel/cuda/attention.hpp)
  cuda_backend_state(cublas_handle b, jitembed::cuda::event f, jitembed::cuda::event j,
                     cuda_attention a)
      : blas(std::move(b)), fork(std::move(f)), join(std::move(j)), attention(std::move(a)) {}
};

}  // namespace detail

// A copyable handle (copies share the cuBLAS handle and the events; one thread at a time, like the layer
// that holds it). The current CUDA device must be the stream's device when it is created and used.
class cuda_backend {
 public:
  // dt: f32 or bf16 activations and weights. attention: a fused engine for attention_forward / backward
  // (make_cudnn_attention(stream), parallel/cuda/cudnn_sdpa.hpp: cuDNN's flash attention, bf16), enqueueing on
  // the same stream; null keeps the exact path (the reference). Fails with invalid_argument for another dtype
  // or an engine that does not take dt, and with the CUDA / cuBLAS error when the handle or the events
  // cannot be made.
  static result<cuda_backend> create(jitembed::cuda::stream_ref stream, jitembed::dtype dt = jitembed::dtype::f32,
                                     cuda_attention attention = {}) {
    if (dt != jitembed::dtype::f32 && dt != jitembed::dtype::bf16) {
      return fail(errc::invalid_argument, "cuda_backend: dtype " + std::string(to_string(dt)) + " (f32 or bf16 only)");
    }
    if (attention && !attention->supports(dt)) {
      return fail(errc::invalid_argument, "cuda_backend: the " + std::string(attention->name()) +
                                              " attention engine does not take dtype " + std::string(to_string(dt)));
    }
    return detail::capture("cuda_backend create", [&]() -> result<cuda_backend> {
      int dev = 0;
      JITEMBED_CUDA_CHECK(cudaGetDevice(&dev));
      JITEMBED_ASSIGN_OR_RETURN(auto fork, jitembed::cuda::event::create());
      JITEMBED_ASSIGN_OR_RETURN(auto join, jitembed::cuda::event::create());
      JITEMBED_ASSIGN_OR_RETURN(auto blas, cublas_handle::create(stream));
      return cuda_backend(
          std::make_shared<detail::cuda_backend_state>(std::move(blas), std::move(fork), std::move(join),
                                                       std::move(attention)),
          stream,
          dt, dev);
    });
  }

  jitembed::device device() const noexcept { return jitembed::device::cuda(ordinal_); }
  jitembed::dtype dtype() const noexcept { return dt_; }
  jitembed::cuda::stream_ref stream() const noexcept { return stream_; }
  cublas_handle& blas() const noexcept { return state_->blas; }

  tensor empty(const shape& s, jitembed::dtype t) const { return jitembed::cuda::empty_device(s, t, stream_, ordinal_); }
  tensor zeros(const shape& s, jitembed::dtype t) const {
    tensor out = empty(s, t);
    zero(out);
    return out;
  }
  void zero(const tensor_view& v) const {
    if (v.nbytes() != 0) JITEMBED_CUDA_CHECK(cudaMemsetAsync(v.data(), 0, v.nbytes(), stream_.get()));
  }
  // A CPU f32 tensor as a dtype() tensor on the device (bf16: rounded to nearest even on the host).
  tensor upload(const tensor_view& x) const { return upload_as(x, dt_); }
  tensor upload_as(const tensor_view& x, jitembed::dtype t) const {
    if (!x.device().is_cpu() || (x.numel() > 0 && !x.is_contiguous())) {
      throw error(errc::invalid_argument, "cuda_backend upload: expected a contiguous CPU tensor, got " + x.shape().to_string());
    }
    tensor out = empty(x.shape(), t);
    if (x.dtype() == t) {
      if (x.nbytes()) JITEMBED_CUDA_CHECK(cudaMemcpyAsync(out.data(), x.data(), x.nbytes(), cudaMemcpyHostToDevice, stream_.get()));
      return out;
    }
    if (x.dtype() != jitembed::dtype::f32 || t != jitembed::dtype::bf16) {
      throw error(errc::dtype_mismatch, "cuda_backend upload: " + std::string(to_string(x.dtype())) + " to " +
                                            std::string(to_string(t)));
    }
    // A copy from pageable memory has read its source when cudaMemcpyAsync returns, so `bits` may go.
    std::vector<std::uint16_t> bits(x.numel());
    for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = nn::pointwise::bf16_from_float(x.data<const float>()[i]);
    if (!bits.empty()) {
      JITEMBED_CUDA_CHECK(cudaMemcpyAsync(out.data(), bits.data(), out.nbytes(), cudaMemcpyHostToDevice, stream_.get()));
    }
    return out;
  }
  // A CPU f32 copy (bf16 widened); waits for the stream.
  tensor download(const tensor_view& v) const {
    if (v.numel() > 0 && !v.is_contiguous()) throw error(errc::invalid_argument, "cuda_backend download: not contiguous");
    std::vector<std::byte> raw(v.nbytes());
    if (!raw.empty()) JITEMBED_CUDA_CHECK(cudaMemcpyAsync(raw.data(), v.data(), v.nbytes(), cudaMemcpyDefault, stream_.get()));
    JITEMBED_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    tensor out = tensor::empty(v.shape(), jitembed::dtype::f32);
    if (v.dtype() == jitembed::dtype::f32) {
      if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
    } else if (v.dtype() == jitembed::dtype::bf16) {
      const auto* b = reinterpret_cast<const std::uint16_t*>(raw.data());
      for (std::uint64_t i = 0; i < v.numel(); ++i) out.data<float>()[i] = nn::pointwise::bf16_to_float(b[i]);
    } else {
      throw error(errc::dtype_mismatch, "cuda_backend download: dtype " + std::string(to_string(v.dtype())));
    }
    return out;
  }

  // y = x·wᵀ (+ bias): x [..., K], w [N, K], y [..., N], all dtype().
  void linear_forward(const tensor_view& x, const tensor_view& w, const tensor_view* bias, const tensor_view& y) const {
    gemm(state_->blas, false, true, 1.0f, matrix(x), w, 0.0f, matrix(y));
    if (bias != nullptr) add_bias_rows(y, *bias);
  }
  // dx = dy·w (dtype()), dw += dyᵀ·x and db += Σ_rows dy (f32).
  void linear_backward(const tensor_view& x, const tensor_view& w, const tensor_view& dy, const tensor_view* dx,
                       const tensor_view* dw, const tensor_view* db) const {
    const tensor_view xm = matrix(x), dym = matrix(dy);
    if (dx != nullptr) gemm(state_->blas, false, false, 1.0f, dym, w, 0.0f, matrix(*dx));
    if (dw != nullptr) gemm(state_->blas, true, false, 1.0f, dym, xm, 1.0f, *dw);
    if (db != nullptr) {
      kernels::bias_grad(dy.dtype(), dym.data(), db->data<float>(), dym.size(0), dym.size(1), stream_.get());
    }
  }
  void add_bias_rows(const tensor_view& y, const tensor_view& b) const {
    const auto n = static_cast<std::int64_t>(b.numel());
    if (n == 0) return;
    kernels::add_bias_rows(y.dtype(), y.data(), b.data(), static_cast<std::int64_t>(y.numel()) / n, n, stream_.get());
  }
  void gelu_forward(const tensor_view& x, const tensor_view& y) const {
    kernels::gelu_forward(x.dtype(), x.data(), y.data(), static_cast<std::int64_t>(x.numel()), stream_.get());
  }
  void gelu_backward(const tensor_view& x, const tensor_view& dy, const tensor_view& dx) const {
    kernels::gelu_backward(x.dtype(), x.data(), dy.data(), dx.data(), static_cast<std::int64_t>(x.numel()), stream_.get());
  }

  // ids i64 on the device; ids outside the shard [start, start + table rows) give zero rows.
  void embedding_forward(const tensor_view& ids, const tensor_view& table, std::int64_t start,
                         const tensor_view& out) const {
    kernels::embedding_forward(table.dtype(), ids.data<const std::int64_t>(), table.data(), out.data(),
                               static_cast<std::int64_t>(ids.numel()), table.size(1), start, table.size(0), stream_.get());
  }
  void embedding_backward(const tensor_view& ids, const tensor_view& dout, std::int64_t start,
                          const tensor_view& dtable) const {
    kernels::embedding_backward(dout.dtype(), ids.data<const std::int64_t>(), dout.data(), dtable.data<float>(),
                                static_cast<std::int64_t>(ids.numel()), dtable.size(1), start, dtable.size(0),
                                stream_.get());
  }
  using attention_saved = cuda_attention_saved;
  // The fused engine given to create(), or null (the exact path).
  cuda_attention_engine* attention_engine() const noexcept { return state_->attention.get(); }
  attention_saved attention_forward(const tensor_view& q, const tensor_view& k, const tensor_view& v, bool causal,
                                    const tensor& out) const {
    if (state_->attention) return state_->attention->forward(q, k, v, causal, out);
    return cuda_attention_forward(state_->blas, q, k, v, causal, out);
  }
  // The path that made `saved` runs backward: the exact one when it kept the probabilities.
  void attention_backward(const tensor_view& q, const tensor_view& k, const tensor_view& v, const attention_saved& saved,
                          const tensor_view& dout, const tensor_view& dq, const tensor_view& dk, const tensor_view& dv) const {
    if (saved.probs.defined()) {
      cuda_attention_backward(state_->blas, q, k, v, saved, dout, dq, dk, dv);
      return;
    }
    if (!state_->attention) {
      throw error(errc::invalid_argument, "cuda_backend attention_backward: the saved state has no probabilities and "
                                          "this backend has no fused attention engine");
    }
    state_->attention->backward(q, k, v, saved, dout, dq, dk, dv);
  }

  // The communicator's stream waits for the work enqueued on stream() so far (no host wait).
  // It also names stream() as the consumer of the communicator's results, so their frees wait for it.
  template <class C>
  void before_comm(C& comm) const {
    const cudaStream_t s = detail::comm_stream(comm);
    if constexpr (requires { comm.set_consumer_stream(s); }) {
      comm.set_consumer_stream(stream_.get());
    } else if constexpr (requires { comm.memory().set_consumer_stream(s); }) {
      comm.memory().set_consumer_stream(stream_.get());
    }
    if (s == stream_.get()) return;
    state_->fork.record(stream_);
    state_->fork.wait_on(s);
  }
  // stream() waits for the collectives enqueued on the communicator's stream so far.
  template <class C>
  void after_comm(C& comm) const {
    const cudaStream_t s = detail::comm_stream(comm);
    if (s == stream_.get()) return;
    state_->join.record(s);
    state_->join.wait_on(stream_);
  }

 private:
  cuda_backend(std::shared_ptr<detail::cuda_backend_state> state, jitembed::cuda::stream_ref s, jitembed::dtype dt,
               int ordinal)
      : state_(std::move(state)), stream_(s), dt_(dt), ordinal_(ordinal) {}

  // [..., K] → [rows, K] over the same storage.
  static tensor_view matrix(const tensor_view& x) {
    std::int64_t rows = 1;
    for (std::size_t i = 0; i + 1 < x.rank(); ++i) rows *= x.size(i);
    return tensor_view(x.data(), x.dtype(), shape{rows, x.rank() ? x.size(x.rank() - 1) : 1}, x.device());
  }

  std::shared_ptr<detail::cuda_backend_state> state_;
  jitembed::cuda::stream_ref stream_;
  jitembed::dtype dt_ = jitembed::dtype::f32;
  int ordinal_ = 0;
};

static_assert(math_backend<cuda_backend>);

}  // namespace jitembed::parallel
