// Internals of the video decoder (codec/video_decode.hpp): the demuxer/codec whitelist, opening untrusted
// bytes through an in-memory AVIOContext, frame selection, the decode plan (every size checked against the
// limits before a decoder is opened), and the decode loop with swscale conversion.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/codec/detail/ffmpeg.hpp"
#include "jitembed/codec/detail/ffmpeg_io.hpp"
#include "jitembed/codec/video_options.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::codec::detail {

// Demuxers (FFmpeg 5.x names) that open other files, URLs or devices; never allowed for untrusted input.
inline constexpr std::array<std::string_view, 31> kDemuxersOpeningResources = {
    "hls",    "applehttp", "concat", "image2",  "dash",    "imf",     "sdp",          "rtsp",
    "rtp",    "lavfi",     "avisynth", "vapoursynth", "webm_dash_manifest", "libcdio", "v4l2",
    "video4linux2", "x11grab", "xcbgrab", "fbdev", "kmsgrab", "alsa", "pulse", "oss", "jack", "openal",
    "dshow",  "gdigrab",   "vfwcap", "avfoundation", "decklink", "android_camera"};

// Calls fn(component) for each comma-separated component of an FFmpeg name list.
template <class F>
void for_each_ffmpeg_name(std::string_view list, F&& fn) {
  while (!list.empty()) {
    const auto comma = list.find(',');
    fn(list.substr(0, comma));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

inline bool name_listed(const std::vector<std::string>& list, std::string_view name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

inline std::string join_names(const std::vector<std::string>& list, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (i) out += sep;
    out += list[i];
  }
  return out;
}

inline result<bool> check_video_policy(const video_policy& policy) {
  for (const auto& f : policy.formats) {
    bool bad = false;
    std::string_view which;
    for_each_ffmpeg_name(f, [&](std::string_view n) {
      if (std::find(kDemuxersOpeningResources.begin(), kDemuxersOpeningResources.end(), n) !=
          kDemuxersOpeningResources.end()) {
        bad = true;
        which = n;
      }
    });
    if (bad)
      return fail(errc::invalid_argument, "video_policy: format '" + f + "' is refused: demuxer '" +
                                              std::string(which) + "' opens other files or URLs");
  }
  return true;
}

inline double finite_positive_or_zero(double v) { return std::isfinite(v) && v > 0 ? v : 0.0; }

inline double positive_rational_or_zero(AVRational r) {
  if (r.num <= 0 || r.den <= 0) return 0.0;
  const double v = av_q2d(r);
  return v <= 1e6 ? v : 0.0;  // nonsense rates (a corrupt header) are treated as unknown
}

// Whether the container's own top-level sizes say it continues past the end of `data`: ISO BMFF boxes
// (MP4) or the EBML Segment (Matroska/WebM). Used only to tell truncated from corrupt after a failure.
inline bool declares_more_than(bytes_view data) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(data.data());
  const std::uint64_t n = data.size();
  auto be = [&](std::uint64_t at, int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | p[at + static_cast<std::uint64_t>(i)];
    return v;
  };
  if (n >= 8 && be(4, 4) == 0x66747970) {  // "ftyp": walk the top-level boxes
    std::uint64_t pos = 0;
    while (pos < n) {
      if (n - pos < 8) return true;  // a partial box header
      std::uint64_t size = be(pos, 4), header = 8;
      if (size == 1) {
        if (n - pos < 16) return true;
        size = be(pos + 8, 8);
        header = 16;
      } else if (size == 0) {
        return false;  // extends to the end by definition
      }
      if (size < header) return false;  // corrupt, not truncated
      if (size > n - pos) return true;
      pos += size;
    }
    return false;
  }
  // EBML: an element is ID (vint, marker kept) + size (vint, marker stripped; all ones = unknown).
  struct vint_result {
    std::uint64_t value = 0;
    bool ok = false, unknown = false;
  };
  auto vint = [&](std::uint64_t& at, bool strip_marker) {
    vint_result r;
    if (at >= n || p[at] == 0) return r;
    int len = 1;
    while (!(p[at] & (0x80 >> (len - 1)))) ++len;
    if (n - at < static_cast<std::uint64_t>(len)) return r;
    std::uint64_t v = strip_marker ? (p[at] & ((0x80u >> (len - 1)) - 1)) : p[at];
    for (int i = 1; i < len; ++i) v = (v << 8) | p[at + static_cast<std::uint64_t>(i)];
    r.unknown = strip_marker && v == (std::uint64_t{1} << (7 * len)) - 1;
    r.value = v;
    r.ok = true;
    at += static_cast<std::uint64_t>(len);
    return r;
  };
  std::uint64_t at = 0;
  for (int element = 0; element < 2; ++element) {  // the EBML header, then the Segment
    const auto id = vint(at, false);
    const auto size = vint(at, true);
    if (!id.ok || !size.ok) return element == 1 && at >= n;  // data ends inside the Segment's header
    if (element == 0 && id.value != 0x1A45DFA3) return false;
    if (size.unknown) return false;
    if (size.value > n - at) return true;
    if (element == 1) return false;
    at += size.value;
  }
  return false;
}

// A demuxer opened on untrusted memory, with its video stream chosen and checked against the policy.
// Member order matters: the format context closes before the AVIOContext it reads, which goes before
// the source it reads from.
struct video_input {
  video_input() = default;
  video_input(video_input&&) noexcept = default;
  video_input& operator=(video_input&& o) noexcept {
    if (this != &o) {
      close();
      src = std::move(o.src);
      io = std::move(o.io);
      fmt = std::move(o.fmt);
      stream = o.stream;
      decoder = o.decoder;
      info = std::move(o.info);
    }
    return *this;
  }
  ~video_input() { close(); }
  void close() noexcept {
    fmt.reset();
    io.reset();
    src.reset();
  }

  std::unique_ptr<memory_source> src;
  io_context_ptr io;
  input_context_ptr fmt;
  AVStream* stream = nullptr;
  const AVCodec* decoder = nullptr;
  video_info info;
};

inline result<video_input> open_video_input(bytes_view data, const decode_limits& limits, const video_policy& policy) {
  quiet_ffmpeg_logs();
  if (data.size() > limits.max_record_bytes)
    return fail(errc::limit_exceeded, "video: " + std::to_string(data.size()) + " bytes > max_record_bytes " +
                                          std::to_string(limits.max_record_bytes));
  if (data.empty()) return fail(errc::truncated, "video: empty input");
  JITEMBED_TRY(check_video_policy(policy));

  video_input in;
  in.src = std::make_unique<memory_source>();
  in.src->data = reinterpret_cast<const std::uint8_t*>(data.data());
  in.src->size = static_cast<std::int64_t>(data.size());
  in.io = make_source_io(in.src.get());
  if (!in.io) return fail(errc::internal, "video: cannot allocate an AVIOContext");

  // Identify the container ourselves so a refused one is named in the error and never opened.
  const AVInputFormat* iformat = nullptr;
  const int score = av_probe_input_buffer2(in.io.get(), &iformat, "", nullptr, 0, 0);
  if (score < 0 || !iformat)
    return fail(errc::bad_magic, "video: unrecognised container (" + av_error_text(score < 0 ? score : AVERROR_INVALIDDATA) + ")");
  in.src->reached_end = false;  // probing may read a small file to its end; that is not truncation
  if (!name_listed(policy.formats, iformat->name))
    return fail(errc::unsupported_format, std::string("video: container '") + iformat->name +
                                              "' is not allowed by the policy (allowed: " + join_names(policy.formats, "; ") + ")");

  format_context_ptr ctx(avformat_alloc_context());
  if (!ctx) return fail(errc::internal, "video: cannot allocate an AVFormatContext");
  ctx->pb = in.io.get();
  ctx->flags |= AVFMT_FLAG_CUSTOM_IO;
  ctx->io_open = &deny_io_open;  // no nested opens: playlists, external references
  ctx->protocol_whitelist = av_strdup("");
  ctx->format_whitelist = av_strdup(join_names(policy.formats, ",").c_str());
  ctx->max_streams = 64;
  if (!ctx->protocol_whitelist || !ctx->format_whitelist) return fail(errc::internal, "video: out of memory");
  dictionary opts;
  opts.set("enable_drefs", "0");       // mov: never follow data references to other files
  opts.set("use_absolute_path", "0");  // mov
  AVFormatContext* raw = ctx.release();  // avformat_open_input frees it on failure
  const int r = avformat_open_input(&raw, nullptr, iformat, opts.get());
  if (r < 0) {
    if (in.src->reached_end || declares_more_than(data))
      return fail(errc::truncated, std::string("video: ") + iformat->name + " header is cut short: it needs more than " +
                                       std::to_string(data.size()) + " bytes (" + av_error_text(r) + ")");
    return fail(errc::decode_failed, std::string("video: cannot read the ") + iformat->name + " header (" + av_error_text(r) + ")");
  }
  in.fmt.reset(raw);

  const int si = av_find_best_stream(raw, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (si < 0 || static_cast<unsigned>(si) >= raw->nb_streams)
    return fail(errc::not_found, std::string("video: the ") + iformat->name + " data has no video stream");
  for (unsigned i = 0; i < raw->nb_streams; ++i)
    if (static_cast<int>(i) != si) raw->streams[i]->discard = AVDISCARD_ALL;
  in.stream = raw->streams[si];
  const AVCodecParameters* par = in.stream->codecpar;

  const char* codec_name = avcodec_get_name(par->codec_id);
  if (!name_listed(policy.codecs, codec_name))
    return fail(errc::unsupported_codec, std::string("video: codec '") + codec_name +
                                             "' is not allowed by the policy (allowed: " + join_names(policy.codecs, ", ") + ")");
  in.decoder = avcodec_find_decoder(par->codec_id);
  if (!in.decoder) return fail(errc::unsupported_codec, std::string("video: this FFmpeg has no decoder for '") + codec_name + "'");
  if (par->width <= 0 || par->height <= 0) {
    // Some sample descriptions (MPEG-4 part 2 in MP4) leave the size to the bitstream: let FFmpeg read
    // the first frames, with its decoders held to the pixel limit and one thread.
    std::vector<AVDictionary*> stream_opts(raw->nb_streams, nullptr);
    const std::string max_px = std::to_string(limits.max_image_pixels);
    for (auto& d : stream_opts) {
      av_dict_set(&d, "max_pixels", max_px.c_str(), 0);
      av_dict_set(&d, "threads", "1", 0);
    }
    const int fr = avformat_find_stream_info(raw, stream_opts.data());
    for (auto& d : stream_opts) av_dict_free(&d);
    if (fr < 0 && in.src->reached_end)
      return fail(errc::truncated, "video: data ends before the stream parameters (" + av_error_text(fr) + ")");
  }
  if (par->width <= 0 || par->height <= 0)
    return fail(errc::corrupt_data, "video: stream " + std::to_string(si) + " declares no frame size (" +
                                        std::to_string(par->width) + "x" + std::to_string(par->height) + ")");

  video_info& info = in.info;
  info.container = iformat->name;
  info.codec = codec_name;
  info.width = par->width;
  info.height = par->height;
  info.fps = positive_rational_or_zero(in.stream->avg_frame_rate);
  if (info.fps == 0) info.fps = positive_rational_or_zero(in.stream->r_frame_rate);
  const double tb = positive_rational_or_zero(in.stream->time_base);
  if (in.stream->duration != AV_NOPTS_VALUE && in.stream->duration > 0 && tb > 0)
    info.duration_seconds = finite_positive_or_zero(static_cast<double>(in.stream->duration) * tb);
  if (info.duration_seconds == 0 && raw->duration != AV_NOPTS_VALUE && raw->duration > 0)
    info.duration_seconds = finite_positive_or_zero(static_cast<double>(raw->duration) / AV_TIME_BASE);
  if (in.stream->nb_frames > 0) {
    info.frame_count = in.stream->nb_frames;
    info.frame_count_exact = true;
  } else if (info.duration_seconds > 0 && info.fps > 0) {
    info.frame_count = static_cast<std::int64_t>(std::llround(std::min(info.duration_seconds * info.fps, 1e15)));
  }
  return in;
}

// Counts the packets of the chosen stream by demuxing to the end (no decoding). Consumes `in`.
inline result<std::int64_t> count_video_packets(video_input& in, std::int64_t max_packets) {
  packet_ptr pkt(av_packet_alloc());
  if (!pkt) return fail(errc::internal, "video: cannot allocate a packet");
  std::int64_t n = 0;
  for (std::int64_t reads = 0;; ++reads) {
    if (reads > max_packets)
      return fail(errc::corrupt_data, "video: more than " + std::to_string(max_packets) + " packets in " +
                                          std::to_string(in.src->size) + " bytes");
    const int r = av_read_frame(in.fmt.get(), pkt.get());
    if (r == AVERROR_EOF) break;
    if (r < 0) {
      if (in.src->reached_end)
        return fail(errc::truncated, "video: data ends inside the stream after " + std::to_string(n) + " packets (" + av_error_text(r) + ")");
      return fail(errc::decode_failed, "video: demuxing failed after " + std::to_string(n) + " packets (" + av_error_text(r) + ")");
    }
    if (pkt->stream_index == in.stream->index) ++n;
    av_packet_unref(pkt.get());
  }
  // A clean end of the packets while the container's sizes promise more bytes: a cut-off file, whose
  // frame count (and so the uniform stride) would be wrong.
  if (declares_more_than(bytes_view(reinterpret_cast<const std::byte*>(in.src->data), static_cast<std::size_t>(in.src->size))))
    return fail(errc::truncated, "video: data ends after " + std::to_string(n) + " packets but the container declares more than " +
                                     std::to_string(in.src->size) + " bytes");
  return n;
}

// Converts decoded frames to packed RGB24 at a fixed output size, reusing one SwsContext.
class rgb_converter {
 public:
  rgb_converter(int out_w, int out_h) : out_w_(out_w), out_h_(out_h) {}
  rgb_converter(const rgb_converter&) = delete;
  rgb_converter& operator=(const rgb_converter&) = delete;
  ~rgb_converter() { sws_freeContext(sws_); }

  result<bool> convert(const AVFrame* f, std::uint8_t* dst) {
    const auto fmt = static_cast<AVPixelFormat>(f->format);
    if (f->width <= 0 || f->height <= 0 || fmt == AV_PIX_FMT_NONE)
      return fail(errc::decode_failed, "video: decoder produced an empty frame");
    SwsContext* c = sws_getCachedContext(sws_, f->width, f->height, fmt, out_w_, out_h_, AV_PIX_FMT_RGB24,
                                         SWS_BICUBIC, nullptr, nullptr, nullptr);
    sws_ = c;  // the old context is freed or reused by sws_getCachedContext
    if (!c)
      return fail(errc::decode_failed, std::string("video: cannot convert ") + (av_get_pix_fmt_name(fmt) ? av_get_pix_fmt_name(fmt) : "?") +
                                           " " + std::to_string(f->width) + "x" + std::to_string(f->height) + " to RGB");
    // The frame's matrix and range, as FFmpeg's scale filter applies them (tables rebuilt only on change).
    if (c != colorspace_for_ || f->colorspace != colorspace_ || f->color_range != range_) {
      sws_setColorspaceDetails(c, sws_getCoefficients(f->colorspace), f->color_range == AVCOL_RANGE_JPEG ? 1 : 0,
                               sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
      colorspace_for_ = c;
      colorspace_ = f->colorspace;
      range_ = f->color_range;
    }
    std::uint8_t* planes[4] = {dst, nullptr, nullptr, nullptr};
    const int strides[4] = {3 * out_w_, 0, 0, 0};
    const int rows = sws_scale(c, f->data, f->linesize, 0, f->height, planes, strides);
    if (rows != out_h_) return fail(errc::decode_failed, "video: swscale wrote " + std::to_string(rows) + " rows, expected " + std::to_string(out_h_));
    return true;
  }

 private:
  int out_w_, out_h_;
  SwsContext* sws_ = nullptr;
  const SwsContext* colorspace_for_ = nullptr;
  AVColorSpace colorspace_ = AVCOL_SPC_UNSPECIFIED;
  AVColorRange range_ = AVCOL_RANGE_UNSPECIFIED;
};

inline std::string wh_string(std::int64_t w, std::int64_t h) { return std::to_string(w) + "x" + std::to_string(h); }

// What a decode will produce, settled (and every limit checked) before a decoder is opened or any output
// written: the open input positioned at its first packet, the output size, and the frame selection.
struct video_decode_plan {
  video_input in;
  int out_w = 0, out_h = 0;
  std::size_t frames = 0;            // T
  bool by_time = false;
  std::vector<std::int64_t> index;   // index mode: frame index of each slot
  std::int64_t packet_budget = 0;    // bounds the packets read, whatever the data says
  shape out_shape;                   // [T, out_h, out_w, 3]
  std::size_t nbytes = 0;            // T * out_h * out_w * 3
};

inline result<video_decode_plan> plan_video_decode(bytes_view data, const video_decode_options& opts, const decode_limits& limits,
                                                   const video_policy& policy) {
  if (opts.num_frames < 0) return fail(errc::invalid_argument, "video: num_frames " + std::to_string(opts.num_frames) + " < 0");
  if (opts.frame_stride < 0) return fail(errc::invalid_argument, "video: frame_stride " + std::to_string(opts.frame_stride) + " < 0");
  if (opts.frame_stride > 0 && opts.num_frames == 0 && opts.timestamps.empty())
    return fail(errc::invalid_argument, "video: frame_stride needs num_frames >= 1");
  if (opts.width < 0 || opts.height < 0 || (opts.width == 0) != (opts.height == 0))
    return fail(errc::invalid_argument, "video: output size " + wh_string(opts.width, opts.height) + " (give both or neither)");
  if (opts.threads < 0) return fail(errc::invalid_argument, "video: threads " + std::to_string(opts.threads) + " < 0");
  for (std::size_t i = 0; i < opts.timestamps.size(); ++i)
    if (!std::isfinite(opts.timestamps[i]) || opts.timestamps[i] < 0)
      return fail(errc::invalid_argument, "video: timestamps[" + std::to_string(i) + "] is negative or not finite");
  if (opts.timestamps.size() > limits.max_video_frames)
    return fail(errc::limit_exceeded, "video: " + std::to_string(opts.timestamps.size()) + " timestamps > max_video_frames " +
                                          std::to_string(limits.max_video_frames));
  if (opts.timestamps.empty() && static_cast<std::uint64_t>(opts.num_frames) > limits.max_video_frames)
    return fail(errc::limit_exceeded, "video: num_frames " + std::to_string(opts.num_frames) + " > max_video_frames " +
                                          std::to_string(limits.max_video_frames));

  video_decode_plan plan;
  JITEMBED_ASSIGN_OR_RETURN(auto in, open_video_input(data, limits, policy));
  const video_info info = in.info;
  const auto native_px = static_cast<std::uint64_t>(info.width) * static_cast<std::uint64_t>(info.height);
  if (native_px > limits.max_image_pixels)
    return fail(errc::limit_exceeded, "video: " + wh_string(info.width, info.height) + " = " + std::to_string(native_px) +
                                          " pixels > max_image_pixels " + std::to_string(limits.max_image_pixels));
  const int out_w = opts.width ? opts.width : info.width;
  const int out_h = opts.height ? opts.height : info.height;
  const auto out_px = static_cast<std::uint64_t>(out_w) * static_cast<std::uint64_t>(out_h);
  if (out_px > limits.max_image_pixels)
    return fail(errc::limit_exceeded, "video: output " + wh_string(out_w, out_h) + " = " + std::to_string(out_px) +
                                          " pixels > max_image_pixels " + std::to_string(limits.max_image_pixels));

  const auto data_budget = static_cast<std::int64_t>(data.size()) + 4096;
  std::size_t T = 0;
  plan.by_time = !opts.timestamps.empty();
  if (plan.by_time) {
    T = opts.timestamps.size();
    const double max_t = *std::max_element(opts.timestamps.begin(), opts.timestamps.end());
    plan.packet_budget = data_budget;
    if (info.fps > 0)
      plan.packet_budget = std::min<std::int64_t>(plan.packet_budget, static_cast<std::int64_t>(std::min(4.0 * (max_t * info.fps + 1), 1e15)) + 1024);
  } else {
    std::int64_t n = info.frame_count;
    if (!info.frame_count_exact) {
      JITEMBED_ASSIGN_OR_RETURN(n, count_video_packets(in, data_budget));
      JITEMBED_ASSIGN_OR_RETURN(in, open_video_input(data, limits, policy));  // again from the first packet
    }
    if (n <= 0) return fail(errc::decode_failed, "video: the " + info.container + " stream has no frames");
    if (n > (std::int64_t{1} << 31))
      return fail(errc::corrupt_data, "video: declared frame count " + std::to_string(n) + " > 2^31");
    if (opts.num_frames == 0 && static_cast<std::uint64_t>(n) > limits.max_video_frames)
      return fail(errc::limit_exceeded, "video: all " + std::to_string(n) + " frames > max_video_frames " +
                                            std::to_string(limits.max_video_frames));
    T = opts.num_frames == 0 ? static_cast<std::size_t>(n) : static_cast<std::size_t>(opts.num_frames);
    plan.index.resize(T);
    for (std::size_t i = 0; i < T; ++i)  // round(i * (n-1) / (T-1)), half up, in integers; or i * stride
      plan.index[i] = opts.frame_stride > 0
                          ? std::min<std::int64_t>(static_cast<std::int64_t>(i) * opts.frame_stride, n - 1)
                          : T == 1 ? 0 : static_cast<std::int64_t>((2 * static_cast<std::uint64_t>(i) * static_cast<std::uint64_t>(n - 1) + (T - 1)) / (2 * (T - 1)));
    if (T) plan.packet_budget = 2 * (plan.index.back() + 1) + 256;
  }
  if (T == 0) return fail(errc::invalid_argument, "video: no frames requested");
  const std::array<std::int64_t, 4> out_dims = {static_cast<std::int64_t>(T), out_h, out_w, 3};
  JITEMBED_ASSIGN_OR_RETURN(auto nbytes, checked_numel(out_dims));
  if (nbytes > limits.max_decoded_bytes || nbytes > limits.max_elements)
    return fail(errc::limit_exceeded, "video: output [" + std::to_string(T) + "," + std::to_string(out_h) + "," + std::to_string(out_w) +
                                          ",3] = " + std::to_string(nbytes) + " bytes > max_decoded_bytes " +
                                          std::to_string(limits.max_decoded_bytes) + " or max_elements " + std::to_string(limits.max_elements));
  plan.in = std::move(in);
  plan.out_w = out_w;
  plan.out_h = out_h;
  plan.frames = T;
  plan.out_shape = shape{out_dims[0], out_dims[1], out_dims[2], 3};
  plan.nbytes = static_cast<std::size_t>(nbytes);
  return plan;
}

// Checks that `out` can take the plan's output: a contiguous u8 CPU tensor of exactly its shape.
inline result<void> check_video_out_view(const tensor_view& out) {
  if (!out.device().is_cpu()) return fail(errc::invalid_argument, "video: output tensor is not on the CPU");
  if (out.dtype() != dtype::u8)
    return fail(errc::invalid_argument, "video: output tensor dtype " + std::string(to_string(out.dtype())) + " is not u8");
  if (out.rank() != 4) return fail(errc::invalid_argument, "video: output tensor has rank " + std::to_string(out.rank()) + ", expected [T,H,W,3]");
  if (!out.is_contiguous()) return fail(errc::invalid_argument, "video: output tensor is not contiguous");
  return {};
}

// Decodes the plan's frames into `out` (plan.nbytes bytes, nothing written outside them). Consumes the
// plan's input.
inline result<void> run_video_decode(video_decode_plan& plan, bytes_view data, const video_decode_options& opts,
                                     const decode_limits& limits, std::uint8_t* out) {
  video_input* in = &plan.in;
  const video_info& info = in->info;
  const std::size_t T = plan.frames;
  const bool by_time = plan.by_time;
  const auto& index = plan.index;
  const int out_w = plan.out_w, out_h = plan.out_h;

  std::vector<std::size_t> order(T);  // slots in the order frames satisfy them
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (by_time)
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return opts.timestamps[a] < opts.timestamps[b]; });

  // Decoder.
  AVStream* st = in->stream;
  codec_context_ptr dec(avcodec_alloc_context3(in->decoder));
  if (!dec) return fail(errc::internal, "video: cannot allocate a decoder context");
  if (int r = avcodec_parameters_to_context(dec.get(), st->codecpar); r < 0)
    return fail(errc::decode_failed, "video: bad codec parameters (" + av_error_text(r) + ")");
  dec->pkt_timebase = st->time_base;
  dec->thread_count = opts.threads;
  dec->thread_type = FF_THREAD_FRAME | FF_THREAD_SLICE;
  // Decoders check max_pixels against their coded (macroblock/stride aligned) size: allow that slack.
  const std::uint64_t align_slack = 128 * (static_cast<std::uint64_t>(info.width) + static_cast<std::uint64_t>(info.height) + 128);
  dec->max_pixels = static_cast<std::int64_t>(std::min<std::uint64_t>(limits.max_image_pixels, INT64_MAX / 2) + align_slack);
  if (int r = avcodec_open2(dec.get(), in->decoder, nullptr); r < 0)
    return fail(errc::decode_failed, std::string("video: cannot open the ") + in->decoder->name + " decoder (" + av_error_text(r) + ")");

  rgb_converter rgb(out_w, out_h);
  packet_ptr pkt(av_packet_alloc());
  frame_ptr frame(av_frame_alloc());
  frame_ptr last(av_frame_alloc());
  if (!pkt || !frame || !last) return fail(errc::internal, "video: cannot allocate packet/frame");

  // SIMD converters may store whole vectors past a row's end, so a conversion may spill (less than a row
  // plus kAlignment bytes) past its slot. That is harmless while the next slot is still to be written;
  // the last slot, or one whose successor is already filled, is converted via a padded scratch frame.
  const std::size_t frame_bytes = static_cast<std::size_t>(out_w) * static_cast<std::size_t>(out_h) * 3;
  byte_buffer scratch;  // allocated on first use
  std::vector<char> filled(T, 0);
  auto convert_into = [&](const AVFrame* f, std::size_t slot) -> result<void> {
    std::uint8_t* dst = out + slot * frame_bytes;
    if (slot + 1 < T && !filled[slot + 1]) {
      JITEMBED_TRY(rgb.convert(f, dst));
    } else {
      if (scratch.empty()) scratch.resize(frame_bytes + static_cast<std::size_t>(out_w) * 3 + kAlignment);
      auto* s = reinterpret_cast<std::uint8_t*>(scratch.data());
      JITEMBED_TRY(rgb.convert(f, s));
      std::memcpy(dst, s, frame_bytes);
    }
    filled[slot] = 1;
    return {};
  };
  // Fills the slots order[next..] that `hit` accepts from frame f: the first by conversion, the rest by copy.
  std::size_t next = 0;  // position in `order`
  auto fill = [&](const AVFrame* f, auto&& hit) -> result<void> {
    const std::uint8_t* first = nullptr;
    for (; next < T && hit(order[next]); ++next) {
      const std::size_t slot = order[next];
      if (first) {
        std::memcpy(out + slot * frame_bytes, first, frame_bytes);
        filled[slot] = 1;
      } else {
        JITEMBED_TRY(convert_into(f, slot));
        first = out + slot * frame_bytes;
      }
    }
    return {};
  };

  std::int64_t frame_no = 0;      // frames decoded so far (presentation order)
  std::int64_t packets = 0;
  std::int64_t start_ts = st->start_time;
  int decode_error = 0;           // last decoder error
  int read_error = 0;             // a demuxer error other than end of file
  bool have_last = false;
  const double tb = av_q2d(st->time_base);

  // Fills every slot this frame satisfies.
  auto take = [&](const AVFrame* f) -> result<void> {
    double t = 0;
    if (by_time) {
      std::int64_t ts = f->best_effort_timestamp != AV_NOPTS_VALUE ? f->best_effort_timestamp : f->pts;
      if (ts != AV_NOPTS_VALUE && start_ts == AV_NOPTS_VALUE) start_ts = ts;
      t = ts != AV_NOPTS_VALUE && tb > 0 ? static_cast<double>(ts - start_ts) * tb
                                         : (info.fps > 0 ? static_cast<double>(frame_no) / info.fps : static_cast<double>(frame_no));
    }
    JITEMBED_TRY(fill(f, [&](std::size_t slot) { return by_time ? t + 1e-6 >= opts.timestamps[slot] : index[slot] == frame_no; }));
    ++frame_no;
    return {};
  };

  // Receives every frame the decoder has ready.
  bool decoder_done = false;
  auto drain = [&]() -> result<void> {
    for (int errors = 0; next < T;) {
      const int r = avcodec_receive_frame(dec.get(), frame.get());
      if (r == AVERROR(EAGAIN)) break;
      if (r == AVERROR_EOF) {
        decoder_done = true;
        break;
      }
      if (r < 0) {
        decode_error = r;
        if (++errors > 64) break;
        continue;
      }
      JITEMBED_TRY(take(frame.get()));
      av_frame_unref(last.get());
      av_frame_move_ref(last.get(), frame.get());
      have_last = true;
    }
    return {};
  };

  bool flushed = false;
  while (next < T && !decoder_done) {
    if (!flushed) {
      const int r = av_read_frame(in->fmt.get(), pkt.get());
      if (r < 0) {
        if (r != AVERROR_EOF) read_error = r;
        flushed = true;
        avcodec_send_packet(dec.get(), nullptr);
      } else {
        if (pkt->stream_index != st->index) {
          av_packet_unref(pkt.get());
          continue;
        }
        if (++packets > plan.packet_budget)
          return fail(errc::corrupt_data, "video: more than " + std::to_string(plan.packet_budget) +
                                              " packets read without reaching the selected frames");
        int s = avcodec_send_packet(dec.get(), pkt.get());
        if (s == AVERROR(EAGAIN)) {  // output pending: take it, then the packet fits
          JITEMBED_TRY(drain());
          s = avcodec_send_packet(dec.get(), pkt.get());
        }
        av_packet_unref(pkt.get());
        if (s < 0 && s != AVERROR(EAGAIN)) decode_error = s;
      }
    }
    JITEMBED_TRY(drain());
    if (flushed && !decoder_done && next < T) {
      // A decoder that neither returns EOF nor frames after the flush: stop rather than spin.
      const int r = avcodec_receive_frame(dec.get(), frame.get());
      if (r == AVERROR(EAGAIN)) break;
      if (r >= 0) {
        JITEMBED_TRY(take(frame.get()));
        av_frame_unref(last.get());
        av_frame_move_ref(last.get(), frame.get());
        have_last = true;
      } else {
        decoder_done = true;
      }
    }
  }

  if (next < T) {
    if (read_error || decode_error || !have_last) {
      const int err = read_error ? read_error : decode_error;
      const std::string where = std::to_string(frame_no) + " frames decoded, " + std::to_string(T - next) + " of " +
                                std::to_string(T) + " selected frames missing" + (err ? " (" + av_error_text(err) + ")" : "");
      if (in->src->reached_end || declares_more_than(data)) return fail(errc::truncated, "video: data ends inside the stream: " + where);
      return fail(errc::decode_failed, std::string("video: ") + (read_error ? "demuxing" : "decoding") + " failed: " + where);
    }
    if (declares_more_than(data))
      return fail(errc::truncated, "video: data ends after " + std::to_string(frame_no) + " frames but the container declares more than " +
                                       std::to_string(data.size()) + " bytes");
    // A clean end before a selected frame: the remaining slots repeat the last frame.
    JITEMBED_TRY(fill(last.get(), [](std::size_t) { return true; }));
  }
  return {};
}

}  // namespace jitembed::codec::detail
