// JPEG codec on TurboJPEG: probe, decode (DCT-scaled to a target size, exact resize, crop) under
// decode_limits, encode, batch decode on a thread pool, and jpeg_codec modelling codec::codec.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <future>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "jitembed/codec/codec.hpp"
#include "jitembed/codec/detail/turbojpeg_api.hpp"
#include "jitembed/codec/jpeg_resize.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/core/thread_pool.hpp"

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

namespace detail {

inline tj_samp to_tj_samp(chroma_subsampling s) noexcept {
  switch (s) {
    case chroma_subsampling::s444: return tj_samp::s444;
    case chroma_subsampling::s422: return tj_samp::s422;
    case chroma_subsampling::s420: return tj_samp::s420;
    case chroma_subsampling::gray: return tj_samp::gray;
    case chroma_subsampling::s440: return tj_samp::s440;
    case chroma_subsampling::s411: return tj_samp::s411;
  }
  return tj_samp::unknown;
}

inline tj_pixel to_tj_pixel(pixel_format f) noexcept {
  switch (f) {
    case pixel_format::rgb: return tj_pixel::rgb;
    case pixel_format::bgr: return tj_pixel::bgr;
    case pixel_format::gray: return tj_pixel::gray;
  }
  return tj_pixel::rgb;
}

inline std::string dims(std::int64_t w, std::int64_t h) { return std::to_string(w) + "x" + std::to_string(h); }

// Offset where the input runs out before an EOI marker, or npos when the stream is complete. Walks the
// marker segments and skips each scan's entropy-coded data (stuffed 0xFF00 and RSTn belong to it). Only
// used on the error path, to tell truncation from corruption.
inline std::size_t truncation_offset(bytes_view jpeg) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(jpeg.data());
  const std::size_t n = jpeg.size();
  constexpr std::size_t complete = static_cast<std::size_t>(-1);
  std::size_t i = 2;
  for (;;) {
    const void* ff = i < n ? std::memchr(p + i, 0xFF, n - i) : nullptr;  // skips junk between segments
    if (ff == nullptr) return n;
    i = static_cast<std::size_t>(static_cast<const std::uint8_t*>(ff) - p);
    while (i < n && p[i] == 0xFF) ++i;  // fill bytes
    if (i >= n) return n;
    const std::uint8_t m = p[i++];
    if (m == 0xD9) return complete;                                      // EOI
    if (m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;  // no length field
    if (n - i < 2) return n;
    const std::size_t len = (std::size_t{p[i]} << 8) | p[i + 1];
    if (len < 2) return complete;  // corrupt, not short
    if (n - i < len) return n;
    i += len;
    if (m != 0xDA) continue;
    for (;;) {  // entropy-coded data up to the next real marker
      const void* f = i < n ? std::memchr(p + i, 0xFF, n - i) : nullptr;
      if (f == nullptr) return n;
      std::size_t k = static_cast<std::size_t>(static_cast<const std::uint8_t*>(f) - p) + 1;
      while (k < n && p[k] == 0xFF) ++k;
      if (k >= n) return n;
      if (p[k] == 0x00 || (p[k] >= 0xD0 && p[k] <= 0xD7)) {
        i = k + 1;
        continue;
      }
      i = k - 1;  // at the 0xFF before the marker
      break;
    }
  }
}

// TurboJPEG's failure mapped to a stable code: the progressive scan limit is `limit_exceeded`, input that
// ends before its EOI is `truncated`, anything else the decoder rejected is `decode_failed`.
inline error_info tj_failure(const char* stage, const tj_status& s, bytes_view jpeg) {
  if (s.message.find("more than 500 scans") != std::string::npos)
    return fail(errc::limit_exceeded, std::string("jpeg: ") + stage + ": " + s.message + " (TJFLAG_LIMITSCANS)");
  const std::size_t end = truncation_offset(jpeg);
  if (end != static_cast<std::size_t>(-1))
    return fail(errc::truncated, std::string("jpeg: ") + stage + ": data ends at offset " + std::to_string(end) +
                                     " before EOI: " + s.message);
  return fail(errc::decode_failed, std::string("jpeg: ") + stage + ": " + s.message);
}

// SOI first: anything else is not a JPEG, whatever TurboJPEG would make of it.
inline result<void> check_soi(bytes_view jpeg) {
  const auto b0 = jpeg.size() > 0 ? static_cast<unsigned>(jpeg[0]) : 0xFFu;
  const auto b1 = jpeg.size() > 1 ? static_cast<unsigned>(jpeg[1]) : 0xD8u;
  if (b0 != 0xFF || b1 != 0xD8) return fail(errc::bad_magic, "jpeg: no SOI marker (0xFFD8) at offset 0");
  if (jpeg.size() < 4) return fail(errc::truncated, "jpeg: " + std::to_string(jpeg.size()) + " bytes end after SOI");
  if (jpeg.size() > std::numeric_limits<unsigned long>::max())
    return fail(errc::limit_exceeded, "jpeg: input of " + std::to_string(jpeg.size()) + " bytes is too large");
  return {};
}

// Header of untrusted bytes. strict: a header warning (e.g. extraneous bytes before a marker) fails.
inline result<tj_header> read_header(bytes_view jpeg, bool strict) {
  JITEMBED_TRY(check_soi(jpeg));
  tj_decompressor* d = tj_decompressor::for_this_thread();
  if (d == nullptr) return fail(errc::internal, "jpeg: tjInitDecompress failed");
  tj_header h;
  const tj_status s = d->read_header(jpeg, h);
  if (s.kind == tj_status::fatal || (strict && s.kind == tj_status::warning)) return tj_failure("header", s, jpeg);
  if (h.width < 1 || h.height < 1) {
    if (truncation_offset(jpeg) != static_cast<std::size_t>(-1))
      return fail(errc::truncated, "jpeg: header: data ends before the first scan");
    return fail(errc::corrupt_data, "jpeg: header: no image (tables-only stream)");
  }
  if (h.samp == tj_samp::unknown || h.colorspace == tj_colorspace::unknown)
    return fail(errc::unsupported_format, "jpeg: unknown subsampling or colour space");
  return h;
}

inline result<void> check_pixels(const char* what, std::int64_t w, std::int64_t h, const decode_limits& limits) {
  const auto px = static_cast<std::uint64_t>(w) * static_cast<std::uint64_t>(h);
  if (px > limits.max_image_pixels)
    return fail(errc::limit_exceeded, std::string("jpeg: ") + what + " " + dims(w, h) + " = " + std::to_string(px) +
                                          " pixels > max_image_pixels " + std::to_string(limits.max_image_pixels));
  return {};
}

// Everything decided from the header and the options before any pixel is allocated.
struct decode_plan {
  tj_header header;
  tj_pixel pixel = tj_pixel::rgb;
  int channels = 3;
  int scaled_w = 0, scaled_h = 0;  // what TurboJPEG writes (DCT-scaled)
  int full_w = 0, full_h = 0;      // after the exact resize
  crop_rect window;                // the part of full_w x full_h that is returned

