// RAII owners, error text and log silencing for the FFmpeg (5.x API) objects the video codec uses.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/dict.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libavutil/pixfmt.h>
#include <libswscale/swscale.h>
}

#include <memory>
#include <mutex>
#include <string>

namespace jitembed::codec::detail {

struct av_packet_deleter {
  void operator()(AVPacket* p) const noexcept { av_packet_free(&p); }
};
struct av_frame_deleter {
  void operator()(AVFrame* f) const noexcept { av_frame_free(&f); }
};
struct av_codec_context_deleter {
  void operator()(AVCodecContext* c) const noexcept { avcodec_free_context(&c); }
};
struct sws_context_deleter {
  void operator()(SwsContext* c) const noexcept { sws_freeContext(c); }
};
// An opened demuxer (avformat_open_input succeeded): closed with avformat_close_input.
struct av_input_context_deleter {
  void operator()(AVFormatContext* c) const noexcept { avformat_close_input(&c); }
};
// A context that was only allocated (not opened) or a muxer context.
struct av_format_context_deleter {
  void operator()(AVFormatContext* c) const noexcept { avformat_free_context(c); }
};
// A custom AVIOContext and its buffer (FFmpeg may have replaced the buffer we gave it, so free pb->buffer).
struct av_io_context_deleter {
  void operator()(AVIOContext* pb) const noexcept {
    if (pb) av_freep(&pb->buffer);
    avio_context_free(&pb);
  }
};
struct av_dictionary_deleter {
  void operator()(AVDictionary* d) const noexcept { av_dict_free(&d); }
};

using packet_ptr = std::unique_ptr<AVPacket, av_packet_deleter>;
using frame_ptr = std::unique_ptr<AVFrame, av_frame_deleter>;
using codec_context_ptr = std::unique_ptr<AVCodecContext, av_codec_context_deleter>;
using sws_context_ptr = std::unique_ptr<SwsContext, sws_context_deleter>;
using input_context_ptr = std::unique_ptr<AVFormatContext, av_input_context_deleter>;
using format_context_ptr = std::unique_ptr<AVFormatContext, av_format_context_deleter>;
using io_context_ptr = std::unique_ptr<AVIOContext, av_io_context_deleter>;

// Owns an AVDictionary built for one call (FFmpeg may consume or replace it through the pointer).
class dictionary {
 public:
  dictionary() = default;
  dictionary(const dictionary&) = delete;
  dictionary& operator=(const dictionary&) = delete;
  ~dictionary() { av_dict_free(&d_); }
  bool set(const char* key, const char* value) { return av_dict_set(&d_, key, value, 0) >= 0; }
  AVDictionary** get() noexcept { return &d_; }

 private:
  AVDictionary* d_ = nullptr;
};

// av_strerror text for an AVERROR code.
inline std::string av_error_text(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  if (av_strerror(err, buf, sizeof buf) < 0) return "FFmpeg error " + std::to_string(err);
  return buf;
}

// FFmpeg logs to stderr by default; untrusted input can make it log without bound. Silenced once per
// process (define JITEMBED_KEEP_FFMPEG_LOGS to keep the application's own log level).
inline void quiet_ffmpeg_logs() {
#if !defined(JITEMBED_KEEP_FFMPEG_LOGS)
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_level(AV_LOG_QUIET); });
#endif
}

}  // namespace jitembed::codec::detail
