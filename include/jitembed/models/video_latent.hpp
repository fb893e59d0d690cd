// video-latent: a deterministic, not learned reference video encoder: T frames at a square bucket ->
// the image-latent of each frame, averaged over groups of 4 frames -> [4, T/4, H/8, W/8].
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/codec/video_decode.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/preprocess_params.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/detail/kernels.hpp"
#include "jitembed/models/image_latent.hpp"
#include "jitembed/models/model.hpp"

namespace jitembed::models {

struct video_latent_options {
  int frames = 16;                   // T: frames sampled uniformly over the clip; a multiple of 4 in [4, 1024]
  int bucket = 256;                  // frames are resized to bucket x bucket; a multiple of 8 in [8, 4096]
  dtype output_dtype = dtype::f32;   // f32, bf16 or f16
  int work = 0;                      // extra work_dim x work_dim matmuls per item; 0..1000
  int work_dim = 256;
  std::size_t max_batch_size = 8;
};

namespace detail {
inline constexpr std::string_view kVideoLatentRevision = "1";
}

// Models models::model. create() checks the options (errc::invalid_argument); the default constructor uses
// the defaults, which are valid.
class video_latent {
 public:
  static constexpr int kTemporalPool = 4;

  video_latent() : video_latent(video_latent_options{}) {}
  static result<video_latent> create(const video_latent_options& opts = {}) {
    if (opts.frames < kTemporalPool || opts.frames > 1024 || opts.frames % kTemporalPool != 0)
      return fail(errc::invalid_argument, "video-latent: frames " + std::to_string(opts.frames) + " is not a multiple of 4 in [4, 1024]");
    if (opts.bucket < 8 || opts.bucket > 4096 || opts.bucket % 8 != 0)
      return fail(errc::invalid_argument, "video-latent: bucket " + std::to_string(opts.bucket) + " is not a multiple of 8 in [8, 4096]");
    JITEMBED_TRY(detail::check_output_dtype("video-latent", opts.output_dtype));
    JITEMBED_TRY(detail::check_work("video-latent", opts.work, opts.work_dim));
    if (opts.max_batch_size < 1) return fail(errc::invalid_argument, "video-latent: max_batch_size 0");
    return video_latent(opts);
  }

  static constexpr std::string_view kName = "video-latent";
  std::string_view name() const noexcept { return kName; }
  std::string_view version() const noexcept { return version_; }
  std::string_view preprocess_key() const noexcept { return preprocess_key_; }
  modality input_modality() const noexcept { return modality::video; }
  std::span<const tensor_meta> inputs() const noexcept { return inputs_; }
  std::span<const tensor_meta> outputs() const noexcept { return outputs_; }
  std::size_t max_batch_size() const noexcept { return opts_.max_batch_size; }
  jitembed::device device() const noexcept { return device::cpu(); }
  const video_latent_options& options() const noexcept { return opts_; }

  // Container bytes (MP4 / WebM / MKV) -> [frames, bucket, bucket, 3] u8 RGB, frames chosen uniformly
  // over the whole clip (codec::decode_video; a short clip repeats frames).
  result<tensor> preprocess(bytes_view video, const decode_limits& limits) const {
    codec::video_decode_options o;
    o.num_frames = opts_.frames;
    o.width = o.height = opts_.bucket;
    o.threads = 1;  // callers parallelise over items
    auto t = codec::decode_video(video, o, limits);
    if (!t) return fail(t.code(), "video-latent: " + t.error().message);
    return t;
  }

  result<std::vector<named_tensors>> run(std::span<const tensor> batch) const {
    JITEMBED_TRY(detail::check_batch(kName, batch, opts_.max_batch_size, inputs_[0]));
    const std::int64_t t = opts_.frames, b = opts_.bucket, tp = t / kTemporalPool;
    const std::size_t frame_latent = static_cast<std::size_t>(4 * (b / 8) * (b / 8));
    const std::size_t plane = frame_latent / 4;  // (b/8)^2
    const std::size_t frame_bytes = static_cast<std::size_t>(b * b * 3);
    std::vector<float> per_frame(frame_latent * kTemporalPool), lat(frame_latent * static_cast<std::size_t>(tp));
    std::vector<named_tensors> out;
    out.reserve(batch.size());
    for (const tensor& item : batch) {
      const auto* rgb = item.data<std::uint8_t>();
      for (std::int64_t g = 0; g < tp; ++g) {
        for (int j = 0; j < kTemporalPool; ++j)
          detail::image_latent_into(rgb + static_cast<std::size_t>(g * kTemporalPool + j) * frame_bytes, b, b,
                                    per_frame.data() + static_cast<std::size_t>(j) * frame_latent);
        // lat[c][g][.] = mean of the 4 frames' channel c, summed in frame order.
        for (std::size_t c = 0; c < 4; ++c) {
          float* dst = lat.data() + (c * static_cast<std::size_t>(tp) + static_cast<std::size_t>(g)) * plane;
          for (std::size_t i = 0; i < plane; ++i) {
            float s = 0.f;
            for (int j = 0; j < kTemporalPool; ++j) s += per_frame[static_cast<std::size_t>(j) * frame_latent + c * plane + i];
            dst[i] = s * 0.25f;
          }
        }
      }
      detail::sink(detail::run_work(opts_.work, opts_.work_dim, lat, 0x766964656full));
      named_tensors nt;
      nt.emplace_back("latent", detail::to_output(lat, opts_.output_dtype, {4, tp, b / 8, b / 8}));
      out.push_back(std::move(nt));
    }
    return out;
  }

 private:
  // The options are checked (create()).
  explicit video_latent(const video_latent_options& opts) : opts_(opts) {
    const std::int64_t t = opts.frames, b = opts.bucket;
    inputs_ = {{"frames", dtype::u8, {t, b, b, 3}}};
    outputs_ = {{"latent", opts.output_dtype, {4, t / kTemporalPool, b / 8, b / 8}}};
    version_ = preprocess_params{}
                   .set("revision", detail::kVideoLatentRevision)
                   .set("image_revision", detail::kImageLatentRevision)
                   .set("temporal_pool", kTemporalPool)
                   .set("dtype", to_string(opts.output_dtype))
                   .str();
    preprocess_key_ = preprocess_params{}
                          .set("bucket", opts.bucket)
                          .set("frames", opts.frames)
                          .set("select", "uniform")
                          .set("resize", "swscale-bicubic-stretch")
                          .str();
  }
  video_latent_options opts_;
  std::vector<tensor_meta> inputs_, outputs_;
  std::string version_, preprocess_key_;
};

static_assert(model<video_latent>);

}  // namespace jitembed::models
