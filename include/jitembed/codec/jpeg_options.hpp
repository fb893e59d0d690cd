// The JPEG codec's vocabulary: pixel formats, chroma subsampling, colour spaces, probe results and the
// decode / encode options (no TurboJPEG needed to name them).
#pragma once

#include <cstdint>
#include <optional>

namespace jitembed::codec {

// Channel order of decoded pixels (and of encoder input with 3 channels).
enum class pixel_format : std::uint8_t { rgb, bgr, gray };

constexpr int channels_of(pixel_format f) noexcept { return f == pixel_format::gray ? 1 : 3; }

// Chroma subsampling of a JPEG. s440 and s411 only appear in probe results of foreign files (and can
// be encoded), jitembed's encoder defaults to s420.
enum class chroma_subsampling : std::uint8_t { s444, s422, s420, gray, s440, s411 };

// The colour space the JPEG stores (not the decoded pixel format).
enum class jpeg_colorspace : std::uint8_t { ycbcr, rgb, gray, cmyk, ycck };

struct jpeg_info {
  int width = 0;
  int height = 0;
  chroma_subsampling subsampling = chroma_subsampling::s420;
  int components = 3;  // 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK
  jpeg_colorspace colorspace = jpeg_colorspace::ycbcr;
};

// Which TurboJPEG DCT scaling factors a decode to a smaller target may use.
//  pow2 (default): the smallest of 1/1, 1/2, 1/4, 1/8 whose output covers the target. libjpeg-turbo 2.x
//        has SIMD IDCTs only for these; 7/8 ... 3/8 run in plain C and measure slower than a native decode
//        (1024x768, q90: 1/1 3.3 ms, 7/8 6.6 ms, 3/4 7.9 ms, 5/8 5.9 ms, 1/2 2.8 ms, 3/8 3.1 ms).
//  any:  the smallest of all factors (2/1 .. 1/8, only <= 1 used) whose output covers the target: the
//        least memory, not the least time.
//  off:  always decode at native size, then resize.
enum class jpeg_dct_scaling : std::uint8_t { pow2, any, off };

// A window of the decoded (and resized) image.
struct crop_rect {
  int x = 0, y = 0, width = 0, height = 0;
};

struct jpeg_decode_options {
  pixel_format format = pixel_format::rgb;
  // 0,0: native size. Otherwise TurboJPEG decodes with the smallest DCT scaling factor (<= 1, among those
  // dct_scaling allows) whose output is still >= the target in both dimensions, and the result is resized
  // exactly to the target with an antialiased bilinear filter. One of them 0: that one follows the aspect
  // ratio (rounded, >= 1). A target above the native size decodes at native size and upsamples.
  int target_width = 0, target_height = 0;
  jpeg_dct_scaling dct_scaling = jpeg_dct_scaling::pow2;
  // In output coordinates (after resize); must lie inside the output image, else errc::invalid_argument.
  std::optional<crop_rect> crop;
  // strict (default): any libjpeg warning (corrupt entropy data, premature end, extraneous bytes) fails the
  // decode (errc::truncated / errc::decode_failed). Not strict: the image is returned as libjpeg recovered
  // it (a truncated image is padded with grey), only fatal errors fail. Training pipelines that would
  // rather keep slightly damaged photos than drop them set strict = false.
  bool strict = true;
  bool fast_dct = false;       // TJFLAG_FASTDCT: faster, slightly less accurate
  bool fast_upsample = false;  // TJFLAG_FASTUPSAMPLE: nearest chroma upsampling
};

struct jpeg_encode_options {
  int quality = 90;  // 1..100
  chroma_subsampling subsampling = chroma_subsampling::s420;  // gray input always encodes as gray
  pixel_format input_format = pixel_format::rgb;  // channel order of a 3-channel input (rgb or bgr)
};

}  // namespace jitembed::codec
