// The reference embedders' CUDA kernels and their host replays (models/cuda/kernels.cuh is the API: the
// launchers on device tensors). Needs nvcc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "jitembed/core/tensor.hpp"
#include "jitembed/cuda/check.hpp"
#include "jitembed/cuda/preprocess.cuh"
#include "jitembed/cuda/stream.hpp"
#include "jitembed/models/detail/kernels.hpp"

namespace jitembed::models::detail {

// f32 arithmetic that rounds each operation on its own, on host and device alike. nvcc contracts a * b + c
// into an FMA by default; the CPU reference does not (plain x86-64 has no FMA), so the device side uses the
// _rn intrinsics, which are never contracted. Same operations in the same order => bit-identical f32.
JITEMBED_HOST_DEVICE inline float f_add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
JITEMBED_HOST_DEVICE inline float f_sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
JITEMBED_HOST_DEVICE inline float f_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
JITEMBED_HOST_DEVICE inline float f_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
JITEMBED_HOST_DEVICE inline float f_sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// to_ycbcr() of kernels.hpp, operation for operation.
JITEMBED_HOST_DEVICE inline ycbcr to_ycbcr_rn(std::uint8_t r8, std::uint8_t g8, std::uint8_t b8) {
  const float r = r8, g = g8, b = b8;
  constexpr float s = 1.f / 128.f;
  return {f_mul(f_sub(f_add(f_add(f_mul(0.299f, r), f_mul(0.587f, g)), f_mul(0.114f, b)), 128.f), s),
          f_mul(f_add(f_sub(f_mul(-0.168736f, r), f_mul(0.331264f, g)), f_mul(0.5f, b)), s),
          f_mul(f_sub(f_sub(f_mul(0.5f, r), f_mul(0.418688f, g)), f_mul(0.081312f, b)), s)};
}

// --- image latent: one 8x8 block is computed by 8 cooperating threads (thread j = row j, then column j).
// The steps are host/device functions so the host can replay the exact device partition (tests compare
// that replay bit-for-bit with image_latent_into()). Scratch arrays are indexed [k * stride]: k in 0..63,
// stride 32 on the device (32 blocks per CUDA block, conflict-free shared memory), 1 on the host.
struct latent_scratch {
  float* y;   // Y values, then (after the column pass) the DCT coefficients F
  float* t;   // row-pass output
  float* cb;  // Cb values
  float* cr;  // Cr values
  int stride;
};

// Row j: RGB -> YCbCr of its 8 pixels (px = first byte of the row), then the 1-D DCT of the Y row.
JITEMBED_HOST_DEVICE inline void latent_row_step(const std::uint8_t* px, int j, const float* basis, latent_scratch s) {
  float yrow[8];
  for (int c = 0; c < 8; ++c) {
    const ycbcr v = to_ycbcr_rn(px[3 * c], px[3 * c + 1], px[3 * c + 2]);
    yrow[c] = v.y;
    s.y[(j * 8 + c) * s.stride] = v.y;
    s.cb[(j * 8 + c) * s.stride] = v.cb;
    s.cr[(j * 8 + c) * s.stride] = v.cr;
  }
  for (int u = 0; u < 8; ++u) {  // tmp[j][u] = sum_x c[u][x] y[j][x]
    float acc = 0.f;
    for (int x = 0; x < 8; ++x) acc = f_add(acc, f_mul(basis[u * 8 + x], yrow[x]));
    s.t[(j * 8 + u) * s.stride] = acc;
  }
}

// Column u (after every row step): F[v][u] = sum_y c[v][y] tmp[y][u], written over the Y array.
JITEMBED_HOST_DEVICE inline void latent_column_step(int u, const float* basis, latent_scratch s) {
  for (int v = 0; v < 8; ++v) {
    float acc = 0.f;
    for (int y = 0; y < 8; ++y) acc = f_add(acc, f_mul(basis[v * 8 + y], s.t[(y * 8 + u) * s.stride]));
    s.y[(v * 8 + u) * s.stride] = acc;
  }
}

// Output channel c (after every column step): 0 = DC / 8, 1 / 2 = Cb / Cr block sum / 8 / 8, 3 = AC energy.
JITEMBED_HOST_DEVICE inline float latent_channel(int c, latent_scratch s) {
  if (c == 0) return f_div(s.y[0], 8.f);
  if (c == 3) {
    float ac = 0.f;
    for (int i = 1; i < 64; ++i) ac = f_add(ac, f_mul(s.y[i * s.stride], s.y[i * s.stride]));
    return f_div(f_sqrt(ac), 8.f);
  }
  const float* p = c == 1 ? s.cb : s.cr;
  float sum = 0.f;
  for (int i = 0; i < 64; ++i) sum = f_add(sum, p[i * s.stride]);
  return f_div(f_div(sum, 8.f), 8.f);
}

// Host replay of the device partition (row steps, column steps, channels) for one [h, w, 3] image.
inline void image_latent_replay(const std::uint8_t* rgb, std::int64_t h, std::int64_t w, float* out) {
  const float* basis = dct8_basis().data();
  const std::int64_t bh = h / 8, bw = w / 8, plane = bh * bw;
  float y[64], t[64], cb[64], cr[64];
  const latent_scratch s{y, t, cb, cr, 1};
  for (std::int64_t by = 0; by < bh; ++by)
    for (std::int64_t bx = 0; bx < bw; ++bx) {
      for (int j = 0; j < 8; ++j) latent_row_step(rgb + ((by * 8 + j) * w + bx * 8) * 3, j, basis, s);
      for (int u = 0; u < 8; ++u) latent_column_step(u, basis, s);
      for (int c = 0; c < 4; ++c) out[c * plane + by * bw + bx] = latent_channel(c, s);
    }
}

struct dct_basis_param {
  float c[64];
};
inline dct_basis_param dct_basis_for_device() {
  dct_basis_param p{};
  std::copy(dct8_basis().begin(), dct8_basis().end(), p.c);
  return p;
}

inline constexpr int kLatentBlocksPerCta = 32;  // 8x8 blocks per CUDA block (blockDim = {32, 8})

// rgb: u8 [n_img, h, w, 3]; out: Out [n_img, 4, h/8, w/8]. blockDim {32, 8}: x = which 8x8 block, y = row.
template <class Out>
__global__ void __launch_bounds__(256) image_latent_kernel(const std::uint8_t* __restrict__ rgb, Out* __restrict__ out,
                                                           std::int64_t n_img, std::int64_t h, std::int64_t w,
                                                           dct_basis_param basis_param) {
  __shared__ float basis[64];
  __shared__ float ys[64 * kLatentBlocksPerCta], ts[64 * kLatentBlocksPerCta], cbs[64 * kLatentBlocksPerCta],
      crs[64 * kLatentBlocksPerCta];
  const int g = static_cast<int>(threadIdx.x), j = static_cast<int>(threadIdx.y);
  const int tid = j * kLatentBlocksPerCta + g;
  if (tid < 64) basis[tid] = basis_param.c[tid];
  __syncthreads();
  const std::int64_t bh = h / 8, bw = w / 8, plane = bh * bw, total = n_img * plane;
  const std::int64_t q = static_cast<std::int64_t>(blockIdx.x) * kLatentBlocksPerCta + g;
  const bool active = q < total;
  const latent_scratch s{ys + g, ts + g, cbs + g, crs + g, kLatentBlocksPerCta};
  std::int64_t img = 0, by = 0, bx = 0;
  if (active) {
    img = q / plane;
    const std::int64_t rem = q - img * plane;
    by = rem / bw;
    bx = rem - by * bw;
    latent_row_step(rgb + ((img * h + by * 8 + j) * w + bx * 8) * 3, j, basis, s);
  }
  __syncthreads();
  if (active) latent_column_step(j, basis, s);
  __syncthreads();
  if (active && j < 4) out[(img * 4 + j) * plane + by * bw + bx] = cuda::detail::from_float<Out>(latent_channel(j, s));
}

// Video: per-frame latents f32 [n, t, 4, bh, bw] -> Out [n, 4, t/4, bh, bw], each the sum of 4 frames in
// frame order times 0.25 (video_latent::run()).
template <class Out>
__global__ void temporal_pool_kernel(const float* __restrict__ frames, Out* __restrict__ out, std::int64_t n, std::int64_t t,
                                     std::int64_t plane) {
  const std::int64_t tp = t / 4, total = n * 4 * tp * plane;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t pix = i % plane;
    std::int64_t rest = i / plane;
    const std::int64_t gstep = rest % tp;
    rest /= tp;
    const std::int64_t c = rest % 4, item = rest / 4;
    float s = 0.f;
    for (int k = 0; k < 4; ++k) s = f_add(s, frames[((item * t + gstep * 4 + k) * 4 + c) * plane + pix]);
    out[i] = cuda::detail::from_float<Out>(f_mul(s, 0.25f));
  }
}

