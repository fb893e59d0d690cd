// The reference embedders by name ("image-latent", "video-latent", "text-embed") with common settings:
// what the precompute tool and, later, the service registry instantiate.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "jitembed/models/any_model.hpp"
#include "jitembed/models/image_latent.hpp"
#include "jitembed/models/text_embed.hpp"
#include "jitembed/models/video_latent.hpp"

namespace jitembed::models {

inline constexpr std::array<std::string_view, 3> kReferenceModelNames = {image_latent::kName, video_latent::kName,
                                                                        text_embed::kName};

// Settings shared by the reference models; 0 / f32 keep each model's default.
struct reference_options {
  int work = 0;                     // extra matmuls per item
  int image_bucket = 0;             // image-latent bucket (default 256)
  int video_bucket = 0;             // video-latent bucket (default 256)
  int video_frames = 0;             // video-latent frames (default 16)
  int text_max_length = 0;          // text-embed L (default 128)
  int text_dim = 0;                 // text-embed D (default 768)
  dtype output_dtype = dtype::f32;
};

// The per-model options a reference_options stands for (shared by the CPU factory below and the CUDA
// factories in models/cuda/, so both read the same settings the same way).
inline image_latent_options to_image_latent_options(const reference_options& o) {
  image_latent_options io;
  io.work = o.work;
  io.output_dtype = o.output_dtype;
  if (o.image_bucket) io.bucket = o.image_bucket;
  return io;
}
inline video_latent_options to_video_latent_options(const reference_options& o) {
  video_latent_options vo;
  vo.work = o.work;
  vo.output_dtype = o.output_dtype;
  if (o.video_bucket) vo.bucket = o.video_bucket;
  if (o.video_frames) vo.frames = o.video_frames;
  return vo;
}
inline text_embed_options to_text_embed_options(const reference_options& o) {
  text_embed_options to;
  to.work = o.work;
  to.output_dtype = o.output_dtype;
  if (o.text_max_length) to.max_length = o.text_max_length;
  if (o.text_dim) to.dim = o.text_dim;
  return to;
}

// The reference models by name (kReferenceModelNames).
struct reference_model {
  // errc::not_found for an unknown name, errc::invalid_argument for bad settings.
  static result<any_model> create(std::string_view name, const reference_options& o = {});
};

inline result<any_model> reference_model::create(std::string_view name, const reference_options& o) {
  if (name == image_latent::kName) {
    JITEMBED_ASSIGN_OR_RETURN(auto m, image_latent::create(to_image_latent_options(o)));
    return any_model(std::move(m));
  }
  if (name == video_latent::kName) {
    JITEMBED_ASSIGN_OR_RETURN(auto m, video_latent::create(to_video_latent_options(o)));
    return any_model(std::move(m));
  }
  if (name == text_embed::kName) {
    JITEMBED_ASSIGN_OR_RETURN(auto m, text_embed::create(to_text_embed_options(o)));
    return any_model(std::move(m));
  }
  return fail(errc::not_found, "unknown model '" + std::string(name) + "' (image-latent, video-latent, text-embed)");
}

}  // namespace jitembed::models
