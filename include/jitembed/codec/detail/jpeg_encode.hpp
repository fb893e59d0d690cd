// Internals of the JPEG encoder (codec/jpeg.hpp): input checks into an encode plan, the worst-case bound,
// and encoding straight into a caller's buffer or through a per-thread scratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "jitembed/codec/detail/jpeg_decode.hpp"
#include "jitembed/codec/detail/turbojpeg_api.hpp"
#include "jitembed/codec/jpeg_options.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::codec::detail {

struct encode_plan {
  const std::uint8_t* src = nullptr;
  int width = 0, height = 0, pitch = 0;
  tj_pixel pixel = tj_pixel::rgb;
  tj_samp samp = tj_samp::s420;
  int quality = 90;
};

inline result<encode_plan> plan_encode(const tensor_view& v, const jpeg_encode_options& opts) {
  if (!v.device().is_cpu()) return fail(errc::invalid_argument, "jpeg: encode input is not on the CPU");
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

}  // namespace jitembed::codec::detail