  bool direct() const noexcept {  // TurboJPEG can write the result straight into the output
    return scaled_w == full_w && scaled_h == full_h && window.x == 0 && window.y == 0 && window.width == full_w &&
           window.height == full_h;
  }
  jitembed::shape output_shape() const { return {window.height, window.width, channels}; }
};

inline result<decode_plan> plan_decode(bytes_view jpeg, const jpeg_decode_options& opts, const decode_limits& limits) {
  if (opts.format != pixel_format::rgb && opts.format != pixel_format::bgr && opts.format != pixel_format::gray)
    return fail(errc::invalid_argument, "jpeg: unknown pixel_format");
  if (opts.target_width < 0 || opts.target_height < 0 || opts.target_width > kTjMaxDimension ||
      opts.target_height > kTjMaxDimension)
    return fail(errc::invalid_argument, "jpeg: target " + dims(opts.target_width, opts.target_height) +
                                            " outside 0.." + std::to_string(kTjMaxDimension));
  auto hr = read_header(jpeg, opts.strict);
  if (!hr) return hr.error();
  decode_plan p;
  p.header = *hr;
  const int w = p.header.width, h = p.header.height;
  // The source size bounds what libjpeg allocates internally (a progressive image keeps all coefficients).
  JITEMBED_TRY(check_pixels("image", w, h, limits));
  if (p.header.colorspace == tj_colorspace::cmyk || p.header.colorspace == tj_colorspace::ycck)
    return fail(errc::unsupported_format, "jpeg: CMYK/YCCK image cannot be decoded to rgb/bgr/gray");
  p.pixel = to_tj_pixel(opts.format);
  p.channels = channels_of(opts.format);

  // Output size.
  int tw = opts.target_width, th = opts.target_height;
  if (tw == 0 && th == 0) {
    tw = w;
    th = h;
  } else if (tw == 0) {
    tw = static_cast<int>(std::clamp<std::int64_t>((static_cast<std::int64_t>(w) * th + h / 2) / h, 1, kTjMaxDimension));
  } else if (th == 0) {
    th = static_cast<int>(std::clamp<std::int64_t>((static_cast<std::int64_t>(h) * tw + w / 2) / w, 1, kTjMaxDimension));
  }
  p.full_w = tw;
  p.full_h = th;

  // Smallest allowed factor <= 1 whose output still covers the target; 1/1 when upsampling.
  p.scaled_w = w;
  p.scaled_h = h;
  for (const tj_scale s : tj_scaling_factors()) {
    if (s.num > s.denom || opts.dct_scaling == jpeg_dct_scaling::off) continue;
    const bool pow2 = s.num == 1 && (s.denom & (s.denom - 1)) == 0;
    if (opts.dct_scaling == jpeg_dct_scaling::pow2 && !pow2) continue;
    const int sw = tj_scaled(w, s), sh = tj_scaled(h, s);
    if (sw >= tw && sh >= th && static_cast<std::int64_t>(sw) * sh <= static_cast<std::int64_t>(p.scaled_w) * p.scaled_h) {
      p.scaled_w = sw;
      p.scaled_h = sh;
    }
  }

  if (opts.crop) {
    const crop_rect c = *opts.crop;
    if (c.width <= 0 || c.height <= 0 || c.x < 0 || c.y < 0 || c.x > tw - c.width || c.y > th - c.height)
      return fail(errc::invalid_argument, "jpeg: crop " + dims(c.width, c.height) + "+" + std::to_string(c.x) + "+" +
                                              std::to_string(c.y) + " outside the " + dims(tw, th) + " output");
    p.window = c;
  } else {
    p.window = {0, 0, tw, th};
  }

  JITEMBED_TRY(check_pixels("output", p.window.width, p.window.height, limits));
  const auto out_elems = static_cast<std::uint64_t>(p.window.width) * static_cast<std::uint64_t>(p.window.height) *
                         static_cast<std::uint64_t>(p.channels);
  if (out_elems > limits.max_elements)
    return fail(errc::limit_exceeded, "jpeg: output of " + std::to_string(out_elems) + " elements > max_elements " +
                                          std::to_string(limits.max_elements));
  if (out_elems > limits.max_decoded_bytes)
    return fail(errc::limit_exceeded, "jpeg: output of " + std::to_string(out_elems) + " bytes > max_decoded_bytes " +
                                          std::to_string(limits.max_decoded_bytes));
  if (!p.direct()) {
    const auto scratch = static_cast<std::uint64_t>(p.scaled_w) * static_cast<std::uint64_t>(p.scaled_h) *
                         static_cast<std::uint64_t>(p.channels);
    if (scratch > limits.max_decoded_bytes)
      return fail(errc::limit_exceeded, "jpeg: intermediate " + dims(p.scaled_w, p.scaled_h) + " decode of " +
                                            std::to_string(scratch) + " bytes > max_decoded_bytes " +
                                            std::to_string(limits.max_decoded_bytes));
  }
  return p;
}

// Per-thread scratch for the intermediate (scaled) decode; released when it grew past 64 MiB.
struct scratch_buffer {
  std::unique_ptr<std::uint8_t[]> data;
  std::size_t size = 0;
  std::uint8_t* get(std::size_t n) {
    if (n > size) {
      data.reset(new std::uint8_t[n]);
      size = n;
    }
    return data.get();
  }
  void trim() {
    if (size > (std::size_t{64} << 20)) {
      data.reset();
      size = 0;
    }
  }
};

inline scratch_buffer& decode_scratch() {
  thread_local scratch_buffer s;
  return s;
}

// Decodes per plan into dst (window.height rows of window.width * channels bytes, dst_pitch apart).
inline result<void> run_decode(bytes_view jpeg, const decode_plan& p, const jpeg_decode_options& opts,
                               std::uint8_t* dst, std::ptrdiff_t dst_pitch) {
  tj_decompressor* d = tj_decompressor::for_this_thread();
  if (d == nullptr) return fail(errc::internal, "jpeg: tjInitDecompress failed");
  tj_decode_flags f;
  f.stop_on_warning = opts.strict;
  f.limit_scans = true;
  f.fast_dct = opts.fast_dct;
  f.fast_upsample = opts.fast_upsample;
  auto accept = [&](const tj_status& s) -> result<void> {
    if (s.kind == tj_status::fatal || (opts.strict && s.kind == tj_status::warning)) return tj_failure("decode", s, jpeg);
    return {};
  };
  if (p.direct()) {
    if (dst_pitch > std::numeric_limits<int>::max())
      return fail(errc::invalid_argument, "jpeg: output row pitch " + std::to_string(dst_pitch) + " exceeds int");
    return accept(d->decompress(jpeg, dst, p.scaled_w, static_cast<int>(dst_pitch), p.scaled_h, p.pixel, f));
  }
  scratch_buffer& scratch = decode_scratch();
  const std::size_t pitch = static_cast<std::size_t>(p.scaled_w) * static_cast<std::size_t>(p.channels);
  if (pitch > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    return fail(errc::limit_exceeded, "jpeg: row of " + std::to_string(pitch) + " bytes exceeds int");
  std::uint8_t* buf = scratch.get(pitch * static_cast<std::size_t>(p.scaled_h));
  auto r = accept(d->decompress(jpeg, buf, p.scaled_w, static_cast<int>(pitch), p.scaled_h, p.pixel, f));
  if (r) {
    resize_u8(buf, p.scaled_w, p.scaled_h, static_cast<std::ptrdiff_t>(pitch), p.channels, p.full_w, p.full_h,
              p.window.x, p.window.y, p.window.width, p.window.height, dst, dst_pitch);
  }
  scratch.trim();
  return r;
}

// Checks that an interleaved u8 HWC (or HW for gray) view on the CPU can take the plan's output; returns its
// row pitch in bytes.
inline result<std::ptrdiff_t> check_output_view(const tensor_view& out, const decode_plan& p) {
  if (!out.dev().is_cpu()) return fail(errc::invalid_argument, "jpeg: output view is not on the CPU");
  if (out.dtype() != dtype::u8) return fail(errc::dtype_mismatch, "jpeg: output view dtype is not u8");
  const shape want = p.output_shape();
  const bool rank3 = out.rank() == 3 && out.shape() == want;
  const bool rank2 = out.rank() == 2 && p.channels == 1 && out.size(0) == want[0] && out.size(1) == want[1];
  if (!rank3 && !rank2)
    return fail(errc::invalid_argument,
                "jpeg: output view " + out.shape().to_string() + " != decoded shape " + want.to_string());
  const auto& st = out.strides();
  const bool inner_ok = rank3 ? (st[2] == 1 || want[2] == 1) && (st[1] == p.channels || want[1] == 1)
                              : (st[1] == 1 || want[1] == 1);
  const std::int64_t row_bytes = static_cast<std::int64_t>(p.window.width) * p.channels;
  if (!inner_ok || (want[0] > 1 && st[0] < row_bytes))
    return fail(errc::invalid_argument, "jpeg: output view rows are not interleaved, contiguous pixels");
  if (out.data() == nullptr) return fail(errc::invalid_argument, "jpeg: output view has no data");
  return static_cast<std::ptrdiff_t>(want[0] > 1 ? st[0] : row_bytes);
}

}  // namespace detail

// Header only: size, subsampling, colour space. No pixel memory is allocated. Header warnings are
// tolerated here (decode with strict = true reports them).
inline result<jpeg_info> probe_jpeg(bytes_view jpeg) {
  auto h = detail::read_header(jpeg, /*strict=*/false);
  if (!h) return h.error();
  jpeg_info info;
  info.width = h->width;
  info.height = h->height;
  switch (h->samp) {
    case detail::tj_samp::s444: info.subsampling = chroma_subsampling::s444; break;
    case detail::tj_samp::s422: info.subsampling = chroma_subsampling::s422; break;
    case detail::tj_samp::s420: info.subsampling = chroma_subsampling::s420; break;
    case detail::tj_samp::gray: info.subsampling = chroma_subsampling::gray; break;
    case detail::tj_samp::s440: info.subsampling = chroma_subsampling::s440; break;
    case detail::tj_samp::s411: info.subsampling = chroma_subsampling::s411; break;
    case detail::tj_samp::unknown: break;
  }
  switch (h->colorspace) {
    case detail::tj_colorspace::ycbcr: info.colorspace = jpeg_colorspace::ycbcr; info.components = 3; break;
    case detail::tj_colorspace::rgb: info.colorspace = jpeg_colorspace::rgb; info.components = 3; break;
    case detail::tj_colorspace::gray: info.colorspace = jpeg_colorspace::gray; info.components = 1; break;
    case detail::tj_colorspace::cmyk: info.colorspace = jpeg_colorspace::cmyk; info.components = 4; break;
    case detail::tj_colorspace::ycck: info.colorspace = jpeg_colorspace::ycck; info.components = 4; break;
    case detail::tj_colorspace::unknown: break;
  }
  return info;
}

// The [H, W, C] shape decode_jpeg would return for these bytes and options (header read only).
inline result<shape> jpeg_output_shape(bytes_view jpeg, const jpeg_decode_options& opts, const decode_limits& limits) {
  auto p = detail::plan_decode(jpeg, opts, limits);
  if (!p) return p.error();
  return p->output_shape();
}

// Decodes untrusted bytes to a new [H, W, C] u8 tensor (C = 3 for rgb/bgr, 1 for gray).
inline result<tensor> decode_jpeg(bytes_view jpeg, const jpeg_decode_options& opts, const decode_limits& limits) {
  auto p = detail::plan_decode(jpeg, opts, limits);
  if (!p) return p.error();
  tensor out = tensor::empty(p->output_shape(), dtype::u8);
  const auto pitch = static_cast<std::ptrdiff_t>(p->window.width) * p->channels;
  JITEMBED_TRY(detail::run_decode(jpeg, *p, opts, out.data<std::uint8_t>(), pitch));
  return out;
}

// Decodes into a caller's buffer (batch / pinned staging): `out` is u8 on the CPU with exactly the output
// shape ([H, W, C], or [H, W] for gray); rows may be padded (stride[0] >= W * C), pixels are interleaved.
inline result<void> decode_jpeg_into(bytes_view jpeg, const jpeg_decode_options& opts, const decode_limits& limits,
                                     const tensor_view& out) {
  auto p = detail::plan_decode(jpeg, opts, limits);
  if (!p) return p.error();
  auto pitch = detail::check_output_view(out, *p);
  if (!pitch) return pitch.error();
  return detail::run_decode(jpeg, *p, opts, out.data<std::uint8_t>(), *pitch);
}

namespace detail {

// Runs body(i) for i in [0, n) on min(n, pool size) tasks that pull indices from a shared counter, so
// images of different sizes balance across threads. Blocks until all are done.
template <class Body>
void run_on_pool(std::size_t n, thread_pool& pool, Body&& body) {
  if (n == 0) return;
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next.fetch_add(1, std::memory_order_relaxed); i < n; i = next.fetch_add(1, std::memory_order_relaxed))
      body(i);
  };
  const std::size_t tasks = std::min(pool.size(), n);
  std::vector<std::future<void>> futs;
  futs.reserve(tasks);
  for (std::size_t t = 0; t < tasks; ++t) futs.push_back(pool.submit(worker));
  for (auto& f : futs) f.wait();
}

}  // namespace detail

