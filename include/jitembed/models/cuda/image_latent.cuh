// cuda_image_latent: image-latent computed on a CUDA device. Same name, version, preprocessing and
// outputs as models::image_latent (f32 bit-identical by construction); include it from a .cu file.
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
#include "jitembed/models/image_latent.hpp"
#include "jitembed/models/model.hpp"

namespace jitembed::models {

// Models models::model. run() takes the CPU tensors preprocess() makes and returns CPU tensors; the batch
// goes through pinned staging to the device and back on a stream of its own, so calls from several threads
// overlap. `work` is not emulated (it never changes outputs). create() fails with errc::invalid_argument for
// bad options, errc::not_found when `device_ordinal` names no CUDA device.
class cuda_image_latent : public detail::cuda_model_base<image_latent> {
 public:
  static result<cuda_image_latent> create(const image_latent_options& opts = {}, int device_ordinal = 0) try {
    return cuda_image_latent(opts, device_ordinal);
  } catch (const error& e) {
    return fail(e.code(), e.message());
  }
 private:
  // Throws jitembed::error (the options, the device, CUDA): create() returns it.
  cuda_image_latent(const image_latent_options& opts, int device_ordinal)
      : cuda_model_base(opts, device_ordinal, std::size_t{256} << 20) {}

 public:
  result<std::vector<named_tensors>> run(std::span<const tensor> batch) const {
    JITEMBED_TRY(detail::check_batch(kName, batch, max_batch_size(), inputs()[0]));
    if (batch.empty()) return std::vector<named_tensors>{};
    return detail::run_catching(kName, [&]() -> result<std::vector<named_tensors>> {
      const auto n = static_cast<std::int64_t>(batch.size());
      const std::int64_t b = cpu_.options().bucket;
      const dtype out_type = cpu_.options().output_dtype;
      const shape item_out{4, b / 8, b / 8};
      detail::device_guard guard(ordinal_);
      tensor staged_in = pool_.acquire({n, b, b, 3}, dtype::u8);
      tensor staged_out = pool_.acquire({n, 4, b / 8, b / 8}, out_type);
      auto s = cuda::stream::create().value();
      detail::sync_on_exit wait(s);
      tensor d_in = cuda::empty_device(staged_in.shape(), dtype::u8, s, ordinal_);
      tensor d_out = cuda::empty_device(staged_out.shape(), out_type, s, ordinal_);
      detail::stage_items(batch, staged_in);
      cuda::copy_async(d_in, staged_in, s);
      image_latent_cuda(d_in, d_out, s);
      cuda::copy_async(staged_out, d_out, s);
      s.synchronize();
      std::vector<named_tensors> out(batch.size());
      for (std::size_t i = 0; i < batch.size(); ++i) out[i].emplace_back("latent", detail::item_of(staged_out, i, item_out));
      return out;
    });
  }

};

static_assert(model<cuda_image_latent>);

}  // namespace jitembed::models
