// Definitions of the kernels declared in parallel/cuda/kernels.hpp (nvcc only). Include this file in
// exactly ONE .cu translation unit of a program that uses cuda_backend: the launchers are ordinary
// (non-inline) functions. The arithmetic is nn/pointwise.hpp's, the same bodies the CPU math runs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "jitembed/core/error.hpp"
#include "jitembed/cuda/check.hpp"
#include "jitembed/nn/pointwise.hpp"
#include "jitembed/parallel/cuda/kernels.hpp"

namespace jitembed::parallel::kernels {

namespace detail {

namespace pw = jitembed::nn::pointwise;

using bf16_bits = std::uint16_t;  // bf16 storage: the top 16 bits of a binary32
constexpr int kBlock = 256;       // threads per block (a multiple of the warp size)

__device__ inline float load(const float* p, std::int64_t i) { return p[i]; }
__device__ inline float load(const bf16_bits* p, std::int64_t i) { return pw::bf16_to_float(p[i]); }
__device__ inline void store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ inline void store(bf16_bits* p, std::int64_t i, float v) { p[i] = pw::bf16_from_float(v); }

// Blocks for a grid-stride loop over n elements.
inline unsigned grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

// f(element tag) with the tag float (f32) or bf16_bits (bf16); other dtypes are dtype_mismatch.
template <class F>
void dispatch(dtype t, const char* what, F&& f) {
  if (t == dtype::f32) {
    f(float{});
  } else if (t == dtype::bf16) {
    f(bf16_bits{});
  } else {
    throw error(errc::dtype_mismatch, std::string("cuda kernels: ") + what + ": dtype " + std::string(to_string(t)) +
                                          " (f32 or bf16 only)");
  }
}

inline void check_launch() { JITEMBED_CUDA_CHECK(cudaGetLastError()); }

struct sum_op {
  __device__ float operator()(float a, float b) const { return a + b; }
  static constexpr float identity = 0.0f;
};
struct max_op {
  __device__ float operator()(float a, float b) const { return a > b ? a : b; }
  static constexpr float identity = -INFINITY;
};

// The reduction of v over the block (every thread gets it). `scratch` holds 32 floats of shared memory.
template <class Op>
__device__ float block_reduce(float v, Op op, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = threadIdx.x < warps ? scratch[threadIdx.x] : Op::identity;
  if (warp == 0) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  const float r = scratch[0];
  __syncthreads();  // scratch is reused by the next reduction
  return r;
}

#define JITEMBED_GRID_STRIDE(i, n) \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

template <class T>
__global__ void gelu_forward_kernel(const T* x, T* y, std::int64_t n) {
  JITEMBED_GRID_STRIDE(i, n) store(y, i, pw::gelu(load(x, i)));
}

template <class T>
__global__ void gelu_backward_kernel(const T* x, const T* dy, T* dx, std::int64_t n) {
  JITEMBED_GRID_STRIDE(i, n) store(dx, i, pw::gelu_grad(load(x, i), load(dy, i)));
}

template <class T>
__global__ void add_bias_kernel(T* y, const T* b, std::int64_t rows, std::int64_t cols) {
  JITEMBED_GRID_STRIDE(i, rows * cols) store(y, i, load(y, i) + load(b, i % cols));
}

// One thread per column (adjacent threads read adjacent columns of a row: coalesced).
template <class T>
__global__ void bias_grad_kernel(const T* dy, float* db, std::int64_t rows, std::int64_t cols) {
  JITEMBED_GRID_STRIDE(j, cols) {
    float s = 0.0f;
    for (std::int64_t i = 0; i < rows; ++i) s += load(dy, i * cols + j);
    db[j] += s;
  }
}

template <class From, class To>
__global__ void cast_kernel(const From* x, To* y, std::int64_t n) {
  JITEMBED_GRID_STRIDE(i, n) store(y, i, load(x, i));
}

template <class T>
__global__ void add_kernel(const T* a, const T* b, T* y, std::int64_t n) {
  JITEMBED_GRID_STRIDE(i, n) store(y, i, load(a, i) + load(b, i));
}

// One block per row: mean, then the mean of squares about it (two passes, as the CPU op), then y.
template <class T>
__global__ void layer_norm_forward_kernel(const T* x, const T* gamma, const T* beta, float eps, T* y, float* mean,
                                          float* rstd, std::int64_t h) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const T* xr = x + row * h;
  T* yr = y + row * h;
  float s = 0.0f;
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) s += load(xr, j);
  const float mu = block_reduce(s, sum_op{}, scratch) / static_cast<float>(h);
  float v = 0.0f;
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float d = load(xr, j) - mu;
    v += d * d;
  }
  const float r = pw::layer_norm_rstd(block_reduce(v, sum_op{}, scratch) / static_cast<float>(h), eps);
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    store(yr, j, pw::layer_norm_apply(load(xr, j), mu, r, load(gamma, j), load(beta, j)));
  }
}

