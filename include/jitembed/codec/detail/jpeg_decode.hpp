// Internals of the JPEG decoder (codec/jpeg.hpp): TurboJPEG enum mapping, truncation detection, header
// checks, the decode plan (every size checked against decode_limits before allocating), the per-thread
// scratch, the decode itself, and the pool runner of the batch decoders.
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

#include "jitembed/codec/detail/turbojpeg_api.hpp"
#include "jitembed/codec/jpeg_options.hpp"
#include "jitembed/codec/jpeg_resize.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/core/thread_pool.hpp"

namespace jitembed::codec::detail {


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
  JITEMBED_ASSIGN_OR_RETURN(auto hr, read_header(jpeg, opts.strict));
  decode_plan p;
  p.header = hr;
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
  if (!out.device().is_cpu()) return fail(errc::invalid_argument, "jpeg: output view is not on the CPU");
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

}  // namespace jitembed::codec::detail
