// The preprocessing a real encoder's input needs, from a model repository config's `parameters`, without
// LibTorch: JPEG -> [3, H, W] f32 (resize as torchvision's PIL pipeline: Pillow's antialiased bilinear,
// shorter side + centre crop or stretch, then ToTensor + Normalize), video -> [3, T, H, W] f32 (T frames at
// a stride, each frame as an image), and the settings of the T5-style tokenization (models/tokenizer.hpp
// runs it). preprocess_spec::key() names every setting (part of every cache key). Component models_video.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "jitembed/codec/jpeg.hpp"
#include "jitembed/codec/video_decode.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/preprocess_params.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/detail/param_parse.hpp"
#include "jitembed/models/detail/pil_resample.hpp"
#include "jitembed/models/model.hpp"

namespace jitembed::models {

// image_resize: stretch (to H x W, aspect ratio not kept) or shorter_side_crop (the shorter side to
// max(H, W), the longer one to int(size * long / short) as torchvision's Resize(int), then a centre crop
// to H x W with torchvision's CenterCrop offsets, round((in - out) / 2) half to even).
enum class image_resize_mode : std::uint8_t { stretch, shorter_side_crop };
// image_normalize: unit ([0, 1], ToTensor), signed ([-1, 1], Normalize(0.5, 0.5)), mean_std (Normalize(mean, std)).
enum class image_normalize_mode : std::uint8_t { unit, signed_range, mean_std };
// image_decode (JPEG images): exact (default; decoded at native size, as torchvision's PIL pipeline) or draft
// (Pillow's Image.draft before the resize: TurboJPEG decodes at the largest DCT scale 1/8, 1/4, 1/2 that keeps
// the image at least as large as the resize target, then the same resize: ~3x less decoding for a photo
// much larger than the model's input, results a few u8 levels from exact; docs/models.md has the figures).
enum class image_decode_mode : std::uint8_t { exact, draft };

inline constexpr std::array<float, 3> kImagenetMean{0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImagenetStd{0.229f, 0.224f, 0.225f};

struct image_preprocess {
  std::int64_t height = 256, width = 256;  // the output [3, height, width]
  image_resize_mode resize = image_resize_mode::stretch;
  image_normalize_mode normalize = image_normalize_mode::unit;
  std::array<float, 3> mean = kImagenetMean, stdev = kImagenetStd;  // mean_std only
  image_decode_mode decode = image_decode_mode::exact;               // JPEG images only (not video frames)
};

struct video_preprocess {
  std::int64_t frames = 8;  // T
  int frame_stride = 1;     // frames 0, s, 2s, ... (the last frame repeats when the clip is shorter)
};

// A caption -> i64 [2, L] (ids, attention mask) or [L] (ids; tokenizer_json only), padded to max_length, by a
// Hugging Face tokenizer.json (models/hf_tokenizer.hpp: truncation leaves room for the post-processor's special
// tokens) or T5's rules on SentencePiece (models/tokenizer.hpp: ids cut to L - 1, EOS appended).
struct text_preprocess {
  std::filesystem::path sentencepiece_model;  // absolute (resolved against the model directory)
  std::filesystem::path tokenizer_json;       // absolute; exactly one of the two is set
  std::int64_t max_length = 32;
  bool truncation = true;   // false: a longer caption is invalid_argument
  bool append_eos = true;   // sentencepiece_model only
  bool add_special_tokens = true;     // tokenizer_json only
  std::optional<std::int64_t> pad_id;  // tokenizer_json only; unset: the file's padding pad_id, else 0
  bool with_mask = true;    // false: the input is ids only, [L]
};

// Every parameter parse() reads (the backends refuse others).
inline constexpr std::string_view kPreprocessParameters[] = {
    "modality", "image_resize", "image_normalize", "image_mean", "image_std", "image_decode", "video_frames", "video_frame_stride",
    "sentencepiece_model", "tokenizer", "text_max_length", "text_padding", "text_truncation", "text_append_eos", "text_pad_id",
    "text_add_special_tokens"};

namespace detail {

// Per channel and byte value: (v / 255 - mean) / std in f32, the operations torchvision's ToTensor +
// Normalize run, in their order.
inline std::array<std::array<float, 256>, 3> normalize_table(const image_preprocess& p) {
  std::array<std::array<float, 256>, 3> t{};
  for (std::size_t c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) {
      const float x = static_cast<float>(v) / 255.0f;
      switch (p.normalize) {
        case image_normalize_mode::unit: t[c][static_cast<std::size_t>(v)] = x; break;
        case image_normalize_mode::signed_range: t[c][static_cast<std::size_t>(v)] = (x - 0.5f) / 0.5f; break;
        case image_normalize_mode::mean_std: t[c][static_cast<std::size_t>(v)] = (x - p.mean[c]) / p.stdev[c]; break;
      }
    }
  return t;
}

// The size a w x h image is resized to before the crop: H x W (stretch), or the shorter side to max(H, W).
inline result<std::pair<int, int>> resized_size(int w, int h, const image_preprocess& p, const decode_limits& limits) {
  const auto H = static_cast<int>(p.height), W = static_cast<int>(p.width);
  int rw = W, rh = H;
  if (p.resize == image_resize_mode::shorter_side_crop) {
    const std::int64_t size = std::max(p.height, p.width);
    const int shorter = std::min(w, h), longer = std::max(w, h);
    const double l = static_cast<double>(size) * longer / shorter;  // torchvision: int(size * long / short)
    if (!(l < 1e9)) return fail(errc::limit_exceeded, "image: resized side " + std::to_string(l) + " too large");
    const auto new_long = static_cast<std::int64_t>(l);
    rw = static_cast<int>(w <= h ? size : new_long);
    rh = static_cast<int>(w <= h ? new_long : size);
    if (static_cast<std::uint64_t>(rw) * static_cast<std::uint64_t>(rh) > limits.max_image_pixels)
      return fail(errc::limit_exceeded, "image: " + std::to_string(w) + "x" + std::to_string(h) + " resized to " + std::to_string(rw) +
                                            "x" + std::to_string(rh) + " > max_image_pixels " + std::to_string(limits.max_image_pixels));
  }
  return std::pair{rw, rh};
}

// One RGB u8 image (rows `pitch` bytes apart) -> planes dst[c * plane_stride + y * W + x].
inline result<void> transform_rgb_into(const std::uint8_t* src, int w, int h, std::ptrdiff_t pitch, const image_preprocess& p,
                                       const decode_limits& limits, float* dst, std::size_t plane_stride) {
  const auto H = static_cast<int>(p.height), W = static_cast<int>(p.width);
  JITEMBED_ASSIGN_OR_RETURN(const auto size, resized_size(w, h, p, limits));
  const auto [rw, rh] = size;  // the resized image, before the crop
  std::vector<std::uint8_t> resized;
  const std::uint8_t* img = src;
  std::ptrdiff_t img_pitch = pitch;
  if (rw != w || rh != h) {
    resized = pil_resize_bilinear(src, w, h, pitch, 3, rw, rh);
    img = resized.data();
    img_pitch = static_cast<std::ptrdiff_t>(rw) * 3;
  }
  const int top = static_cast<int>(std::nearbyint((rh - H) / 2.0));  // half to even, as Python's round
  const int left = static_cast<int>(std::nearbyint((rw - W) / 2.0));
  const auto table = normalize_table(p);
  for (int y = 0; y < H; ++y) {
    const std::uint8_t* row = img + static_cast<std::ptrdiff_t>(y + top) * img_pitch + static_cast<std::ptrdiff_t>(left) * 3;
    for (std::size_t c = 0; c < 3; ++c) {
      float* d = dst + c * plane_stride + static_cast<std::size_t>(y) * static_cast<std::size_t>(W);
      for (int x = 0; x < W; ++x) d[x] = table[c][row[static_cast<std::size_t>(x) * 3 + c]];
    }
  }
  return {};
}

}  // namespace detail

// An RGB u8 [h, w, 3] CPU image (rows may be padded) -> a new [3, H, W] f32 tensor.
inline result<tensor> transform_image(const tensor_view& rgb, const image_preprocess& p, const decode_limits& limits = {}) {
  if (!rgb.device().is_cpu() || rgb.dtype() != dtype::u8 || rgb.rank() != 3 || rgb.shape()[2] != 3 || rgb.shape()[0] < 1 ||
      rgb.shape()[1] < 1 || rgb.strides()[2] != 1 || rgb.strides()[1] != 3)
    return fail(errc::invalid_argument, "image: transform_image takes an interleaved RGB u8 [H, W, 3] CPU image, got " +
                                            std::string(to_string(rgb.dtype())) + rgb.shape().to_string());
  if (p.height < 1 || p.width < 1 || p.height > 65535 || p.width > 65535)
    return fail(errc::invalid_argument, "image: output " + std::to_string(p.height) + "x" + std::to_string(p.width) + " out of range");
  tensor out = tensor::empty(shape{3, p.height, p.width}, dtype::f32);
  JITEMBED_TRY(detail::transform_rgb_into(rgb.data<std::uint8_t>(), static_cast<int>(rgb.shape()[1]), static_cast<int>(rgb.shape()[0]),
                                          rgb.strides()[0], p, limits, out.data<float>(),
                                          static_cast<std::size_t>(p.height * p.width)));
  return out;
}

// Untrusted JPEG bytes -> [3, H, W] f32: decoded as RGB (grayscale replicated, as Pillow's convert("RGB")),
// strict, at native size (exact) or at Pillow's draft scale (draft), then transform_image. Errors:
// decode_jpeg's, limit_exceeded.
inline result<tensor> preprocess_image(bytes_view jpeg, const image_preprocess& p, const decode_limits& limits) {
  codec::jpeg_decode_options o;
  o.format = codec::pixel_format::rgb;
  o.dct_scaling = codec::jpeg_dct_scaling::off;
  if (p.decode == image_decode_mode::draft) {
    // Pillow's JpegImageFile.draft: scale = min(w // rw, h // rh), the largest of 8, 4, 2, 1 not above it;
    // TurboJPEG's scaled size is ceil(w / scale) as libjpeg's, so asking for it picks exactly that scale.
    JITEMBED_ASSIGN_OR_RETURN(const auto info, codec::probe_jpeg(jpeg));
    if (info.width < 1 || info.height < 1) return fail(errc::decode_failed, "jpeg: empty image");
    JITEMBED_ASSIGN_OR_RETURN(const auto target, detail::resized_size(info.width, info.height, p, limits));
    const int fit = std::min(info.width / target.first, info.height / target.second);
    int scale = 1;
    for (int s : {8, 4, 2})
      if (fit >= s) {
        scale = s;
        break;
      }
    if (scale > 1) {
      o.dct_scaling = codec::jpeg_dct_scaling::pow2;
      o.target_width = (info.width + scale - 1) / scale;
      o.target_height = (info.height + scale - 1) / scale;
    }
  }
  JITEMBED_ASSIGN_OR_RETURN(auto rgb, codec::decode_jpeg(jpeg, o, limits));
  return transform_image(rgb.view(), p, limits);
}

// Untrusted video bytes -> [3, T, H, W] f32: T frames 0, s, 2s, ... (codec::video_decode_options::frame_stride)
// at native size, each resized and normalised as an image.
inline result<tensor> preprocess_video(bytes_view data, const video_preprocess& v, const image_preprocess& p,
                                       const decode_limits& limits) {
  codec::video_decode_options o;
  o.num_frames = static_cast<int>(v.frames);
  o.frame_stride = v.frame_stride;
  JITEMBED_ASSIGN_OR_RETURN(auto frames, codec::decode_video(data, o, limits));
  const auto T = frames.shape()[0], h = frames.shape()[1], w = frames.shape()[2];
  tensor out = tensor::empty(shape{3, T, p.height, p.width}, dtype::f32);
  const auto plane = static_cast<std::size_t>(p.height * p.width);
  for (std::int64_t t = 0; t < T; ++t)
    JITEMBED_TRY(detail::transform_rgb_into(frames.data<std::uint8_t>() + static_cast<std::size_t>(t * h * w * 3), static_cast<int>(w),
                                            static_cast<int>(h), static_cast<std::ptrdiff_t>(w) * 3, p, limits,
                                            out.data<float>() + static_cast<std::size_t>(t) * plane, static_cast<std::size_t>(T) * plane));
  return out;
}

// What a model's parameters ask of its preprocessing.
struct preprocess_spec {
  modality input_modality = modality::image;
  bool active = false;  // false: none of these settings apply (the backend's own defaults)
  image_preprocess image;  // image models, and each frame of video models
  video_preprocess video;
  text_preprocess text;

  // The canonical preprocess_params string of every setting; text models pass their tokenizer file's hash
  // (t5_tokenizer::model_hash, hf_tokenizer::file_hash) and the pad id in effect, so a new vocabulary changes
  // the key.
  std::string key(std::string_view tokenizer_hash = {}, std::int64_t pad_id = 0) const {
    preprocess_params k;
    k.set("modality", to_string(input_modality));
    if (input_modality == modality::text) {
      if (!text.tokenizer_json.empty()) {
        k.set("tokenizer", "hf-tokenizer-json").set("tokenizer_file", text.tokenizer_json.filename().string());
        if (!tokenizer_hash.empty()) k.set("tokenizer_xxh3", tokenizer_hash);
        k.set("text_max_length", text.max_length).set("text_padding", "max_length").set("text_truncation", text.truncation);
        k.set("text_add_special_tokens", text.add_special_tokens).set("text_pad_id", pad_id);
        k.set("layout", text.with_mask ? "ids_mask" : "ids");
        return k.str();
      }
      k.set("tokenizer", "sentencepiece-t5").set("text_max_length", text.max_length).set("text_padding", "max_length");
      k.set("text_truncation", text.truncation).set("text_append_eos", text.append_eos);
      k.set("sentencepiece_model", text.sentencepiece_model.filename().string());
      if (!tokenizer_hash.empty()) k.set("sentencepiece_xxh3", tokenizer_hash);
      return k.str();
    }
    k.set("decode", input_modality == modality::video                ? "ffmpeg-rgb-native"
                    : image.decode == image_decode_mode::draft ? "turbojpeg-rgb-pil-draft-strict"
                                                               : "turbojpeg-rgb-native-strict");
    k.set("size", {image.height, image.width});
    k.set("image_resize", image.resize == image_resize_mode::stretch ? "stretch" : "shorter_side_crop");
    k.set("resample", "pil-bilinear-aa");
    k.set("image_normalize", image.normalize == image_normalize_mode::unit ? "unit"
                             : image.normalize == image_normalize_mode::signed_range ? "signed" : "mean_std");
    if (image.normalize == image_normalize_mode::mean_std) {
      std::string m, s;
      for (std::size_t c = 0; c < 3; ++c) {
        m += (c ? "," : "") + preprocess_params::format_number(image.mean[c]);
        s += (c ? "," : "") + preprocess_params::format_number(image.stdev[c]);
      }
      k.set("image_mean", m).set("image_std", s);
    }
    if (input_modality == modality::video) k.set("video_frames", video.frames).set("video_frame_stride", video.frame_stride);
    return k.str();
  }

  // From a config's parameters (others are ignored here) and the input's dtype and item dims. Opt-in, as in
  // Triton: without `modality` the model takes only its declared tensor (`active` false, other settings
  // refused). Image: f32 [3, H, W] (u8 [H, W, 3]: the backend's reference decode, `active` false); video: f32
  // [3, T, H, W]; text: `tokenizer` or `sentencepiece_model`, i64 [2, L] (or [L] with `tokenizer`). Errors:
  // invalid_argument naming the parameter and `file`.
  static result<preprocess_spec> parse(const std::map<std::string, std::string>& params, dtype in_type,
                                       const std::vector<std::int64_t>& in_dims, const std::filesystem::path& model_dir,
                                       const std::string& file) {
    preprocess_spec s;
    const auto get = [&](std::string_view k) -> const std::string* {
      const auto it = params.find(std::string(k));
      return it == params.end() ? nullptr : &it->second;
    };
    const auto* mod = get("modality");
    if (!mod) {
      for (const auto& [k, v] : params)
        if (k != "modality" && std::find(std::begin(kPreprocessParameters), std::end(kPreprocessParameters), k) != std::end(kPreprocessParameters))
          return fail(errc::invalid_argument, file + ": parameters '" + k +
                                                  "' needs parameters 'modality' (image, video or text): preprocessing is opt-in");
      return s;
    }
    if (*mod == "image") s.input_modality = modality::image;
    else if (*mod == "video") s.input_modality = modality::video;
    else if (*mod == "text") s.input_modality = modality::text;
    else return detail::bad_param(file, "modality", *mod, "not image, video or text");
    const auto dims_text = [&] { return detail::describe_input(in_type, in_dims); };
    const auto refuse_others = [&](std::string_view prefix_a, std::string_view prefix_b, const char* why) -> result<void> {
      for (const auto& [k, v] : params)
        if (k != "modality" && (k.starts_with(prefix_a) || k.starts_with(prefix_b) ||
                                ((k == "sentencepiece_model" || k == "tokenizer") && s.input_modality != modality::text)))
          return fail(errc::invalid_argument, file + ": parameters '" + k + "' " + why);
      return {};
    };
    if (s.input_modality == modality::text) {
      JITEMBED_TRY(refuse_others("image_", "video_", "does not apply to a text model"));
      const auto* sp = get("sentencepiece_model");
      const auto* hf = get("tokenizer");
      if (!sp && !hf)
        return fail(errc::invalid_argument, file + ": a text model needs parameters 'tokenizer' (a Hugging Face tokenizer.json) or "
                                                   "'sentencepiece_model'");
      if (sp && hf)
        return fail(errc::invalid_argument, file + ": parameters 'tokenizer' and 'sentencepiece_model' are both set: one tokenizer");
      const std::string& path = hf ? *hf : *sp;
      const char* key = hf ? "tokenizer" : "sentencepiece_model";
      if (path.empty()) return detail::bad_param(file, key, path, "empty");
      const bool ids_only = hf && in_type == dtype::i64 && in_dims.size() == 1 && in_dims[0] >= 1;
      if (!ids_only && (in_type != dtype::i64 || in_dims.size() != 2 || in_dims[0] != 2 || in_dims[1] < 2))
        return fail(errc::invalid_argument, file + ": parameters '" + key + "' makes TYPE_INT64 [2, L] (ids, attention mask)" +
                                                (hf ? " or [L] (ids)" : "") + ", input is " + dims_text());
      s.active = true;
      const auto resolved = std::filesystem::path(path).is_absolute() ? std::filesystem::path(path) : model_dir / path;
      (hf ? s.text.tokenizer_json : s.text.sentencepiece_model) = resolved;
      s.text.with_mask = !ids_only;
      s.text.max_length = in_dims.back();
      if (const auto* v = get("text_max_length")) {
        JITEMBED_ASSIGN_OR_RETURN(auto n, detail::param_int(file, "text_max_length", *v, 1, 1 << 20));
        if (n != in_dims.back())
          return detail::bad_param(file, "text_max_length", *v, "the input declares L = " + std::to_string(in_dims.back()));
      }
      if (const auto* v = get("text_padding"); v && *v != "max_length")
        return detail::bad_param(file, "text_padding", *v, "only max_length (the input has a fixed length)");
      if (const auto* v = get("text_truncation")) {
        JITEMBED_ASSIGN_OR_RETURN(s.text.truncation, detail::param_bool(file, "text_truncation", *v));
      }
      if (const auto* v = get("text_append_eos")) {
        if (hf) return detail::bad_param(file, "text_append_eos", *v, "applies to sentencepiece_model; tokenizer.json's post-processor adds special tokens");
        JITEMBED_ASSIGN_OR_RETURN(s.text.append_eos, detail::param_bool(file, "text_append_eos", *v));
      }
      if (const auto* v = get("text_add_special_tokens")) {
        if (!hf) return detail::bad_param(file, "text_add_special_tokens", *v, "applies to tokenizer (use text_append_eos)");
        JITEMBED_ASSIGN_OR_RETURN(s.text.add_special_tokens, detail::param_bool(file, "text_add_special_tokens", *v));
      }
      if (const auto* v = get("text_pad_id")) {
        if (!hf) return detail::bad_param(file, "text_pad_id", *v, "applies to tokenizer (SentencePiece's pad id is the model's)");
        JITEMBED_ASSIGN_OR_RETURN(s.text.pad_id, detail::param_int(file, "text_pad_id", *v, 0, (std::int64_t{1} << 31) - 1));
      }
      if (!hf && s.text.max_length < 2) return detail::bad_param(file, "text_max_length", std::to_string(s.text.max_length), "< 2");
      return s;
    }
    JITEMBED_TRY(refuse_others("text_", "text_", "does not apply to an image or video model"));
    if (s.input_modality == modality::image) JITEMBED_TRY(refuse_others("video_", "video_", "does not apply to an image model"));
    const bool video = s.input_modality == modality::video;
    const std::size_t rank = video ? 4 : 3;
    const bool f32_input = in_type == dtype::f32 && in_dims.size() == rank && in_dims[0] == 3;
    if (!f32_input) {
      // u8 [H, W, 3]: the backend's own reference JPEG decode (torch_model's), none of these settings
      const bool reference_image = !video && in_type == dtype::u8 && in_dims.size() == 3 && in_dims[2] == 3;
      for (const auto& [k, v] : params)
        if (k.starts_with("image_") || k.starts_with("video_") || !reference_image)
          return fail(errc::invalid_argument, file + ": parameters '" + (k.starts_with("image_") || k.starts_with("video_") ? k : "modality") +
                                                  "' makes TYPE_FP32 " + (video ? "[3, T, H, W]" : "[3, H, W]") +
                                                  (video ? "" : " (or TYPE_UINT8 [H, W, 3] without image_ settings)") + ", input is " + dims_text());
      return s;
    }
    for (std::size_t d = 1; d < rank; ++d)
      if (in_dims[d] < 1 || in_dims[d] > 65535)
        return fail(errc::invalid_argument, file + ": preprocessing makes fixed extents 1..65535, input is " + dims_text());
    s.active = true;
    s.image.height = in_dims[rank - 2];
    s.image.width = in_dims[rank - 1];
    if (const auto* v = get("image_resize")) {
      if (*v == "stretch") s.image.resize = image_resize_mode::stretch;
      else if (*v == "shorter_side_crop") s.image.resize = image_resize_mode::shorter_side_crop;
      else return detail::bad_param(file, "image_resize", *v, "not stretch or shorter_side_crop");
    }
    if (const auto* v = get("image_decode")) {
      if (video) return detail::bad_param(file, "image_decode", *v, "applies to JPEG images, not to video frames");
      if (*v == "exact") s.image.decode = image_decode_mode::exact;
      else if (*v == "draft") s.image.decode = image_decode_mode::draft;
      else return detail::bad_param(file, "image_decode", *v, "not exact or draft");
    }
    if (const auto* v = get("image_normalize")) {
      if (*v == "unit") s.image.normalize = image_normalize_mode::unit;
      else if (*v == "signed") s.image.normalize = image_normalize_mode::signed_range;
      else if (*v == "mean_std") s.image.normalize = image_normalize_mode::mean_std;
      else return detail::bad_param(file, "image_normalize", *v, "not unit, signed or mean_std");
    }
    for (const char* k : {"image_mean", "image_std"})
      if (const auto* v = get(k)) {
        if (s.image.normalize != image_normalize_mode::mean_std) return detail::bad_param(file, k, *v, "needs image_normalize mean_std");
        const bool is_std = std::string_view(k) == "image_std";
        JITEMBED_ASSIGN_OR_RETURN(auto f, detail::param_floats3(file, k, *v, is_std));
        (is_std ? s.image.stdev : s.image.mean) = f;
      }
    if (video) {
      s.video.frames = in_dims[1];
      if (const auto* v = get("video_frames")) {
        JITEMBED_ASSIGN_OR_RETURN(auto n, detail::param_int(file, "video_frames", *v, 1, 65535));
        if (n != in_dims[1]) return detail::bad_param(file, "video_frames", *v, "the input declares T = " + std::to_string(in_dims[1]));
      }
      if (const auto* v = get("video_frame_stride")) {
        JITEMBED_ASSIGN_OR_RETURN(auto n, detail::param_int(file, "video_frame_stride", *v, 1, 1 << 20));
        s.video.frame_stride = static_cast<int>(n);
      }
    }
    return s;
  }
};

}  // namespace jitembed::models
