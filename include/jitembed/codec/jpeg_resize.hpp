// Exact-size resize of interleaved u8 images after a DCT-scaled JPEG decode: separable, antialiased
// bilinear (triangle filter widened by the downscale factor, as PIL's BILINEAR), fixed point.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace jitembed::codec::detail {

inline constexpr int kResampleBits = 22;  // 255 * 2^22 * (taps' sum = 1) stays within int32

// Taps of one axis for the output pixels [out_begin, out_begin + out_count) of an out_size image.
struct resample_axis {
  std::vector<int> first;             // first source index per output pixel
  std::vector<int> count;             // number of taps per output pixel
  std::vector<std::int32_t> weights;  // `stride` slots per output pixel, sum = 1 << kResampleBits
  int stride = 0;
  int src_begin = 0;  // lowest source index any tap reads
  int src_end = 0;    // one past the highest
  bool uniform = false;  // every count == stride
};

inline resample_axis make_resample_axis(int in_size, int out_size, int out_begin, int out_count) {
  resample_axis a;
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_scale;  // triangle of radius 1, stretched when downscaling
  a.stride = static_cast<int>(std::ceil(2 * support)) + 2;
  a.first.resize(static_cast<std::size_t>(out_count));
  a.count.resize(static_cast<std::size_t>(out_count));
  a.weights.assign(static_cast<std::size_t>(out_count) * static_cast<std::size_t>(a.stride), 0);
  a.src_begin = in_size;
  a.src_end = 0;
  std::vector<double> w(static_cast<std::size_t>(a.stride));
  for (int i = 0; i < out_count; ++i) {
    const double center = (out_begin + i + 0.5) * scale;
    int lo = static_cast<int>(std::floor(center - support + 0.5));
    int hi = static_cast<int>(std::floor(center + support + 0.5));
    lo = std::clamp(lo, 0, in_size - 1);
    hi = std::clamp(hi, lo + 1, in_size);
    hi = std::min(hi, lo + a.stride);
    const int n = hi - lo;
    double sum = 0;
    for (int j = 0; j < n; ++j) {
      const double d = std::abs((lo + j + 0.5 - center) / filter_scale);
      w[static_cast<std::size_t>(j)] = d < 1.0 ? 1.0 - d : 0.0;
      sum += w[static_cast<std::size_t>(j)];
    }
    std::int32_t* out = a.weights.data() + static_cast<std::size_t>(i) * static_cast<std::size_t>(a.stride);
    if (sum <= 0) {  // cannot happen for a sane filter; fall back to the nearest sample
      const int nearest = std::clamp(static_cast<int>(center), lo, hi - 1);
      out[nearest - lo] = std::int32_t{1} << kResampleBits;
    } else {
      std::int32_t total = 0;
      int biggest = 0;
      for (int j = 0; j < n; ++j) {
        out[j] = static_cast<std::int32_t>(std::lround(w[static_cast<std::size_t>(j)] / sum * (1 << kResampleBits)));
        total += out[j];
        if (out[j] > out[biggest]) biggest = j;
      }
      out[biggest] += (std::int32_t{1} << kResampleBits) - total;  // exact unit sum: flat areas stay flat
    }
    a.first[static_cast<std::size_t>(i)] = lo;
    a.count[static_cast<std::size_t>(i)] = n;
  }
  // Repack to the widest window actually used (the bound above is loose by one or two).
  const int widest = out_count > 0 ? *std::max_element(a.count.begin(), a.count.end()) : 0;
  if (widest > 0 && widest < a.stride) {
    for (std::size_t i = 1; i < static_cast<std::size_t>(out_count); ++i)
      std::copy_n(a.weights.begin() + static_cast<std::ptrdiff_t>(i * static_cast<std::size_t>(a.stride)), widest,
                  a.weights.begin() + static_cast<std::ptrdiff_t>(i * static_cast<std::size_t>(widest)));
    a.stride = widest;
    a.weights.resize(static_cast<std::size_t>(out_count) * static_cast<std::size_t>(widest));
  }
  // Give every output pixel the same tap count when the source is wide enough: shift each window left
  // so that it reads `stride` samples in bounds, with zero weights on the extra ones. Uniform loops
  // without per-pixel bounds run markedly faster.
  if (in_size >= a.stride) {
    for (int i = 0; i < out_count; ++i) {
      auto& lo = a.first[static_cast<std::size_t>(i)];
      std::int32_t* wt = a.weights.data() + static_cast<std::size_t>(i) * static_cast<std::size_t>(a.stride);
      const int shift = std::max(0, lo + a.stride - in_size);
      if (shift > 0) {
        std::copy_backward(wt, wt + a.count[static_cast<std::size_t>(i)], wt + a.count[static_cast<std::size_t>(i)] + shift);
        std::fill(wt, wt + shift, 0);
        lo -= shift;
      }
      a.count[static_cast<std::size_t>(i)] = a.stride;
    }
    a.uniform = true;
  }
  for (int i = 0; i < out_count; ++i) {
    a.src_begin = std::min(a.src_begin, a.first[static_cast<std::size_t>(i)]);
    a.src_end = std::max(a.src_end, a.first[static_cast<std::size_t>(i)] + a.count[static_cast<std::size_t>(i)]);
  }
  return a;
}