// Decodes every image on the pool (one TurboJPEG handle per worker thread); results in input order.
// Do not call it from a task running on the same pool: it blocks until its own tasks finish.
inline std::vector<result<tensor>> decode_jpeg_batch(std::span<const bytes_view> jpegs, const jpeg_decode_options& opts,
                                                     const decode_limits& limits, thread_pool& pool) {
  std::vector<result<tensor>> out(jpegs.size(), result<tensor>(fail(errc::internal, "jpeg: batch item not decoded")));
  detail::run_on_pool(jpegs.size(), pool, [&](std::size_t i) {
    try {
      out[i] = decode_jpeg(jpegs[i], opts, limits);
    } catch (const std::bad_alloc&) {
      out[i] = fail(errc::limit_exceeded, "jpeg: out of memory decoding batch item " + std::to_string(i));
    }
  });
  return out;
}

// decode_jpeg_into for many images on the pool: outs[i] receives jpegs[i] (e.g. slices of one [N, H, W, C]
// batch tensor with a fixed target size, or buffers reused from the previous step; reusing memory also
// spares the page faults that fresh tensors cost). One result per image, in input order.
inline std::vector<result<void>> decode_jpeg_batch_into(std::span<const bytes_view> jpegs,
                                                        std::span<const tensor_view> outs,
                                                        const jpeg_decode_options& opts, const decode_limits& limits,
                                                        thread_pool& pool) {
  if (outs.size() != jpegs.size())
    return std::vector<result<void>>(jpegs.size(), result<void>(fail(errc::invalid_argument,
                                                                     "jpeg: " + std::to_string(outs.size()) + " outputs for " +
                                                                         std::to_string(jpegs.size()) + " images")));
  std::vector<result<void>> out(jpegs.size(), result<void>(fail(errc::internal, "jpeg: batch item not decoded")));
  detail::run_on_pool(jpegs.size(), pool, [&](std::size_t i) {
    try {
      out[i] = decode_jpeg_into(jpegs[i], opts, limits, outs[i]);
    } catch (const std::bad_alloc&) {
      out[i] = fail(errc::limit_exceeded, "jpeg: out of memory decoding batch item " + std::to_string(i));
    }
  });
  return out;
}

