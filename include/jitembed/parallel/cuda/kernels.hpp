// The CUDA kernels of cuda_backend, declared for host code compiled by any C++ compiler. They are defined in
// parallel/cuda/kernels.cuh: include that file in exactly ONE .cu translation unit of the program (it
// holds non-inline definitions, so nvcc compiles the kernels once and g++ code links them).
// Every launcher enqueues on `stream` and returns at once; `t` is the element type of the activations
// (dtype::f32 or dtype::bf16, arithmetic in f32); float* arguments are f32 whatever `t` is. A launch error
// throws jitembed::error (JITEMBED_CUDA_CHECK of cudaGetLastError).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "jitembed/core/dtype.hpp"

namespace jitembed::parallel::kernels {

// y = gelu(x), n elements (y may be x).
void gelu_forward(dtype t, const void* x, void* y, std::int64_t n, cudaStream_t stream);
// dx = dy · gelu'(x) (dx may be dy).
void gelu_backward(dtype t, const void* x, const void* dy, void* dx, std::int64_t n, cudaStream_t stream);
// y[i, j] += b[j] for rows × cols (b of type t).
void add_bias_rows(dtype t, void* y, const void* b, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
// db[j] += Σ_i dy[i, j] (db f32).
void bias_grad(dtype t, const void* dy, float* db, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
// y = x converted between f32 and bf16 (round to nearest even), n elements.
void cast(dtype from, const void* x, dtype to, void* y, std::int64_t n, cudaStream_t stream);
// y = a + b elementwise, n elements of t (y may be a).
void add(dtype t, const void* a, const void* b, void* y, std::int64_t n, cudaStream_t stream);

// LayerNorm over rows × h (gamma, beta of type t; mean, rstd f32 [rows]); y may be x.
void layer_norm_forward(dtype t, const void* x, const void* gamma, const void* beta, float eps, void* y, float* mean,
                        float* rstd, std::int64_t rows, std::int64_t h, cudaStream_t stream);
// dx (overwritten); dgamma += Σ dy·x̂, dbeta += Σ dy (f32, either may be null).
void layer_norm_backward(dtype t, const void* x, const void* gamma, const float* mean, const float* rstd, const void* dy,
                         void* dx, float* dgamma, float* dbeta, std::int64_t rows, std::int64_t h, cudaStream_t stream);

// In-place softmax of f32 scores [batches, sq, sk] along sk; causal: key j visible to query i iff j ≤ i.
void softmax_rows(float* p, std::int64_t batches, std::int64_t sq, std::int64_t sk, bool causal, cudaStream_t stream);
// ds = p ⊙ (dp − rowsum(dp ⊙ p)) in place of dp (f32 [rows, n]).
void softmax_backward_rows(const float* p, float* dp, std::int64_t rows, std::int64_t n, cudaStream_t stream);

// out[i, :] = table[ids[i] − start, :] when start ≤ ids[i] < start + local_rows, else 0 (a vocab shard);
// table [local_rows, h] of type t, out [n, h] of type t.
void embedding_forward(dtype t, const std::int64_t* ids, const void* table, void* out, std::int64_t n, std::int64_t h,
                       std::int64_t start, std::int64_t local_rows, cudaStream_t stream);
// dtable[ids[i] − start, :] += dout[i, :] for ids in the shard (f32 dtable, atomic adds: repeated ids add up).
void embedding_backward(dtype t, const std::int64_t* ids, const void* dout, float* dtable, std::int64_t n,
                        std::int64_t h, std::int64_t start, std::int64_t local_rows, cudaStream_t stream);

// Mean cross-entropy over rows × v logits with i64 targets: *loss = mean(lse − x[target]) (f32, one
// value, overwritten), dlogits (of type t, may be null, may be logits) = (softmax − onehot) / rows.
void cross_entropy(dtype t, const void* logits, const std::int64_t* targets, float* loss, void* dlogits,
                   std::int64_t rows, std::int64_t v, cudaStream_t stream);

}  // namespace jitembed::parallel::kernels
