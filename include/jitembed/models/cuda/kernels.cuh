// CUDA kernels of the reference embedders (need nvcc) and their launchers on device tensors: image latent
// (8x8 block DCT), video latent (per frame + 4x temporal pooling), text embed (n-gram hashing + projection).
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
#include "jitembed/models/cuda/detail/kernels.cuh"

namespace jitembed::models {

// Image latent on the device: rgb u8 [N, H, W, 3] (H, W multiples of 8, already resized to the bucket)
// -> latent [N, 4, H/8, W/8] in latent's dtype (f32, f16 or bf16), both CUDA tensors, launched on `s`.
inline void image_latent_cuda(const tensor_view& rgb, const tensor_view& latent, cuda::stream_ref s) {
  detail::require_device(rgb, "image latent input");
  detail::require_device(latent, "image latent output");
  if (rgb.dtype() != dtype::u8) throw error(errc::dtype_mismatch, "image latent input must be u8, not " + std::string(to_string(rgb.dtype())));
  if (rgb.rank() != 4 || rgb.size(3) != 3 || rgb.size(1) % 8 || rgb.size(2) % 8)
    throw error(errc::invalid_argument, "image latent input " + rgb.shape().to_string() + " is not [N, H, W, 3] with H, W multiples of 8");
  const shape want{rgb.size(0), 4, rgb.size(1) / 8, rgb.size(2) / 8};
  if (!(latent.shape() == want))
    throw error(errc::invalid_argument, "image latent output " + latent.shape().to_string() + ", expected " + want.to_string());
  detail::launch_image_latent(static_cast<const std::uint8_t*>(rgb.data()), latent.data(), latent.dtype(), rgb.size(0), rgb.size(1),
                              rgb.size(2), s);
}

// Video latent on the device: frames u8 [N, T, H, W, 3] (T a multiple of 4) -> latent [N, 4, T/4, H/8, W/8].
// `scratch` is f32 [N, T, 4, H/8, W/8] device memory for the per-frame latents.
inline void video_latent_cuda(const tensor_view& frames, const tensor_view& latent, const tensor_view& scratch, cuda::stream_ref s) {
  detail::require_device(frames, "video latent input");
  detail::require_device(latent, "video latent output");
  detail::require_device(scratch, "video latent scratch");
  if (frames.dtype() != dtype::u8)
    throw error(errc::dtype_mismatch, "video latent input must be u8, not " + std::string(to_string(frames.dtype())));
  if (frames.rank() != 5 || frames.size(4) != 3 || frames.size(1) % 4 || frames.size(2) % 8 || frames.size(3) % 8)
    throw error(errc::invalid_argument,
                "video latent input " + frames.shape().to_string() + " is not [N, T, H, W, 3] with T a multiple of 4, H, W of 8");
  const std::int64_t n = frames.size(0), t = frames.size(1), bh = frames.size(2) / 8, bw = frames.size(3) / 8;
  const shape want{n, 4, t / 4, bh, bw}, want_scratch{n, t, 4, bh, bw};
  if (!(latent.shape() == want))
    throw error(errc::invalid_argument, "video latent output " + latent.shape().to_string() + ", expected " + want.to_string());
  if (scratch.dtype() != dtype::f32 || !(scratch.shape() == want_scratch))
    throw error(errc::invalid_argument, "video latent scratch must be f32 " + want_scratch.to_string());
  if (n * t * bh * bw == 0) return;
  detail::launch_image_latent(static_cast<const std::uint8_t*>(frames.data()), scratch.data(), dtype::f32, n * t, frames.size(2),
                              frames.size(3), s);
  const std::int64_t total = n * 4 * (t / 4) * bh * bw;
  detail::dispatch_output(latent.dtype(), "video latent output", [&](auto* tag) {
    using Out = std::remove_pointer_t<decltype(tag)>;
    detail::temporal_pool_kernel<Out><<<detail::grid_for(total, 256), 256, 0, s.get()>>>(
        static_cast<const float*>(scratch.data()), static_cast<Out*>(latent.data()), n, t, bh * bw);
  });
  JITEMBED_CUDA_CHECK(cudaGetLastError());
}

// What text_embed_cuda needs besides the tensors (text_embed_options' fields).
struct text_embed_cuda_params {
  int max_length = 128, dim = 768, ngram_min = 1, ngram_max = 3, hash_buckets = 4096;
  std::uint64_t seed = 0;
};

// Text embed on the device. tokens u8 [N, L] (byte tokens, zero padded), lengths i32 [N] (each in 0..L,
// checked by the caller), table f32 [hash_buckets, D] (text_embed's projection table), codes i32
// [N, L, ngram_max - ngram_min + 1] scratch (n-gram rows and signs, as bit patterns) -> sequence
// [N, L, D], mask u8 [N, L], pooled [N, D] (sequence and pooled of one dtype: f32, f16 or bf16).
inline void text_embed_cuda(const tensor_view& tokens, const tensor_view& lengths, const tensor_view& table,
                            const tensor_view& codes, const tensor_view& sequence, const tensor_view& mask,
                            const tensor_view& pooled, const text_embed_cuda_params& p, cuda::stream_ref s) {
  for (const auto& [t, what] : {std::pair{&tokens, "tokens"}, {&lengths, "lengths"}, {&table, "table"}, {&codes, "codes"},
                                {&sequence, "sequence"}, {&mask, "mask"}, {&pooled, "pooled"}})
    detail::require_device(*t, (std::string("text embed ") + what).c_str());
  if (p.ngram_min < 1 || p.ngram_max < p.ngram_min || p.ngram_max > 8)
    throw error(errc::invalid_argument, "text embed: ngram sizes " + std::to_string(p.ngram_min) + ".." + std::to_string(p.ngram_max));
  if (p.hash_buckets < 1 || p.hash_buckets > 65536 || p.dim < 1 || p.max_length < 1)
    throw error(errc::invalid_argument, "text embed: bad max_length / dim / hash_buckets");
  const std::int64_t n = tokens.rank() == 2 ? tokens.size(0) : -1, l = p.max_length, d = p.dim, ng = p.ngram_max - p.ngram_min + 1;
  auto expect = [](const tensor_view& t, dtype type, const shape& sh, const char* what) {
    if (t.dtype() != type || !(t.shape() == sh))
      throw error(errc::invalid_argument, std::string("text embed ") + what + " is " + std::string(to_string(t.dtype())) + " " +
                                              t.shape().to_string() + ", expected " + std::string(to_string(type)) + " " + sh.to_string());
  };
  if (n < 0) throw error(errc::invalid_argument, "text embed tokens must be [N, L]");
  expect(tokens, dtype::u8, {n, l}, "tokens");
  expect(lengths, dtype::i32, {n}, "lengths");
  expect(table, dtype::f32, {p.hash_buckets, d}, "table");
  expect(codes, dtype::i32, {n, l, ng}, "codes");
  expect(sequence, sequence.dtype(), {n, l, d}, "sequence");
  expect(mask, dtype::u8, {n, l}, "mask");
  expect(pooled, sequence.dtype(), {n, d}, "pooled");
  if (n == 0) return;
  if (n > 65535) throw error(errc::limit_exceeded, "text embed: " + std::to_string(n) + " items in one launch > 65535");
  const detail::text_params prm{l, d, p.ngram_min, p.ngram_max, p.hash_buckets, p.seed};
  detail::text_hash_kernel<<<detail::grid_for(n * l, 256), 256, 0, s.get()>>>(
      static_cast<const std::uint8_t*>(tokens.data()), static_cast<const std::int32_t*>(lengths.data()),
      static_cast<std::uint32_t*>(codes.data()), static_cast<std::uint8_t*>(mask.data()), n, prm);
  JITEMBED_CUDA_CHECK(cudaGetLastError());
  const int threads = 128;
  const dim3 grid(static_cast<unsigned>((d + threads - 1) / threads), static_cast<unsigned>(n));
  detail::dispatch_output(sequence.dtype(), "text embed sequence", [&](auto* tag) {
    using Out = std::remove_pointer_t<decltype(tag)>;
    detail::text_embed_kernel<Out><<<grid, threads, 0, s.get()>>>(
        static_cast<const std::uint32_t*>(codes.data()), static_cast<const std::int32_t*>(lengths.data()),
        static_cast<const float*>(table.data()), static_cast<Out*>(sequence.data()), static_cast<Out*>(pooled.data()), prm);
  });
  JITEMBED_CUDA_CHECK(cudaGetLastError());
}

}  // namespace jitembed::models