// Weights are >= 0 and sum to exactly 1 << kResampleBits, so a rounded sum of u8 samples stays in 0..255.
inline std::uint8_t from_fixed(std::int32_t acc) noexcept { return static_cast<std::uint8_t>(acc >> kResampleBits); }

template <int C, bool Uniform, int Taps = 0>
inline void resample_row_impl(const std::uint8_t* src, std::uint8_t* dst, const resample_axis& a, int channels) {
  const int ch = C > 0 ? C : channels;
  const std::size_t n = a.first.size();
  const int* first = a.first.data();
  const int* count = a.count.data();
  const std::size_t stride = static_cast<std::size_t>(a.stride);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t* s = src + static_cast<std::ptrdiff_t>(first[i]) * ch;
    const std::int32_t* w = a.weights.data() + i * stride;
    const int taps = Taps > 0 ? Taps : (Uniform ? a.stride : count[i]);
    if constexpr (C == 3) {
      std::int32_t a0 = std::int32_t{1} << (kResampleBits - 1), a1 = a0, a2 = a0;
      for (int t = 0; t < taps; ++t) {
        a0 += static_cast<std::int32_t>(s[3 * t]) * w[t];
        a1 += static_cast<std::int32_t>(s[3 * t + 1]) * w[t];
        a2 += static_cast<std::int32_t>(s[3 * t + 2]) * w[t];
      }
      dst[3 * i] = from_fixed(a0);
      dst[3 * i + 1] = from_fixed(a1);
      dst[3 * i + 2] = from_fixed(a2);
    } else {
      for (int c = 0; c < ch; ++c) {
        std::int32_t acc = std::int32_t{1} << (kResampleBits - 1);
        for (int t = 0; t < taps; ++t) acc += static_cast<std::int32_t>(s[t * ch + c]) * w[t];
        dst[static_cast<std::ptrdiff_t>(i) * ch + c] = from_fixed(acc);
      }
    }
  }
}

template <int C>
inline void resample_row(const std::uint8_t* src, std::uint8_t* dst, const resample_axis& a, int channels) {
  if (!a.uniform) return resample_row_impl<C, false>(src, dst, a, channels);
  switch (a.stride) {  // the common tap counts as compile-time constants (fully unrolled)
    case 3: return resample_row_impl<C, true, 3>(src, dst, a, channels);
    case 4: return resample_row_impl<C, true, 4>(src, dst, a, channels);
    case 5: return resample_row_impl<C, true, 5>(src, dst, a, channels);
    case 6: return resample_row_impl<C, true, 6>(src, dst, a, channels);
    default: return resample_row_impl<C, true>(src, dst, a, channels);
  }
}

