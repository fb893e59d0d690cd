// JPEG codec on TurboJPEG: probe, decode (DCT-scaled to a target size, exact resize, crop) under
// decode_limits, encode, batch decode on a thread pool, and jpeg_codec modelling codec::codec.
// The options are in codec/jpeg_options.hpp, the internals in codec/detail/jpeg_decode.hpp and jpeg_encode.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "jitembed/codec/codec.hpp"
#include "jitembed/codec/detail/jpeg_decode.hpp"
#include "jitembed/codec/detail/jpeg_encode.hpp"
#include "jitembed/codec/jpeg_options.hpp"
#include "jitembed/codec/jpeg_resize.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/core/thread_pool.hpp"

namespace jitembed::codec {

// Header only: size, subsampling, colour space. No pixel memory is allocated. Header warnings are
// tolerated here (decode with strict = true reports them).
inline result<jpeg_info> probe_jpeg(bytes_view jpeg) {
  JITEMBED_ASSIGN_OR_RETURN(auto h, detail::read_header(jpeg, /*strict=*/false));
  jpeg_info info;
  info.width = h.width;
  info.height = h.height;
  switch (h.samp) {
    case detail::tj_samp::s444: info.subsampling = chroma_subsampling::s444; break;
    case detail::tj_samp::s422: info.subsampling = chroma_subsampling::s422; break;
    case detail::tj_samp::s420: info.subsampling = chroma_subsampling::s420; break;
    case detail::tj_samp::gray: info.subsampling = chroma_subsampling::gray; break;
    case detail::tj_samp::s440: info.subsampling = chroma_subsampling::s440; break;
    case detail::tj_samp::s411: info.subsampling = chroma_subsampling::s411; break;
    case detail::tj_samp::unknown: break;
  }
  switch (h.colorspace) {
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
  JITEMBED_ASSIGN_OR_RETURN(auto p, detail::plan_decode(jpeg, opts, limits));
  return p.output_shape();
}

// Decodes untrusted bytes to a new [H, W, C] u8 tensor (C = 3 for rgb/bgr, 1 for gray).
inline result<tensor> decode_jpeg(bytes_view jpeg, const jpeg_decode_options& opts, const decode_limits& limits) {
  JITEMBED_ASSIGN_OR_RETURN(auto p, detail::plan_decode(jpeg, opts, limits));
  tensor out = tensor::empty(p.output_shape(), dtype::u8);
  const auto pitch = static_cast<std::ptrdiff_t>(p.window.width) * p.channels;
  JITEMBED_TRY(detail::run_decode(jpeg, p, opts, out.data<std::uint8_t>(), pitch));
  return out;
}

// Decodes into a caller's buffer (batch / pinned staging): `out` is u8 on the CPU with exactly the output
// shape ([H, W, C], or [H, W] for gray); rows may be padded (stride[0] >= W * C), pixels are interleaved.
inline result<void> decode_jpeg_into(bytes_view jpeg, const jpeg_decode_options& opts, const decode_limits& limits,
                                     const tensor_view& out) {
  JITEMBED_ASSIGN_OR_RETURN(auto p, detail::plan_decode(jpeg, opts, limits));
  JITEMBED_ASSIGN_OR_RETURN(auto pitch, detail::check_output_view(out, p));
  return detail::run_decode(jpeg, p, opts, out.data<std::uint8_t>(), pitch);
}

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

// Encodes a [H, W, 3] (rgb or bgr per opts.input_format) or [H, W, 1] / [H, W] (gray) u8 CPU image.
// Rows may be padded; pixels must be interleaved.
inline result<byte_buffer> encode_jpeg(const tensor_view& image, const jpeg_encode_options& opts) {
  JITEMBED_ASSIGN_OR_RETURN(auto p, detail::plan_encode(image, opts));
  byte_buffer out;
  JITEMBED_TRY(detail::encode_via_scratch(p, [&](bytes_view b) -> result<std::size_t> {
    out.assign(b.begin(), b.end());
    return b.size();
  }));
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
    JITEMBED_ASSIGN_OR_RETURN(auto p, detail::plan_encode(v, encode_options));
    const std::size_t n = detail::encode_bound(p);
    if (n == 0) return fail(errc::invalid_argument, "jpeg: tjBufSize rejected the input size");
    return n;
  }

  // Writes straight into `out` when it holds max_encoded_size bytes (TJFLAG_NOREALLOC); a smaller buffer
  // is accepted when the actual JPEG fits (encoded via per-thread scratch), else errc::buffer_too_small.
  result<std::size_t> encode(const tensor_view& v, mutable_bytes out) const {
    JITEMBED_ASSIGN_OR_RETURN(auto p, detail::plan_encode(v, encode_options));
    const std::size_t bound = detail::encode_bound(p);
    if (bound == 0) return fail(errc::invalid_argument, "jpeg: tjBufSize rejected the input size");
    if (out.size() >= bound) return detail::run_encode(p, out);
    return detail::encode_via_scratch(p, [&](bytes_view b) -> result<std::size_t> {
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