// One block per row: the two row sums, then dx.
template <class T>
__global__ void layer_norm_dx_kernel(const T* x, const T* gamma, const float* mean, const float* rstd, const T* dy,
                                     T* dx, std::int64_t h) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const float mu = mean[row], r = rstd[row];
  float sg = 0.0f, sgx = 0.0f;
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float g = load(dy, row * h + j) * load(gamma, j);
    sg += g;
    sgx += g * (load(x, row * h + j) - mu) * r;
  }
  const float mg = block_reduce(sg, sum_op{}, scratch) / static_cast<float>(h);
  const float mgx = block_reduce(sgx, sum_op{}, scratch) / static_cast<float>(h);
  for (std::int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float g = load(dy, row * h + j) * load(gamma, j);
    store(dx, row * h + j, pw::layer_norm_dx(r, g, mg, (load(x, row * h + j) - mu) * r, mgx));
  }
}

// One thread per column: dgamma += Σ dy·x̂, dbeta += Σ dy (deterministic, no atomics).
template <class T>
__global__ void layer_norm_params_kernel(const T* x, const float* mean, const float* rstd, const T* dy, float* dgamma,
                                         float* dbeta, std::int64_t rows, std::int64_t h) {
  JITEMBED_GRID_STRIDE(j, h) {
    float g = 0.0f, b = 0.0f;
    for (std::int64_t i = 0; i < rows; ++i) {
      const float d = load(dy, i * h + j);
      g += d * (load(x, i * h + j) - mean[i]) * rstd[i];
      b += d;
    }
    if (dgamma != nullptr) dgamma[j] += g;
    if (dbeta != nullptr) dbeta[j] += b;
  }
}

// One block per row of [batches·sq, sk]; masked entries (j > i when causal) become exactly 0.
__global__ void softmax_rows_kernel(float* p, std::int64_t sq, std::int64_t sk, bool causal) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const std::int64_t i = row % sq;
  const std::int64_t end = causal ? (i + 1 < sk ? i + 1 : sk) : sk;
  float* pr = p + row * sk;
  float m = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < end; j += blockDim.x) m = fmaxf(m, pr[j]);
  m = block_reduce(m, max_op{}, scratch);
  float s = 0.0f;
  for (std::int64_t j = threadIdx.x; j < end; j += blockDim.x) {
    const float e = pw::softmax_exp(pr[j], m);
    pr[j] = e;
    s += e;
  }
  const float inv = 1.0f / block_reduce(s, sum_op{}, scratch);
  for (std::int64_t j = threadIdx.x; j < sk; j += blockDim.x) pr[j] = j < end ? pr[j] * inv : 0.0f;
}

__global__ void softmax_backward_rows_kernel(const float* p, float* dp, std::int64_t n) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const float* pr = p + row * n;
  float* dr = dp + row * n;
  float dot = 0.0f;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) dot += dr[j] * pr[j];
  dot = block_reduce(dot, sum_op{}, scratch);
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) dr[j] = pw::softmax_grad(pr[j], dr[j], dot);
}

