// cuda_text_embed: text-embed computed on a CUDA device (n-gram hashing + projection, table resident on the
// device). Same name, version, preprocessing and outputs as models::text_embed; include it from a .cu file.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/cuda/buffer.hpp"
#include "jitembed/cuda/pinned_pool.hpp"
#include "jitembed/models/cuda/kernels.cuh"
#include "jitembed/models/cuda/staging.cuh"
#include "jitembed/models/model.hpp"
#include "jitembed/models/text_embed.hpp"

namespace jitembed::models {

// Models models::model; run() is CPU tensors in, CPU tensors out, as for cuda_image_latent. The projection
// table (hash_buckets x dim f32, 12 MiB by default) is copied to the device once, at construction.
class cuda_text_embed : public detail::cuda_model_base<text_embed> {
 public:
  static result<cuda_text_embed> create(const text_embed_options& opts = {}, int device_ordinal = 0) try {
    return cuda_text_embed(opts, device_ordinal);
  } catch (const error& e) {
    return fail(e.code(), e.message());
  }
 private:
  // Throws jitembed::error (the options, the device, CUDA): create() returns it.
  cuda_text_embed(const text_embed_options& opts, int device_ordinal)
      : cuda_model_base(opts, device_ordinal, std::size_t{256} << 20) {
    detail::device_guard guard(ordinal_);
    const std::size_t bytes = static_cast<std::size_t>(opts.hash_buckets) * static_cast<std::size_t>(opts.dim) * sizeof(float);
    void* p = nullptr;
    JITEMBED_CUDA_CHECK(cudaMalloc(&p, bytes));
    const int ordinal = ordinal_;
    table_ = std::shared_ptr<void>(p, [ordinal](void* q) {
      int prev = 0;
      if (cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(ordinal) == cudaSuccess) {
        (void)cudaFree(q);
        (void)cudaSetDevice(prev);
      }
      (void)cudaGetLastError();  // at process exit the runtime may already be gone
    });
    // The CPU model's table is one contiguous hash_buckets x dim array; row 0 starts it.
    JITEMBED_CUDA_CHECK(cudaMemcpy(p, cpu_.projection_row(0).data(), bytes, cudaMemcpyHostToDevice));
  }

 public:
  using cuda_model_base::preprocess;  // the bytes_view overload
  result<tensor> preprocess(std::string_view utf8, const decode_limits& limits = {}) const { return cpu_.preprocess(utf8, limits); }

  result<std::vector<named_tensors>> run(std::span<const tensor> batch) const {
    JITEMBED_TRY(detail::check_batch(kName, batch, max_batch_size(), inputs()[0]));
    const auto& o = cpu_.options();
    for (std::size_t i = 0; i < batch.size(); ++i) {  // the same checks, and messages, as text_embed::run()
      if (batch[i].size(0) > o.max_length)
        return fail(errc::invalid_argument, "text-embed: batch[" + std::to_string(i) + "] has " + std::to_string(batch[i].size(0)) +
                                                " tokens > max_length " + std::to_string(o.max_length));
      const auto* tok = batch[i].data<std::int32_t>();
      for (std::int64_t p = 0; p < batch[i].size(0); ++p)
        if (tok[p] < 0 || tok[p] > 255)
          return fail(errc::invalid_argument, "text-embed: batch[" + std::to_string(i) + "] token " + std::to_string(p) + " = " +
                                                  std::to_string(tok[p]) + " is not a byte");
    }
    if (batch.empty()) return std::vector<named_tensors>{};
    return detail::run_catching(kName, [&]() -> result<std::vector<named_tensors>> {
      const auto n = static_cast<std::int64_t>(batch.size());
      const std::int64_t l = o.max_length, d = o.dim, ng = o.ngram_max - o.ngram_min + 1;
      detail::device_guard guard(ordinal_);
      tensor staged_tok = pool_.acquire({n, l}, dtype::u8);
      tensor staged_len = pool_.acquire({n}, dtype::i32);
      tensor staged_seq = pool_.acquire({n, l, d}, o.output_dtype);
      tensor staged_mask = pool_.acquire({n, l}, dtype::u8);
      tensor staged_pooled = pool_.acquire({n, d}, o.output_dtype);
      std::memset(staged_tok.data(), 0, staged_tok.nbytes());
      for (std::int64_t i = 0; i < n; ++i) {
        const tensor& item = batch[static_cast<std::size_t>(i)];
        auto* dst = staged_tok.data<std::uint8_t>() + i * l;
        for (std::int64_t p = 0; p < item.size(0); ++p) dst[p] = static_cast<std::uint8_t>(item.data<std::int32_t>()[p]);
        staged_len.data<std::int32_t>()[i] = static_cast<std::int32_t>(item.size(0));
      }
      auto s = cuda::stream::create().value();
      detail::sync_on_exit wait(s);
      tensor d_tok = cuda::empty_device({n, l}, dtype::u8, s, ordinal_);
      tensor d_len = cuda::empty_device({n}, dtype::i32, s, ordinal_);
      tensor d_codes = cuda::empty_device({n, l, ng}, dtype::i32, s, ordinal_);
      tensor d_seq = cuda::empty_device({n, l, d}, o.output_dtype, s, ordinal_);
      tensor d_mask = cuda::empty_device({n, l}, dtype::u8, s, ordinal_);
      tensor d_pooled = cuda::empty_device({n, d}, o.output_dtype, s, ordinal_);
      const tensor_view table(table_.get(), dtype::f32, {o.hash_buckets, d}, device::cuda(ordinal_));
      cuda::copy_async(d_tok, staged_tok, s);
      cuda::copy_async(d_len, staged_len, s);
      text_embed_cuda(d_tok, d_len, table, d_codes, d_seq, d_mask, d_pooled,
                      {o.max_length, o.dim, o.ngram_min, o.ngram_max, o.hash_buckets, o.seed}, s);
      cuda::copy_async(staged_seq, d_seq, s);
      cuda::copy_async(staged_mask, d_mask, s);
      cuda::copy_async(staged_pooled, d_pooled, s);
      s.synchronize();
      std::vector<named_tensors> out(batch.size());
      for (std::size_t i = 0; i < batch.size(); ++i) {
        out[i].emplace_back("sequence", detail::item_of(staged_seq, i, {l, d}));
        out[i].emplace_back("mask", detail::item_of(staged_mask, i, {l}));
        out[i].emplace_back("pooled", detail::item_of(staged_pooled, i, {d}));
      }
      return out;
    });
  }

 private:
  std::shared_ptr<void> table_;  // device copy of the projection table
};

static_assert(model<cuda_text_embed>);

}  // namespace jitembed::models
