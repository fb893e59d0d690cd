// Pillow's resampling of 8-bit images (Resample.c, BILINEAR), reproduced step by step so that
// torchvision's PIL pipeline (transforms.Resize) and jitembed agree to the byte: double-precision filter
// taps normalised per output pixel, rounded to 22-bit fixed point without a sum fix-up, a horizontal pass
// rounded to u8, then a vertical pass. Only the support and weight formula of Pillow's bilinear filter are
// used (facts of the algorithm; no code is copied). No dependencies.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace jitembed::models::detail {

inline constexpr int kPilPrecisionBits = 32 - 8 - 2;

// Fixed-point taps of one axis: output pixel i reads source [first[i], first[i] + count[i]).
struct pil_axis {
  std::vector<int> first, count;
  std::vector<std::int32_t> weights;  // `ksize` slots per output pixel
  int ksize = 0;
};

inline pil_axis pil_bilinear_axis(int in_size, int out_size) {
  pil_axis a;
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;  // bilinear: support 1
  a.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  a.first.resize(static_cast<std::size_t>(out_size));
  a.count.resize(static_cast<std::size_t>(out_size));
  a.weights.assign(static_cast<std::size_t>(out_size) * static_cast<std::size_t>(a.ksize), 0);
  std::vector<double> k(static_cast<std::size_t>(a.ksize));
  const double ss = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);  // truncation, as the C cast
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      double d = (x + xmin - center + 0.5) * ss;
      if (d < 0.0) d = -d;
      const double w = d < 1.0 ? 1.0 - d : 0.0;
      k[static_cast<std::size_t>(x)] = w;
      ww += w;
    }
    std::int32_t* out = a.weights.data() + static_cast<std::size_t>(xx) * static_cast<std::size_t>(a.ksize);
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? k[static_cast<std::size_t>(x)] / ww : k[static_cast<std::size_t>(x)];
      const double scaled = v * (1 << kPilPrecisionBits);
      out[x] = static_cast<std::int32_t>(v < 0 ? -0.5 + scaled : 0.5 + scaled);
    }
    a.first[static_cast<std::size_t>(xx)] = xmin;
    a.count[static_cast<std::size_t>(xx)] = xmax;
  }
  return a;
}

inline std::uint8_t pil_clip8(std::int32_t v) noexcept {
  if (v >= (std::int32_t{1} << kPilPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<std::uint8_t>(v >> kPilPrecisionBits);
}

// Resizes an interleaved u8 image of `channels` (1..4) from sw x sh (rows src_pitch bytes apart) to
// dw x dh, contiguous, as Pillow's Image.resize(BILINEAR) does. Extents are validated by the caller (> 0).
inline std::vector<std::uint8_t> pil_resize_bilinear(const std::uint8_t* src, int sw, int sh, std::ptrdiff_t src_pitch,
                                                     int channels, int dw, int dh) {
  const auto ch = static_cast<std::size_t>(channels);
  std::vector<std::uint8_t> cur;  // stage output, contiguous rows
  const std::uint8_t* in = src;
  std::ptrdiff_t in_pitch = src_pitch;
  int row0 = 0;  // source row of in's first row
  pil_axis ay;
  int ylo = 0, yhi = sh;
  if (dh != sh) {
    ay = pil_bilinear_axis(sh, dh);
    ylo = ay.first.front();
    yhi = ay.first.back() + ay.count.back();
  }
  if (dw != sw) {
    const pil_axis ax = pil_bilinear_axis(sw, dw);
    const std::size_t out_pitch = static_cast<std::size_t>(dw) * ch;
    cur.resize(static_cast<std::size_t>(yhi - ylo) * out_pitch);
    for (int y = ylo; y < yhi; ++y) {
      const std::uint8_t* s = src + static_cast<std::ptrdiff_t>(y) * src_pitch;
      std::uint8_t* d = cur.data() + static_cast<std::size_t>(y - ylo) * out_pitch;
      for (int xx = 0; xx < dw; ++xx) {
        const std::int32_t* k = ax.weights.data() + static_cast<std::size_t>(xx) * static_cast<std::size_t>(ax.ksize);
        const int xmin = ax.first[static_cast<std::size_t>(xx)], n = ax.count[static_cast<std::size_t>(xx)];
        for (std::size_t c = 0; c < ch; ++c) {
          std::int32_t acc = std::int32_t{1} << (kPilPrecisionBits - 1);
          for (int x = 0; x < n; ++x) acc += static_cast<std::int32_t>(s[static_cast<std::size_t>(x + xmin) * ch + c]) * k[x];
          d[static_cast<std::size_t>(xx) * ch + c] = pil_clip8(acc);
        }
      }
    }
    in = cur.data();
    in_pitch = static_cast<std::ptrdiff_t>(out_pitch);
    row0 = ylo;
  }
  const std::size_t row_bytes = static_cast<std::size_t>(dw) * ch;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(dh) * row_bytes);
  if (dh == sh) {
    for (int y = 0; y < dh; ++y)
      for (std::size_t b = 0; b < row_bytes; ++b) out[static_cast<std::size_t>(y) * row_bytes + b] = in[static_cast<std::ptrdiff_t>(y) * in_pitch + static_cast<std::ptrdiff_t>(b)];
    return out;
  }
  std::vector<std::int32_t> acc(row_bytes);
  for (int yy = 0; yy < dh; ++yy) {
    const std::int32_t* k = ay.weights.data() + static_cast<std::size_t>(yy) * static_cast<std::size_t>(ay.ksize);
    const int ymin = ay.first[static_cast<std::size_t>(yy)], n = ay.count[static_cast<std::size_t>(yy)];
    std::fill(acc.begin(), acc.end(), std::int32_t{1} << (kPilPrecisionBits - 1));
    for (int y = 0; y < n; ++y) {
      const std::uint8_t* s = in + static_cast<std::ptrdiff_t>(ymin + y - row0) * in_pitch;
      const std::int32_t w = k[y];
      for (std::size_t b = 0; b < row_bytes; ++b) acc[b] += static_cast<std::int32_t>(s[b]) * w;
    }
    std::uint8_t* d = out.data() + static_cast<std::size_t>(yy) * row_bytes;
    for (std::size_t b = 0; b < row_bytes; ++b) d[b] = pil_clip8(acc[b]);
  }
  return out;
}

}  // namespace jitembed::models::detail
