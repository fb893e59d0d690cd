// The codec concept: encode a tensor into a caller's buffer, decode untrusted bytes under decode_limits.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::codec {

// Wire-stable codec ids (the sample format stores them as one byte).
enum class codec_id : std::uint8_t {
  raw = 0,   // payload stored as is
  zstd = 1,  // zstd frame, optionally byte-shuffled (element size stored beside it by the format)
  jpeg = 2,  // baseline/progressive JPEG (TurboJPEG)
  video = 3, // a whitelisted container (MP4/WebM/MKV) decoded with FFmpeg
  text = 4,  // UTF-8 validated, zstd-compressed
};

constexpr std::string_view to_string(codec_id c) noexcept {
  switch (c) {
    case codec_id::raw: return "raw";
    case codec_id::zstd: return "zstd";
    case codec_id::jpeg: return "jpeg";
    case codec_id::video: return "video";
    case codec_id::text: return "text";
  }
  return "unknown";
}

// A codec turns a tensor into bytes and back.
//
// Requirements on C (a configured codec object, cheap to copy; options live in its members):
// - `C::id`: its codec_id.
// - `c.max_encoded_size(v)`: an upper bound of the bytes encode(v, out) may write, or an error if v is
//   not encodable (wrong dtype/rank).
// - `c.encode(v, out)`: encodes v into the caller's buffer `out` and returns the bytes written;
//   errc::buffer_too_small when out is shorter than needed. It never allocates the output.
// - `c.decode(in, limits)`: decodes untrusted bytes into a new tensor; every size derived from `in`
//   (declared dimensions, frame sizes, element counts) is checked against `limits` before allocating.
//   Errors are specific errc values, never crashes.
template <class C>
concept codec = requires(const C& c, const tensor_view& v, mutable_bytes out, bytes_view in, const decode_limits& lim) {
  { C::id } -> std::convertible_to<codec_id>;
  { c.max_encoded_size(v) } -> std::same_as<result<std::size_t>>;
  { c.encode(v, out) } -> std::same_as<result<std::size_t>>;
  { c.decode(in, lim) } -> std::same_as<result<tensor>>;
};

// Encodes into a fresh byte_buffer sized by max_encoded_size, then trims it.
template <codec C>
result<byte_buffer> encode_to_buffer(const C& c, const tensor_view& v) {
  JITEMBED_ASSIGN_OR_RETURN(auto bound, c.max_encoded_size(v));
  byte_buffer out(bound);
  JITEMBED_ASSIGN_OR_RETURN(auto n, c.encode(v, out));
  out.resize(n);
  return out;
}

}  // namespace jitembed::codec