template <class T>
__global__ void embedding_forward_kernel(const std::int64_t* ids, const T* table, T* out, std::int64_t n, std::int64_t h,
                                         std::int64_t start, std::int64_t local_rows) {
  JITEMBED_GRID_STRIDE(idx, n * h) {
    const std::int64_t i = idx / h, j = idx % h;
    const std::int64_t id = ids[i] - start;
    store(out, idx, id >= 0 && id < local_rows ? load(table, id * h + j) : 0.0f);
  }
}

template <class T>
__global__ void embedding_backward_kernel(const std::int64_t* ids, const T* dout, float* dtable, std::int64_t n,
                                          std::int64_t h, std::int64_t start, std::int64_t local_rows) {
  JITEMBED_GRID_STRIDE(idx, n * h) {
    const std::int64_t i = idx / h, j = idx % h;
    const std::int64_t id = ids[i] - start;
    if (id >= 0 && id < local_rows) atomicAdd(dtable + id * h + j, load(dout, idx));
  }
}

// One block per row: log-sum-exp, the row's loss added to *loss / rows, then the gradient (which may
// overwrite the logits: every read of the row happens before the barrier that precedes the writes).
template <class T>
__global__ void cross_entropy_kernel(const T* logits, const std::int64_t* targets, float* loss, T* dlogits,
                                     std::int64_t v, float inv_rows) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const T* xr = logits + row * v;
  float m = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x) m = fmaxf(m, load(xr, j));
  m = block_reduce(m, max_op{}, scratch);
  float s = 0.0f;
  for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x) s += pw::softmax_exp(load(xr, j), m);
  s = block_reduce(s, sum_op{}, scratch);  // ends with a barrier: every read of the row is done
  const float lse = pw::log_sum_exp(pw::softmax_state{m, s});
  const std::int64_t t = targets[row];
  if (threadIdx.x == 0) atomicAdd(loss, pw::cross_entropy_loss(lse, load(xr, t)) * inv_rows);
  if (dlogits == nullptr) return;
  __syncthreads();  // thread 0 read x[t] above
  T* dr = dlogits + row * v;
  for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    store(dr, j, pw::cross_entropy_grad(load(xr, j), lse, j == t, inv_rows));
  }
}

#undef JITEMBED_GRID_STRIDE

}  // namespace detail

void gelu_forward(dtype t, const void* x, void* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  detail::dispatch(t, "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    detail::gelu_forward_kernel<T><<<detail::grid_for(n), detail::kBlock, 0, stream>>>(static_cast<const T*>(x),
                                                                                          static_cast<T*>(y), n);
  });
  detail::check_launch();
}

void gelu_backward(dtype t, const void* x, const void* dy, void* dx, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  detail::dispatch(t, "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    detail::gelu_backward_kernel<T><<<detail::grid_for(n), detail::kBlock, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dx), n);
  });
  detail::check_launch();
}

void add_bias_rows(dtype t, void* y, const void* b, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  detail::dispatch(t, "add_bias_rows", [&](auto tag) {
    using T = decltype(tag);
    detail::add_bias_kernel<T><<<detail::grid_for(rows * cols), detail::kBlock, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(b), rows, cols);
  });
  detail::check_launch();
}

void bias_grad(dtype t, const void* dy, float* db, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  detail::dispatch(t, "bias_grad", [&](auto tag) {
    using T = decltype(tag);
    detail::bias_grad_kernel<T><<<detail::grid_for(cols), detail::kBlock, 0, stream>>>(static_cast<const T*>(dy), db,
                                                                                        rows, cols);
  });
  detail::check_launch();
}

void cast(dtype from, const void* x, dtype to, void* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  detail::dispatch(from, "cast", [&](auto from_tag) {
    detail::dispatch(to, "cast", [&](auto to_tag) {
      using F = decltype(from_tag);
      using T = decltype(to_tag);
      detail::cast_kernel<F, T><<<detail::grid_for(n), detail::kBlock, 0, stream>>>(static_cast<const F*>(x),
                                                                                     static_cast<T*>(y), n);
    });
  });
  detail::check_launch();
}

void add(dtype t, const void* a, const void* b, void* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  detail::dispatch(t, "add", [&](auto tag) {
    using T = decltype(tag);
    detail::add_kernel<T><<<detail::grid_for(n), detail::kBlock, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n);
  });
  detail::check_launch();
}