inline void resample_row_any(const std::uint8_t* src, std::uint8_t* dst, const resample_axis& a, int channels) {
  switch (channels) {
    case 1: resample_row<1>(src, dst, a, 1); break;
    case 3: resample_row<3>(src, dst, a, 3); break;
    default: resample_row<0>(src, dst, a, channels); break;
  }
}

// Resizes src (sh rows x sw pixels x channels, rows src_pitch bytes apart) to a full_h x full_w image and
// writes its window [x0, x0 + dw) x [y0, y0 + dh) into dst (rows dst_pitch bytes apart). The caller has
// validated every extent (all positive, the window inside the full image).
inline void resize_u8(const std::uint8_t* src, int sw, int sh, std::ptrdiff_t src_pitch, int channels, int full_w,
                      int full_h, int x0, int y0, int dw, int dh, std::uint8_t* dst, std::ptrdiff_t dst_pitch) {
  const bool horizontal = sw != full_w;
  const bool vertical = sh != full_h;
  const std::size_t row_bytes = static_cast<std::size_t>(dw) * static_cast<std::size_t>(channels);

  resample_axis ay;
  int ylo = y0, yhi = y0 + dh;  // source rows the vertical stage reads
  if (vertical) {
    ay = make_resample_axis(sh, full_h, y0, dh);
    ylo = ay.src_begin;
    yhi = ay.src_end;
  }

  // Stage 1: the needed source rows, resampled horizontally (or just the column window).
  const std::uint8_t* mid = nullptr;  // row r of stage 1 is at mid + (r - mid_row0) * mid_pitch
  std::ptrdiff_t mid_pitch = 0;
  int mid_row0 = 0;
  std::vector<std::uint8_t> tmp;
  if (horizontal) {
    const resample_axis ax = make_resample_axis(sw, full_w, x0, dw);
    if (!vertical) {
      for (int r = 0; r < dh; ++r)
        resample_row_any(src + static_cast<std::ptrdiff_t>(y0 + r) * src_pitch, dst + r * dst_pitch, ax, channels);
      return;
    }
    tmp.resize(static_cast<std::size_t>(yhi - ylo) * row_bytes);
    for (int r = ylo; r < yhi; ++r)
      resample_row_any(src + static_cast<std::ptrdiff_t>(r) * src_pitch,
                       tmp.data() + static_cast<std::size_t>(r - ylo) * row_bytes, ax, channels);
    mid = tmp.data();
    mid_pitch = static_cast<std::ptrdiff_t>(row_bytes);
    mid_row0 = ylo;
  } else {
    mid = src + static_cast<std::ptrdiff_t>(x0) * channels;
    mid_pitch = src_pitch;
  }

  if (!vertical) {
    for (int r = 0; r < dh; ++r) std::memcpy(dst + r * dst_pitch, mid + (y0 + r - mid_row0) * mid_pitch, row_bytes);
    return;
  }

  // Stage 2: vertical taps, accumulated a whole row at a time (vectorises).
  std::vector<std::int32_t> acc(row_bytes);
  for (int r = 0; r < dh; ++r) {
    std::fill(acc.begin(), acc.end(), std::int32_t{1} << (kResampleBits - 1));
    const std::int32_t* w = ay.weights.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(ay.stride);
    const int first = ay.first[static_cast<std::size_t>(r)];
    for (int t = 0; t < ay.count[static_cast<std::size_t>(r)]; ++t) {
      const std::uint8_t* s = mid + static_cast<std::ptrdiff_t>(first + t - mid_row0) * mid_pitch;
      const std::int32_t wt = w[t];
      for (std::size_t k = 0; k < row_bytes; ++k) acc[k] += static_cast<std::int32_t>(s[k]) * wt;
    }
    std::uint8_t* d = dst + r * dst_pitch;
    for (std::size_t k = 0; k < row_bytes; ++k) d[k] = from_fixed(acc[k]);
  }
}

}  // namespace jitembed::codec::detail