namespace detail {

struct encode_plan {
  const std::uint8_t* src = nullptr;
  int width = 0, height = 0, pitch = 0;
  tj_pixel pixel = tj_pixel::rgb;
  tj_samp samp = tj_samp::s420;
  int quality = 90;
};

inline result<encode_plan> plan_encode(const tensor_view& v, const jpeg_encode_options& opts) {
  if (!v.dev().is_cpu()) return fail(errc::invalid_argument, "jpeg: encode input is not on the CPU");
  if (v.dtype() != dtype::u8) return fail(errc::dtype_mismatch, "jpeg: encode input dtype is not u8");
  if (v.rank() != 2 && v.rank() != 3)
    return fail(errc::invalid_argument, "jpeg: encode input " + v.shape().to_string() + " is not [H,W,C] or [H,W]");
  const std::int64_t h = v.size(0), w = v.size(1), c = v.rank() == 3 ? v.size(2) : 1;
  if (c != 1 && c != 3) return fail(errc::invalid_argument, "jpeg: encode input has " + std::to_string(c) + " channels, not 1 or 3");
  if (h < 1 || w < 1 || h > kTjMaxDimension || w > kTjMaxDimension)
    return fail(errc::invalid_argument, "jpeg: encode size " + dims(w, h) + " outside 1.." + std::to_string(kTjMaxDimension));
  if (opts.quality < 1 || opts.quality > 100)
    return fail(errc::invalid_argument, "jpeg: quality " + std::to_string(opts.quality) + " outside 1..100");
  const auto& st = v.strides();
  const bool inner_ok = v.rank() == 3 ? (st[2] == 1 || c == 1) && (st[1] == c || w == 1) : (st[1] == 1 || w == 1);
  if (!inner_ok || (h > 1 && st[0] < w * c))
    return fail(errc::invalid_argument, "jpeg: encode input pixels are not interleaved and contiguous within a row");
  const std::int64_t pitch = h > 1 ? st[0] : w * c;
  if (pitch > std::numeric_limits<int>::max()) return fail(errc::invalid_argument, "jpeg: encode row pitch exceeds int");
  if (v.data() == nullptr) return fail(errc::invalid_argument, "jpeg: encode input has no data");
  encode_plan p;
  p.src = v.data<const std::uint8_t>();
  p.width = static_cast<int>(w);
  p.height = static_cast<int>(h);
  p.pitch = static_cast<int>(pitch);
  p.quality = opts.quality;
  if (c == 1) {
    p.pixel = tj_pixel::gray;
    p.samp = tj_samp::gray;
  } else {
    if (opts.input_format == pixel_format::gray)
      return fail(errc::invalid_argument, "jpeg: input_format gray with a 3-channel input");
    p.pixel = to_tj_pixel(opts.input_format);
    p.samp = to_tj_samp(opts.subsampling);
    if (p.samp == tj_samp::unknown) return fail(errc::invalid_argument, "jpeg: unknown chroma_subsampling");
  }
  return p;
}

inline std::size_t encode_bound(const encode_plan& p) { return tj_compressor::buf_size(p.width, p.height, p.samp); }

inline result<std::size_t> run_encode(const encode_plan& p, mutable_bytes out) {
  tj_compressor* c = tj_compressor::for_this_thread();
  if (c == nullptr) return fail(errc::internal, "jpeg: tjInitCompress failed");
  std::size_t n = 0;
  const tj_status s = c->compress(p.src, p.width, p.pitch, p.height, p.pixel, out, p.samp, p.quality, &n);
  if (!s.succeeded()) return fail(errc::encode_failed, "jpeg: encode: " + s.message);
  return n;
}

// Per-thread worst-case-sized output for encodes into a buffer smaller than tjBufSize.
inline byte_buffer& encode_scratch() {
  thread_local byte_buffer b;
  return b;
}

// Encodes through the per-thread scratch and hands the bytes to sink(bytes_view).
template <class Sink>
result<std::size_t> encode_via_scratch(const encode_plan& p, Sink&& sink) {
  const std::size_t bound = encode_bound(p);
  if (bound == 0) return fail(errc::invalid_argument, "jpeg: tjBufSize rejected " + dims(p.width, p.height));
  byte_buffer& scratch = encode_scratch();
  if (scratch.size() < bound) scratch.resize(bound);
  auto n = run_encode(p, scratch);
  result<std::size_t> r = n ? sink(bytes_view(scratch.data(), *n)) : n;
  if (scratch.size() > (std::size_t{64} << 20)) byte_buffer().swap(scratch);
  return r;
}

}  // namespace detail

