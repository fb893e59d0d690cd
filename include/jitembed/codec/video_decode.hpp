// Probing and decoding untrusted video bytes (MP4 / WebM / MKV by default) from memory with FFmpeg into a
// [T,H,W,3] u8 RGB tensor, under a container/codec whitelist and decode_limits.
// The options are in codec/video_options.hpp, the internals in codec/detail/video_decoder.hpp.
#pragma once

#include <cstdint>

#include "jitembed/codec/detail/video_decoder.hpp"
#include "jitembed/codec/video_options.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::codec {

// Reads the container header of untrusted bytes and describes its video stream (nothing is decoded).
// Errors: limit_exceeded (size > max_record_bytes), bad_magic (not a known container), unsupported_format /
// unsupported_codec (not in the policy), invalid_argument (a policy naming a demuxer that opens files),
// truncated / decode_failed (unreadable header), not_found (no video stream).
inline result<video_info> probe_video(bytes_view data, const decode_limits& limits, const video_policy& policy = {}) {
  JITEMBED_ASSIGN_OR_RETURN(auto in, detail::open_video_input(data, limits, policy));
  return in.info;
}

// The shape [T,H,W,3] that decode_video(data, opts, limits, policy) returns, with the same checks and
// errors, without decoding a frame. When the container has no sample count (WebM/MKV, uniform selection)
// the packets are demuxed once to count them.
inline result<shape> video_output_shape(bytes_view data, const video_decode_options& opts, const decode_limits& limits,
                                        const video_policy& policy = {}) {
  JITEMBED_ASSIGN_OR_RETURN(auto plan, detail::plan_video_decode(data, opts, limits, policy));
  return plan.out_shape;
}

// Decodes the frames chosen by `opts` (see video_decode_options) into a new [T,H,W,3] u8 RGB tensor.
// Every limit is checked before a decoder is opened or the output allocated: the stream's frame size and
// the output size against max_image_pixels, T against max_video_frames, T*H*W*3 against
// max_decoded_bytes and max_elements (errc::limit_exceeded). The decoder itself refuses frames larger
// than max_image_pixels (AVCodecContext::max_pixels), whatever the bitstream says later.
inline result<tensor> decode_video(bytes_view data, const video_decode_options& opts, const decode_limits& limits,
                                   const video_policy& policy = {}) {
  JITEMBED_ASSIGN_OR_RETURN(auto plan, detail::plan_video_decode(data, opts, limits, policy));
  auto storage = allocate_shared_aligned(plan.nbytes);
  tensor t = tensor::wrap(storage, tensor_view(storage.get(), dtype::u8, plan.out_shape));
  JITEMBED_TRY(detail::run_video_decode(plan, data, opts, limits, reinterpret_cast<std::uint8_t*>(storage.get())));
  return t;
}

// Like decode_video, but into the caller's buffer (e.g. a reused, pinned staging tensor): `out` must be a
// contiguous u8 CPU tensor of exactly the shape decode_video would return (see video_output_shape), else
// errc::invalid_argument before anything is decoded. Nothing is written outside out's nbytes. On failure
// the contents of `out` are unspecified.
inline result<void> decode_video_into(bytes_view data, const video_decode_options& opts, const decode_limits& limits,
                                      const tensor_view& out, const video_policy& policy = {}) {
  JITEMBED_TRY(detail::check_video_out_view(out));
  JITEMBED_ASSIGN_OR_RETURN(auto plan, detail::plan_video_decode(data, opts, limits, policy));
  if (out.shape() != plan.out_shape)
    return fail(errc::invalid_argument, "video: output tensor shape " + out.shape().to_string() + " != decoded shape " +
                                            plan.out_shape.to_string());
  if (out.data() == nullptr) return fail(errc::invalid_argument, "video: output tensor has no data");
  return detail::run_video_decode(plan, data, opts, limits, static_cast<std::uint8_t*>(out.data()));
}

}  // namespace jitembed::codec