// --- text embed. XXH3-64 with a seed for inputs of 1..8 bytes (the n-gram sizes text-embed allows),
// following xxhash.h's XXH3_len_1to3_64b / XXH3_len_4to8_64b with the default secret.
JITEMBED_HOST_DEVICE inline std::uint64_t xxh3_64_short(const std::uint8_t* p, std::uint32_t len, std::uint64_t seed) {
  // Little-endian words of the default secret XXH3_kSecret at byte offsets 0, 4, 8, 16.
  constexpr std::uint32_t s0 = 0x396cfeb8u, s4 = 0xbe4ba423u;
  constexpr std::uint64_t s8 = 0x1cad21f72c81017cull, s16 = 0xdb979083e96dd4deull;
  if (len < 4) {
    const std::uint32_t combined = (static_cast<std::uint32_t>(p[0]) << 16) | (static_cast<std::uint32_t>(p[len >> 1]) << 24) |
                                   static_cast<std::uint32_t>(p[len - 1]) | (len << 8);
    std::uint64_t h = static_cast<std::uint64_t>(combined) ^ (static_cast<std::uint64_t>(s0 ^ s4) + seed);
    h ^= h >> 33;
    h *= 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    h *= 0x165667B19E3779F9ull;
    return h ^ (h >> 32);
  }
  auto le32 = [](const std::uint8_t* b) {
    return static_cast<std::uint32_t>(b[0]) | (static_cast<std::uint32_t>(b[1]) << 8) | (static_cast<std::uint32_t>(b[2]) << 16) |
           (static_cast<std::uint32_t>(b[3]) << 24);
  };
  const std::uint32_t lo = static_cast<std::uint32_t>(seed);
  const std::uint32_t swapped = (lo >> 24) | ((lo >> 8) & 0xff00u) | ((lo << 8) & 0xff0000u) | (lo << 24);
  seed ^= static_cast<std::uint64_t>(swapped) << 32;
  const std::uint64_t input64 = le32(p + len - 4) + (static_cast<std::uint64_t>(le32(p)) << 32);
  std::uint64_t h = input64 ^ ((s8 ^ s16) - seed);
  auto rotl = [](std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); };
  h ^= rotl(h, 49) ^ rotl(h, 24);
  h *= 0x9FB21C651E98DF25ull;
  h ^= (h >> 35) + len;
  h *= 0x9FB21C651E98DF25ull;
  return h ^ (h >> 28);
}

