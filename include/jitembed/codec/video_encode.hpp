// Encoding a [T,H,W,3] u8 RGB tensor to H.264 (libx264, yuv420p, BT.601 limited range) in MP4, in memory.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "jitembed/codec/detail/ffmpeg.hpp"
#include "jitembed/codec/detail/ffmpeg_io.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::codec {

struct video_encode_options {
  double fps = 24.0;                // frame rate written to the stream (0 < fps <= 1000)
  int crf = 23;                     // x264 constant rate factor, 0 (lossless luma/chroma) .. 51
  std::string preset = "veryfast";  // x264 preset name
};

namespace detail {

// Checks that v is an encodable clip and returns T, H, W.
inline result<std::array<std::int64_t, 3>> check_encodable_clip(const tensor_view& v) {
  if (!v.device().is_cpu()) return fail(errc::invalid_argument, "video: encode needs a CPU tensor");
  if (v.dtype() != dtype::u8) return fail(errc::dtype_mismatch, "video: encode needs u8, got " + std::string(to_string(v.dtype())));
  if (v.rank() != 4 || v.size(3) != 3)
    return fail(errc::invalid_argument, "video: encode needs [T,H,W,3], got " + v.shape().to_string());
  if (!v.is_contiguous()) return fail(errc::invalid_argument, "video: encode needs a contiguous tensor");
  const std::int64_t t = v.size(0), h = v.size(1), w = v.size(2);
  if (t < 1 || h < 2 || w < 2 || h % 2 || w % 2 || h > 16384 || w > 16384)
    return fail(errc::invalid_argument, "video: encode needs T >= 1 and even H, W in [2, 16384] (yuv420p), got " + v.shape().to_string());
  if (t > (std::int64_t{1} << 30)) return fail(errc::invalid_argument, "video: too many frames " + std::to_string(t));
  return std::array<std::int64_t, 3>{t, h, w};
}

inline result<std::size_t> encode_video_to(const tensor_view& frames, const video_encode_options& opts, memory_sink& sink) {
  quiet_ffmpeg_logs();
  JITEMBED_ASSIGN_OR_RETURN(auto clip, check_encodable_clip(frames));
  const auto [T, H, W] = clip;
  if (!std::isfinite(opts.fps) || opts.fps <= 0 || opts.fps > 1000)
    return fail(errc::invalid_argument, "video: fps " + std::to_string(opts.fps) + " not in (0, 1000]");
  if (opts.crf < 0 || opts.crf > 51) return fail(errc::invalid_argument, "video: crf " + std::to_string(opts.crf) + " not in [0, 51]");

  // x264 reports an unknown preset on stderr before any log callback exists: check the name here.
  static constexpr std::array<std::string_view, 10> presets = {"ultrafast", "superfast", "veryfast", "faster", "fast",
                                                               "medium",    "slow",      "slower",   "veryslow", "placebo"};
  if (std::find(presets.begin(), presets.end(), opts.preset) == presets.end())
    return fail(errc::invalid_argument, "video: unknown x264 preset '" + opts.preset + "'");
  const AVCodec* enc = avcodec_find_encoder_by_name("libx264");
  if (!enc) return fail(errc::encode_failed, "video: this FFmpeg has no libx264 encoder");

  auto failed = [&](const std::string& what, int r) -> error_info {
    if (sink.overflow)
      return fail(errc::buffer_too_small, "video: the encoded clip does not fit the " + std::to_string(sink.fixed.size()) + "-byte output buffer");
    return fail(errc::encode_failed, "video: " + what + " (" + av_error_text(r) + ")");
  };

  AVFormatContext* oc_raw = nullptr;
  if (int r = avformat_alloc_output_context2(&oc_raw, nullptr, "mp4", nullptr); r < 0 || !oc_raw)
    return failed("cannot create the mp4 muxer", r);
  format_context_ptr oc(oc_raw);
  io_context_ptr io = make_sink_io(&sink);
  if (!io) return fail(errc::internal, "video: cannot allocate an AVIOContext");
  oc->pb = io.get();
  oc->flags |= AVFMT_FLAG_CUSTOM_IO;

  const AVRational rate = av_d2q(opts.fps, 1001000);
  codec_context_ptr ctx(avcodec_alloc_context3(enc));
  if (!ctx) return fail(errc::internal, "video: cannot allocate an encoder context");
  ctx->width = static_cast<int>(W);
  ctx->height = static_cast<int>(H);
  ctx->pix_fmt = AV_PIX_FMT_YUV420P;
  ctx->time_base = av_inv_q(rate);
  ctx->framerate = rate;
  ctx->colorspace = AVCOL_SPC_SMPTE170M;
  ctx->color_range = AVCOL_RANGE_MPEG;
  if (oc->oformat->flags & AVFMT_GLOBALHEADER) ctx->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  if (av_opt_set(ctx->priv_data, "preset", opts.preset.c_str(), 0) < 0 ||
      av_opt_set(ctx->priv_data, "crf", std::to_string(opts.crf).c_str(), 0) < 0)
    return fail(errc::invalid_argument, "video: libx264 rejects preset '" + opts.preset + "' or crf " + std::to_string(opts.crf));
  if (int r = avcodec_open2(ctx.get(), enc, nullptr); r < 0) return failed("cannot open libx264 (preset '" + opts.preset + "')", r);

  AVStream* st = avformat_new_stream(oc.get(), nullptr);
  if (!st) return fail(errc::internal, "video: cannot add a stream");
  if (int r = avcodec_parameters_from_context(st->codecpar, ctx.get()); r < 0) return failed("codec parameters", r);
  st->time_base = ctx->time_base;
  st->avg_frame_rate = rate;
  if (int r = avformat_write_header(oc.get(), nullptr); r < 0) return failed("cannot write the mp4 header", r);

  frame_ptr yuv(av_frame_alloc());
  packet_ptr pkt(av_packet_alloc());
  if (!yuv || !pkt) return fail(errc::internal, "video: cannot allocate frame/packet");
  yuv->format = AV_PIX_FMT_YUV420P;
  yuv->width = static_cast<int>(W);
  yuv->height = static_cast<int>(H);
  yuv->colorspace = AVCOL_SPC_SMPTE170M;
  yuv->color_range = AVCOL_RANGE_MPEG;
  if (int r = av_frame_get_buffer(yuv.get(), 0); r < 0) return failed("cannot allocate a frame", r);
  sws_context_ptr sws(sws_getContext(static_cast<int>(W), static_cast<int>(H), AV_PIX_FMT_RGB24, static_cast<int>(W),
                                     static_cast<int>(H), AV_PIX_FMT_YUV420P, SWS_BICUBIC, nullptr, nullptr, nullptr));
  if (!sws) return fail(errc::internal, "video: cannot create an RGB->YUV converter");
  sws_setColorspaceDetails(sws.get(), sws_getCoefficients(SWS_CS_ITU601), 1, sws_getCoefficients(SWS_CS_ITU601), 0, 0,
                           1 << 16, 1 << 16);

  auto write_packets = [&]() -> result<bool> {
    for (;;) {
      const int r = avcodec_receive_packet(ctx.get(), pkt.get());
      if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return true;
      if (r < 0) return failed("libx264 failed", r);
      av_packet_rescale_ts(pkt.get(), ctx->time_base, st->time_base);
      pkt->stream_index = st->index;
      const int w = av_interleaved_write_frame(oc.get(), pkt.get());  // takes the packet's reference
      if (w < 0) return failed("cannot write a packet", w);
    }
  };

  const auto* src = static_cast<const std::uint8_t*>(frames.data());
  const std::size_t frame_bytes = static_cast<std::size_t>(H * W * 3);
  // swscale's SIMD input readers load whole vectors past the end of the last row: each frame goes through
  // a padded copy, so nothing past the caller's tensor is read (and the padding is always zero).
  byte_buffer padded(frame_bytes + 256);
  for (std::int64_t t = 0; t < T; ++t) {
    if (int r = av_frame_make_writable(yuv.get()); r < 0) return failed("frame not writable", r);
    std::memcpy(padded.data(), src + static_cast<std::size_t>(t) * frame_bytes, frame_bytes);
    const std::uint8_t* planes[4] = {reinterpret_cast<const std::uint8_t*>(padded.data()), nullptr, nullptr, nullptr};
    const int strides[4] = {static_cast<int>(W * 3), 0, 0, 0};
    sws_scale(sws.get(), planes, strides, 0, static_cast<int>(H), yuv->data, yuv->linesize);
    yuv->pts = t;
    if (int r = avcodec_send_frame(ctx.get(), yuv.get()); r < 0) return failed("libx264 rejected frame " + std::to_string(t), r);
    JITEMBED_TRY(write_packets());
  }
  if (int r = avcodec_send_frame(ctx.get(), nullptr); r < 0) return failed("libx264 flush", r);
  JITEMBED_TRY(write_packets());
  if (int r = av_write_trailer(oc.get()); r < 0) return failed("cannot finish the mp4", r);
  avio_flush(io.get());
  if (sink.overflow || io->error < 0) return failed("cannot write the mp4", io->error);
  return static_cast<std::size_t>(sink.size);
}

}  // namespace detail

// Encodes [T,H,W,3] u8 RGB (contiguous, even H and W) to H.264 in MP4 (moov at the end).
inline result<byte_buffer> encode_video(const tensor_view& frames, const video_encode_options& opts) {
  byte_buffer out;
  detail::memory_sink sink;
  sink.grow = &out;
  JITEMBED_ASSIGN_OR_RETURN(auto n, detail::encode_video_to(frames, opts, sink));
  out.resize(n);
  return out;
}

// Same, into the caller's buffer; errc::buffer_too_small when the clip does not fit. Returns bytes written.
inline result<std::size_t> encode_video(const tensor_view& frames, const video_encode_options& opts, mutable_bytes out) {
  detail::memory_sink sink;
  sink.fixed = out;
  return detail::encode_video_to(frames, opts, sink);
}

}  // namespace jitembed::codec
