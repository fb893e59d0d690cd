// image-latent: a deterministic, not learned reference image encoder shaped like a VAE: JPEG -> RGB at a
// square bucket -> [4, H/8, W/8] from an 8x8 block DCT of YCbCr (see docs/models.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/codec/jpeg.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/preprocess_params.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/detail/kernels.hpp"
#include "jitembed/models/model.hpp"

namespace jitembed::models {

struct image_latent_options {
  int bucket = 256;                  // images are resized to bucket x bucket; a multiple of 8 in [8, 8192]
  dtype output_dtype = dtype::f32;   // f32, bf16 or f16
  int work = 0;                      // extra work_dim x work_dim matmuls per item (benchmarks); 0..1000
  int work_dim = 256;                // 1..4096
  std::size_t max_batch_size = 64;   // >= 1
};

namespace detail {

inline constexpr std::string_view kImageLatentRevision = "1";

// The latent of one [h, w, 3] u8 RGB image (h, w multiples of 8) into out[4][h/8][w/8]:
//   0: DC of Y / 8 (the block mean of Y), 1: the same for Cb, 2: for Cr (Cb and Cr DCs computed by their
//   definition, the block sum / 8), 3: sqrt(sum of the 63 squared AC coefficients of Y) / 8 (the RMS
//   deviation of Y in the block, by Parseval). Y, Cb, Cr are centred and scaled to about [-1, 1].
inline void image_latent_into(const std::uint8_t* rgb, std::int64_t h, std::int64_t w, float* out) noexcept {
  const std::int64_t bh = h / 8, bw = w / 8, plane = bh * bw;
  float y[64], f[64];
  for (std::int64_t by = 0; by < bh; ++by) {
    for (std::int64_t bx = 0; bx < bw; ++bx) {
      float cb_sum = 0.f, cr_sum = 0.f;
      for (int r = 0; r < 8; ++r) {
        const std::uint8_t* px = rgb + ((by * 8 + r) * w + bx * 8) * 3;
        for (int c = 0; c < 8; ++c, px += 3) {
          const ycbcr v = to_ycbcr(px[0], px[1], px[2]);
          y[r * 8 + c] = v.y;
          cb_sum += v.cb;
          cr_sum += v.cr;
        }
      }
      dct8x8(y, f);
      float ac = 0.f;
      for (int i = 1; i < 64; ++i) ac += f[i] * f[i];
      const std::int64_t o = by * bw + bx;
      out[o] = f[0] / 8.f;
      out[plane + o] = cb_sum / 8.f / 8.f;
      out[2 * plane + o] = cr_sum / 8.f / 8.f;
      out[3 * plane + o] = std::sqrt(ac) / 8.f;
    }
  }
}

}  // namespace detail

// Models models::model. create() checks the options (errc::invalid_argument); the default constructor uses
// the defaults, which are valid.
class image_latent {
 public:
  image_latent() : image_latent(image_latent_options{}) {}
  static result<image_latent> create(const image_latent_options& opts = {}) {
    if (opts.bucket < 8 || opts.bucket > 8192 || opts.bucket % 8 != 0)
      return fail(errc::invalid_argument, "image-latent: bucket " + std::to_string(opts.bucket) + " is not a multiple of 8 in [8, 8192]");
    JITEMBED_TRY(detail::check_output_dtype("image-latent", opts.output_dtype));
    JITEMBED_TRY(detail::check_work("image-latent", opts.work, opts.work_dim));
    if (opts.max_batch_size < 1) return fail(errc::invalid_argument, "image-latent: max_batch_size 0");
    return image_latent(opts);
  }

  static constexpr std::string_view kName = "image-latent";
  std::string_view name() const noexcept { return kName; }
  std::string_view version() const noexcept { return version_; }
  std::string_view preprocess_key() const noexcept { return preprocess_key_; }
  modality input_modality() const noexcept { return modality::image; }
  std::span<const tensor_meta> inputs() const noexcept { return inputs_; }
  std::span<const tensor_meta> outputs() const noexcept { return outputs_; }
  std::size_t max_batch_size() const noexcept { return opts_.max_batch_size; }
  jitembed::device device() const noexcept { return device::cpu(); }
  const image_latent_options& options() const noexcept { return opts_; }

  // JPEG bytes -> [bucket, bucket, 3] u8 RGB (the whole image stretched to the square bucket).
  result<tensor> preprocess(bytes_view jpeg, const decode_limits& limits) const {
    codec::jpeg_decode_options o;
    o.target_width = o.target_height = opts_.bucket;
    auto t = codec::decode_jpeg(jpeg, o, limits);
    if (!t) return fail(t.code(), "image-latent: " + t.error().message);
    return t;
  }

  result<std::vector<named_tensors>> run(std::span<const tensor> batch) const {
    JITEMBED_TRY(detail::check_batch(kName, batch, opts_.max_batch_size, inputs_[0]));
    std::vector<named_tensors> out;
    out.reserve(batch.size());
    const std::int64_t b = opts_.bucket;
    std::vector<float> lat(static_cast<std::size_t>(4 * (b / 8) * (b / 8)));
    for (const tensor& item : batch) {
      detail::image_latent_into(item.data<std::uint8_t>(), b, b, lat.data());
      detail::sink(detail::run_work(opts_.work, opts_.work_dim, lat, 0x696d616765ull));
      named_tensors nt;
      nt.emplace_back("latent", detail::to_output(lat, opts_.output_dtype, {4, b / 8, b / 8}));
      out.push_back(std::move(nt));
    }
    return out;
  }

 private:
  // The options are checked (create()).
  explicit image_latent(const image_latent_options& opts) : opts_(opts) {
    const std::int64_t b = opts.bucket;
    inputs_ = {{"image", dtype::u8, {b, b, 3}}};
    outputs_ = {{"latent", opts.output_dtype, {4, b / 8, b / 8}}};
    version_ = preprocess_params{}
                   .set("revision", detail::kImageLatentRevision)
                   .set("dtype", to_string(opts.output_dtype))
                   .str();
    preprocess_key_ = preprocess_params{}
                          .set("bucket", opts.bucket)
                          .set("decode", "turbojpeg-rgb-strict")
                          .set("resize", "dct-pow2+bilinear-aa-stretch")
                          .str();
  }
  image_latent_options opts_;
  std::vector<tensor_meta> inputs_, outputs_;
  std::string version_, preprocess_key_;
};

static_assert(model<image_latent>);

}  // namespace jitembed::models