inline constexpr std::uint32_t kNoNgram = 0xffffffffu;

struct text_params {
  std::int64_t max_length, dim;
  int ngram_min, ngram_max, hash_buckets;
  std::uint64_t seed;
};

// The code of the n-gram of size g ending at position p (of an item of len tokens): row | sign << 31.
JITEMBED_HOST_DEVICE inline std::uint32_t text_ngram_code(const std::uint8_t* tok, std::int64_t p, std::int64_t len, int g,
                                                          const text_params& prm) {
  if (p >= len || g > p + 1) return kNoNgram;
  const std::uint64_t hv = xxh3_64_short(tok + p + 1 - g, static_cast<std::uint32_t>(g), prm.seed + static_cast<std::uint64_t>(g));
  return static_cast<std::uint32_t>(hv % static_cast<std::uint64_t>(prm.hash_buckets)) | (static_cast<std::uint32_t>(hv >> 63) << 31);
}

// sequence[p][d] from the codes of position p: (sum of sign * R[row][d]) / sqrt(count), as text_embed::run().
JITEMBED_HOST_DEVICE inline float text_position_value(const std::uint32_t* c, int ng, const float* table, std::int64_t dim,
                                                      std::int64_t d) {
  float acc = 0.f;
  int count = 0;
  for (int k = 0; k < ng; ++k) {
    if (c[k] == kNoNgram) break;
    const float sign = (c[k] >> 31) ? -1.f : 1.f;
    acc = f_add(acc, f_mul(sign, table[static_cast<std::int64_t>(c[k] & 0x7fffffffu) * dim + d]));
    ++count;
  }
  return count ? f_mul(acc, f_div(1.f, f_sqrt(static_cast<float>(count)))) : 0.f;  // no n-gram: zero, as on the CPU
}

// Host replay of the two text kernels for one item (tokens tok[0..len)): sequence [L, D], pooled [D] in f32.
inline void text_embed_replay(const std::uint8_t* tok, std::int64_t len, const float* table, const text_params& prm, float* sequence,
                              float* pooled) {
  const int ng = prm.ngram_max - prm.ngram_min + 1;
  std::vector<std::uint32_t> codes(static_cast<std::size_t>(prm.max_length * ng));
  for (std::int64_t p = 0; p < prm.max_length; ++p)
    for (int k = 0; k < ng; ++k) codes[static_cast<std::size_t>(p * ng + k)] = text_ngram_code(tok, p, len, prm.ngram_min + k, prm);
  for (std::int64_t d = 0; d < prm.dim; ++d) {
    float pool = 0.f;
    for (std::int64_t p = 0; p < prm.max_length; ++p) {
      float v = 0.f;
      if (p < len) {
        v = text_position_value(codes.data() + p * ng, ng, table, prm.dim, d);
        pool = f_add(pool, v);
      }
      sequence[p * prm.dim + d] = v;
    }
    pooled[d] = len > 0 ? f_div(pool, static_cast<float>(len)) : pool;
  }
}