// Encodes a [H, W, 3] (rgb or bgr per opts.input_format) or [H, W, 1] / [H, W] (gray) u8 CPU image.
// Rows may be padded; pixels must be interleaved.
inline result<byte_buffer> encode_jpeg(const tensor_view& image, const jpeg_encode_options& opts) {
  auto p = detail::plan_encode(image, opts);
  if (!p) return p.error();
  byte_buffer out;
  auto n = detail::encode_via_scratch(*p, [&](bytes_view b) -> result<std::size_t> {
    out.assign(b.begin(), b.end());
    return b.size();
  });
  if (!n) return n.error();
  return out;
}

// Models codec::codec. Encodes into a caller's buffer; decodes with decode_options under the given limits.
class jpeg_codec {
 public:
  static constexpr codec_id id = codec_id::jpeg;
  jpeg_encode_options encode_options;
  jpeg_decode_options decode_options;

  // tjBufSize: the worst case for the input's size and the subsampling used.
  result<std::size_t> max_encoded_size(const tensor_view& v) const {
    auto p = detail::plan_encode(v, encode_options);
    if (!p) return p.error();
    const std::size_t n = detail::encode_bound(*p);
    if (n == 0) return fail(errc::invalid_argument, "jpeg: tjBufSize rejected the input size");
    return n;
  }

  // Writes straight into `out` when it holds max_encoded_size bytes (TJFLAG_NOREALLOC); a smaller buffer
  // is accepted when the actual JPEG fits (encoded via per-thread scratch), else errc::buffer_too_small.
  result<std::size_t> encode(const tensor_view& v, mutable_bytes out) const {
    auto p = detail::plan_encode(v, encode_options);
    if (!p) return p.error();
    const std::size_t bound = detail::encode_bound(*p);
    if (bound == 0) return fail(errc::invalid_argument, "jpeg: tjBufSize rejected the input size");
    if (out.size() >= bound) return detail::run_encode(*p, out);
    return detail::encode_via_scratch(*p, [&](bytes_view b) -> result<std::size_t> {
      if (b.size() > out.size())
        return fail(errc::buffer_too_small, "jpeg: encoded " + std::to_string(b.size()) + " bytes > output buffer " +
                                                std::to_string(out.size()));
      std::memcpy(out.data(), b.data(), b.size());
      return b.size();
    });
  }

  result<tensor> decode(bytes_view in, const decode_limits& limits) const {
    return decode_jpeg(in, decode_options, limits);
  }
};

static_assert(codec<jpeg_codec>);

}  // namespace jitembed::codec
