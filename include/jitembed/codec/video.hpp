// The video codec: H.264/MP4 encoding of [T,H,W,3] u8 RGB clips and policy-checked, limit-checked FFmpeg
// decoding of untrusted MP4/WebM/MKV bytes (probe_video, decode_video, encode_video, video_codec).
#pragma once

#include <cstddef>

#include "jitembed/codec/codec.hpp"
#include "jitembed/codec/video_decode.hpp"
#include "jitembed/codec/video_encode.hpp"

namespace jitembed::codec {

// Models codec::codec. encode: H.264 in MP4 per encode_options; decode: decode_video per decode_options
// under `policy`.
class video_codec {
 public:
  static constexpr codec_id id = codec_id::video;

  video_encode_options encode_options;
  video_decode_options decode_options;
  video_policy policy;

  // The raw RGB size plus container headroom: x264 never needs more than the raw yuv420p size
  // (half the RGB size) plus per-frame and header overhead.
  result<std::size_t> max_encoded_size(const tensor_view& v) const {
    JITEMBED_ASSIGN_OR_RETURN(auto clip, detail::check_encodable_clip(v));
    const auto t = static_cast<std::size_t>(clip[0]);
    return v.nbytes() + t * 1024 + (std::size_t{1} << 16);
  }

  result<std::size_t> encode(const tensor_view& v, mutable_bytes out) const { return encode_video(v, encode_options, out); }

  result<tensor> decode(bytes_view in, const decode_limits& limits) const {
    return decode_video(in, decode_options, limits, policy);
  }
};

static_assert(codec<video_codec>);

}  // namespace jitembed::codec
