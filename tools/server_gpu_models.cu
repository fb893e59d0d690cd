// nvcc half of jitembed-server: builds the CUDA reference embedders (same settings as the CPU ones).
#include "jitembed/cuda/check.hpp"
#include "jitembed/models/cuda/image_latent.cuh"
#include "jitembed/models/cuda/text_embed.cuh"
#include "jitembed/models/cuda/video_latent.cuh"
#include "server_gpu_models.hpp"

namespace jitembed::tools {

result<models::any_model> make_gpu_reference_model(std::string_view name, const models::reference_options& o, int ordinal) {
  if (cuda::device_count() <= ordinal)
    return fail(errc::not_found, "no CUDA device " + std::to_string(ordinal));
  auto wrap = [](auto m) -> result<models::any_model> {
    if (!m) return m.error();
    return models::any_model(std::move(*m));
  };
  if (name == models::image_latent::kName) return wrap(models::cuda_image_latent::create(models::to_image_latent_options(o), ordinal));
  if (name == models::video_latent::kName) return wrap(models::cuda_video_latent::create(models::to_video_latent_options(o), ordinal));
  if (name == models::text_embed::kName) return wrap(models::cuda_text_embed::create(models::to_text_embed_options(o), ordinal));
  return fail(errc::not_found, "no CUDA implementation of '" + std::string(name) + "'");
}

}  // namespace jitembed::tools
