// Host-callable entry points of tests/cuda/models_kernels.cu: the CUDA reference models and kernels of
// models/cuda/*.cuh, and their host replays (doctest code is compiled by the host compiler only).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/image_latent.hpp"
#include "jitembed/models/text_embed.hpp"
#include "jitembed/models/video_latent.hpp"

namespace jitembed::models::cuda_test {

// Host builds of the host/device helpers (no device needed).
void image_latent_replay(const tensor& rgb, float* out);  // rgb u8 [H, W, 3] -> out [4, H/8, W/8]
std::uint64_t xxh3_64_short(const std::uint8_t* p, std::uint32_t len, std::uint64_t seed);
// One item through the text kernels' host replay: tokens i32 [n] -> sequence [L, D], pooled [D] (f32).
void text_embed_replay(const text_embed& m, const tensor& tokens, std::vector<float>& sequence, std::vector<float>& pooled);

// The CUDA models: create() (errc::not_found without a device), metadata and run().
struct model_info {
  std::string name, version, preprocess_key;
  device dev;
};
result<model_info> image_info(const image_latent_options& o);
result<model_info> video_info(const video_latent_options& o);
result<model_info> text_info(const text_embed_options& o);
result<std::vector<named_tensors>> run_image(const image_latent_options& o, std::span<const tensor> batch);
result<std::vector<named_tensors>> run_video(const video_latent_options& o, std::span<const tensor> batch);
result<std::vector<named_tensors>> run_text(const text_embed_options& o, std::span<const tensor> batch);

// The launchers called on views as given (tests pass fake CUDA views that fail the argument checks, which
// run before anything touches the device). Returns the error code and message.
error_info call_image_latent_cuda(const tensor_view& rgb, const tensor_view& latent);
error_info call_video_latent_cuda(const tensor_view& frames, const tensor_view& latent, const tensor_view& scratch);

// image_latent_cuda on a device copy of rgb u8 [N, H, W, 3]; the latent comes back to the CPU in `out`.
tensor image_latent_on_device(const tensor& rgb, dtype out);

}  // namespace jitembed::models::cuda_test