void layer_norm_forward(dtype t, const void* x, const void* gamma, const void* beta, float eps, void* y, float* mean,
                        float* rstd, std::int64_t rows, std::int64_t h, cudaStream_t stream) {
  if (rows <= 0 || h <= 0) return;
  detail::dispatch(t, "layer_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    detail::layer_norm_forward_kernel<T><<<static_cast<unsigned>(rows), detail::kBlock, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta), eps, static_cast<T*>(y),
        mean, rstd, h);
  });
  detail::check_launch();
}

void layer_norm_backward(dtype t, const void* x, const void* gamma, const float* mean, const float* rstd, const void* dy,
                         void* dx, float* dgamma, float* dbeta, std::int64_t rows, std::int64_t h, cudaStream_t stream) {
  if (rows <= 0 || h <= 0) return;
  detail::dispatch(t, "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    if (dgamma != nullptr || dbeta != nullptr) {  // reads dy before dx may overwrite it
      detail::layer_norm_params_kernel<T><<<detail::grid_for(h), detail::kBlock, 0, stream>>>(
          static_cast<const T*>(x), mean, rstd, static_cast<const T*>(dy), dgamma, dbeta, rows, h);
    }
    detail::layer_norm_dx_kernel<T><<<static_cast<unsigned>(rows), detail::kBlock, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(gamma), mean, rstd, static_cast<const T*>(dy),
        static_cast<T*>(dx), h);
  });
  detail::check_launch();
}

void softmax_rows(float* p, std::int64_t batches, std::int64_t sq, std::int64_t sk, bool causal, cudaStream_t stream) {
  if (batches <= 0 || sq <= 0 || sk <= 0) return;
  detail::softmax_rows_kernel<<<static_cast<unsigned>(batches * sq), detail::kBlock, 0, stream>>>(p, sq, sk, causal);
  detail::check_launch();
}

void softmax_backward_rows(const float* p, float* dp, std::int64_t rows, std::int64_t n, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  detail::softmax_backward_rows_kernel<<<static_cast<unsigned>(rows), detail::kBlock, 0, stream>>>(p, dp, n);
  detail::check_launch();
}

void embedding_forward(dtype t, const std::int64_t* ids, const void* table, void* out, std::int64_t n, std::int64_t h,
                       std::int64_t start, std::int64_t local_rows, cudaStream_t stream) {
  if (n <= 0 || h <= 0) return;
  detail::dispatch(t, "embedding_forward", [&](auto tag) {
    using T = decltype(tag);
    detail::embedding_forward_kernel<T><<<detail::grid_for(n * h), detail::kBlock, 0, stream>>>(
        ids, static_cast<const T*>(table), static_cast<T*>(out), n, h, start, local_rows);
  });
  detail::check_launch();
}

void embedding_backward(dtype t, const std::int64_t* ids, const void* dout, float* dtable, std::int64_t n,
                        std::int64_t h, std::int64_t start, std::int64_t local_rows, cudaStream_t stream) {
  if (n <= 0 || h <= 0) return;
  detail::dispatch(t, "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    detail::embedding_backward_kernel<T><<<detail::grid_for(n * h), detail::kBlock, 0, stream>>>(
        ids, static_cast<const T*>(dout), dtable, n, h, start, local_rows);
  });
  detail::check_launch();
}

void cross_entropy(dtype t, const void* logits, const std::int64_t* targets, float* loss, void* dlogits,
                   std::int64_t rows, std::int64_t v, cudaStream_t stream) {
  JITEMBED_CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(float), stream));
  if (rows <= 0 || v <= 0) return;
  detail::dispatch(t, "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    detail::cross_entropy_kernel<T><<<static_cast<unsigned>(rows), detail::kBlock, 0, stream>>>(
        static_cast<const T*>(logits), targets, loss, static_cast<T*>(dlogits), v, 1.0f / static_cast<float>(rows));
  });
  detail::check_launch();
}

}  // namespace jitembed::parallel::kernels
