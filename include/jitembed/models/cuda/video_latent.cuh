// cuda_video_latent: video-latent computed on a CUDA device (per-frame latents + 4x temporal pooling).
// Same name, version, preprocessing and outputs as models::video_latent; include it from a .cu file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "jitembed/cuda/buffer.hpp"
#include "jitembed/cuda/pinned_pool.hpp"
#include "jitembed/models/cuda/kernels.cuh"
#include "jitembed/models/cuda/staging.cuh"
#include "jitembed/models/model.hpp"
#include "jitembed/models/video_latent.hpp"

namespace jitembed::models {

// Models models::model; run() is CPU tensors in, CPU tensors out, as for cuda_image_latent.
class cuda_video_latent : public detail::cuda_model_base<video_latent> {
 public:
  static result<cuda_video_latent> create(const video_latent_options& opts = {}, int device_ordinal = 0) try {
    return cuda_video_latent(opts, device_ordinal);
  } catch (const error& e) {
    return fail(e.code(), e.message());
  }
 private:
  // Throws jitembed::error (the options, the device, CUDA): create() returns it.
  cuda_video_latent(const video_latent_options& opts, int device_ordinal)
      : cuda_model_base(opts, device_ordinal, std::size_t{512} << 20) {}

 public:
  result<std::vector<named_tensors>> run(std::span<const tensor> batch) const {
    JITEMBED_TRY(detail::check_batch(kName, batch, max_batch_size(), inputs()[0]));
    if (batch.empty()) return std::vector<named_tensors>{};
    return detail::run_catching(kName, [&]() -> result<std::vector<named_tensors>> {
      const auto n = static_cast<std::int64_t>(batch.size());
      const std::int64_t t = cpu_.options().frames, b = cpu_.options().bucket;
      const dtype out_type = cpu_.options().output_dtype;
      const shape item_out{4, t / video_latent::kTemporalPool, b / 8, b / 8};
      detail::device_guard guard(ordinal_);
      tensor staged_in = pool_.acquire({n, t, b, b, 3}, dtype::u8);
      tensor staged_out = pool_.acquire({n, 4, t / video_latent::kTemporalPool, b / 8, b / 8}, out_type);
      auto s = cuda::stream::create().value();
      detail::sync_on_exit wait(s);
      tensor d_in = cuda::empty_device(staged_in.shape(), dtype::u8, s, ordinal_);
      tensor d_scratch = cuda::empty_device({n, t, 4, b / 8, b / 8}, dtype::f32, s, ordinal_);
      tensor d_out = cuda::empty_device(staged_out.shape(), out_type, s, ordinal_);
      detail::stage_items(batch, staged_in);
      cuda::copy_async(d_in, staged_in, s);
      video_latent_cuda(d_in, d_out, d_scratch, s);
      cuda::copy_async(staged_out, d_out, s);
      s.synchronize();
      std::vector<named_tensors> out(batch.size());
      for (std::size_t i = 0; i < batch.size(); ++i) out[i].emplace_back("latent", detail::item_of(staged_out, i, item_out));
      return out;
    });
  }

};

static_assert(model<cuda_video_latent>);

}  // namespace jitembed::models