// The n-grams ending at position p of one item: code = row | (sign bit << 31), kNoNgram for absent sizes.
// One thread per (item, position); also writes the mask.
template <class Code = std::uint32_t>
__global__ void text_hash_kernel(const std::uint8_t* __restrict__ tokens, const std::int32_t* __restrict__ lengths,
                                 Code* __restrict__ codes, std::uint8_t* __restrict__ mask, std::int64_t n, text_params prm) {
  const int ng = prm.ngram_max - prm.ngram_min + 1;
  const std::int64_t total = n * prm.max_length;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t item = i / prm.max_length, p = i % prm.max_length;
    const std::int64_t len = lengths[item];
    const std::uint8_t* tok = tokens + item * prm.max_length;
    mask[i] = p < len ? 1 : 0;
    for (int k = 0; k < ng; ++k) {
      const Code code = text_ngram_code(tok, p, len, prm.ngram_min + k, prm);
      codes[i * ng + k] = code;
    }
  }
}

// sequence [n, L, D], pooled [n, D]; grid {ceil(D / blockDim.x), n}: one thread per (item, d) walks the
// positions in order, as text_embed::run() does per row.
template <class Out>
__global__ void text_embed_kernel(const std::uint32_t* __restrict__ codes, const std::int32_t* __restrict__ lengths,
                                  const float* __restrict__ table, Out* __restrict__ sequence, Out* __restrict__ pooled,
                                  text_params prm) {
  const std::int64_t d = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t item = blockIdx.y;
  if (d >= prm.dim) return;
  const int ng = prm.ngram_max - prm.ngram_min + 1;
  const std::int64_t len = lengths[item];
  float pool = 0.f;
  for (std::int64_t p = 0; p < prm.max_length; ++p) {
    Out* dst = sequence + (item * prm.max_length + p) * prm.dim + d;
    if (p >= len) {
      *dst = cuda::detail::from_float<Out>(0.f);
      continue;
    }
    const float v = text_position_value(codes + (item * prm.max_length + p) * ng, ng, table, prm.dim, d);
    *dst = cuda::detail::from_float<Out>(v);
    pool = f_add(pool, v);
  }
  if (len > 0) pool = f_div(pool, static_cast<float>(len));
  pooled[item * prm.dim + d] = cuda::detail::from_float<Out>(pool);
}

inline int grid_for(std::int64_t total, int threads) {
  return static_cast<int>(std::clamp<std::int64_t>((total + threads - 1) / threads, 1, 65535 * 8));
}

inline void require_device(const tensor_view& t, const char* what) {
  if (t.device().is_cpu()) throw error(errc::invalid_argument, std::string(what) + " must be on a CUDA device");
  if (t.numel() && !t.is_contiguous()) throw error(errc::invalid_argument, std::string(what) + " must be contiguous");
}

template <class F>
void dispatch_output(dtype t, const char* what, F&& f) {
  switch (t) {
    case dtype::f32: f(static_cast<float*>(nullptr)); break;
    case dtype::f16: f(static_cast<__half*>(nullptr)); break;
    case dtype::bf16: f(static_cast<__nv_bfloat16*>(nullptr)); break;
    default: throw error(errc::dtype_mismatch, std::string(what) + " must be f32, f16 or bf16, not " + std::string(to_string(t)));
  }
}

inline void launch_image_latent(const std::uint8_t* rgb, void* out, dtype out_type, std::int64_t n_img, std::int64_t h,
                                std::int64_t w, cuda::stream_ref s) {
  const std::int64_t total = n_img * (h / 8) * (w / 8);
  if (total == 0) return;
  const std::int64_t ctas = (total + kLatentBlocksPerCta - 1) / kLatentBlocksPerCta;
  if (ctas > 0x7fffffff) throw error(errc::limit_exceeded, "image latent: " + std::to_string(total) + " 8x8 blocks in one launch");
  const dim3 block(kLatentBlocksPerCta, 8);
  const dct_basis_param basis = dct_basis_for_device();
  dispatch_output(out_type, "image latent output", [&](auto* tag) {
    using Out = std::remove_pointer_t<decltype(tag)>;
    image_latent_kernel<Out><<<static_cast<unsigned>(ctas), block, 0, s.get()>>>(rgb, static_cast<Out*>(out), n_img, h, w, basis);
  });
  JITEMBED_CUDA_CHECK(cudaGetLastError());
}

}  // namespace jitembed::models::detail
