// Shared helpers of the JPEG tests: synthetic images, PSNR, direct TurboJPEG reference calls, marker walk.
#pragma once

#include <turbojpeg.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "jitembed/codec/jpeg.hpp"

namespace jpeg_test {

using namespace jitembed;

// Smooth content (gradients + low-frequency waves), optionally with fine texture (noise, stripes).
inline tensor make_image(int w, int h, int channels = 3, bool textured = false, std::uint32_t seed = 1) {
  tensor t = tensor::empty({h, w, channels}, dtype::u8);
  auto* p = t.data<std::uint8_t>();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> noise(-12, 12);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c) {
        double v = 128 + 60 * std::sin(x * 0.021 + c * 1.3 + seed) * std::cos(y * 0.017 - c * 0.7) +
                   40.0 * (x + y) / (w + h) - 20;
        if (textured) v += noise(rng) + ((x / 3 + y / 5) % 2 ? 10 : -10);
        p[(static_cast<std::size_t>(y) * w + x) * channels + c] = static_cast<std::uint8_t>(std::clamp(v, 0.0, 255.0));
      }
  return t;
}

inline double psnr(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
  double se = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = double(a[i]) - double(b[i]);
    se += d * d;
  }
  if (se == 0) return 1e9;
  return 10 * std::log10(255.0 * 255.0 / (se / double(n)));
}

inline double mean_abs_diff(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += std::abs(int(a[i]) - int(b[i]));
  return s / double(n);
}

inline bytes_view bv(const std::vector<std::uint8_t>& v) { return {reinterpret_cast<const std::byte*>(v.data()), v.size()}; }
inline std::vector<std::uint8_t> to_vec(bytes_view b) {
  std::vector<std::uint8_t> v(b.size());
  if (!b.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// Direct TurboJPEG reference: decode at the scaled size w x h (0,0 = native) in pixel format pf.
struct direct_image {
  int width = 0, height = 0;
  std::vector<std::uint8_t> pixels;
};
inline direct_image direct_decode(bytes_view jpeg, int pf = TJPF_RGB, int w = 0, int h = 0, int flags = 0) {
  tjhandle d = tjInitDecompress();
  int jw = 0, jh = 0, samp = 0, cs = 0;
  if (tjDecompressHeader3(d, reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size(), &jw, &jh, &samp, &cs) != 0) {
    tjDestroy(d);
    throw std::runtime_error("direct header failed");
  }
  direct_image r;
  r.width = w ? w : jw;
  r.height = h ? h : jh;
  r.pixels.resize(static_cast<std::size_t>(r.width) * r.height * tjPixelSize[pf]);
  const int rc = tjDecompress2(d, reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size(), r.pixels.data(), r.width,
                               0, r.height, pf, flags);
  tjDestroy(d);
  if (rc != 0) throw std::runtime_error("direct decode failed");
  return r;
}

inline std::vector<std::uint8_t> direct_encode(const tensor& img, int pf, int samp, int quality, int flags = 0) {
  tjhandle c = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(c, img.data<std::uint8_t>(), int(img.size(1)), 0, int(img.size(0)), pf, &buf, &size, samp,
                             quality, flags);
  std::vector<std::uint8_t> out;
  if (rc == 0) out.assign(buf, buf + size);
  tjFree(buf);
  tjDestroy(c);
  if (rc != 0) throw std::runtime_error("direct encode failed");
  return out;
}

// One marker segment of a JPEG: offset of the 0xFF, marker byte, segment length (excluding the marker).
struct segment {
  std::size_t offset;
  std::uint8_t marker;
  std::size_t length;
};

// Walks the marker segments before the first SOS (and the SOS itself).
inline std::vector<segment> header_segments(const std::vector<std::uint8_t>& j) {
  std::vector<segment> out;
  std::size_t i = 2;
  while (i + 4 <= j.size() && j[i] == 0xFF) {
    const std::uint8_t m = j[i + 1];
    const std::size_t len = (std::size_t(j[i + 2]) << 8) | j[i + 3];
    out.push_back({i, m, len});
    if (m == 0xDA) break;
    i += 2 + len;
  }
  return out;
}

inline std::size_t find_marker(const std::vector<std::uint8_t>& j, std::uint8_t m) {
  for (const auto& s : header_segments(j))
    if (s.marker == m) return s.offset;
  throw std::runtime_error("marker not found");
}

}  // namespace jpeg_test
