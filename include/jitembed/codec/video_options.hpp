// The video decoder's vocabulary: the container/codec policy for untrusted input, probe results, and
// which frames to decode at what size (no FFmpeg needed to name them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace jitembed::codec {

// What untrusted input may use. Entries are FFmpeg names: AVInputFormat::name for containers (compared
// whole, e.g. "mov,mp4,m4a,3gp,3g2,mj2") and codec descriptor names (avcodec_get_name) for codecs.
// Demuxers that open other resources (hls, concat, image2, dash, imf, sdp, rtsp, lavfi, capture devices)
// are refused even when listed (errc::invalid_argument).
struct video_policy {
  std::vector<std::string> formats = {"mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm"};
  std::vector<std::string> codecs = {"h264", "hevc", "vp8", "vp9", "av1", "mpeg4"};
};

// What the container header says about the first video stream (no frame is decoded to learn it).
struct video_info {
  std::string container;          // AVInputFormat name, e.g. "mov,mp4,m4a,3gp,3g2,mj2" or "matroska,webm"
  std::string codec;              // codec name, e.g. "h264", "vp9", "av1"
  int width = 0;
  int height = 0;
  double fps = 0.0;               // average frame rate; 0 when the container does not say
  double duration_seconds = 0.0;  // 0 when unknown
  std::int64_t frame_count = 0;   // frames in the stream
  bool frame_count_exact = false; // true: the container's sample count (MP4); false: round(duration * fps)
};

// Which frames decode_video returns and at what size.
//
// Frame selection (uniform): N = the stream's frame count (the container's sample count when it has one,
// MP4; else the demuxed packets of the stream are counted first, WebM/MKV). Output frame i is frame
// index round(i * (N-1) / (T-1)) in presentation order (T == 1: frame 0); num_frames == 0 means all N
// frames. When T > N the rounding repeats frames uniformly, so a short clip is not an error.
// Frame selection (timestamps): output frame i is the first frame whose presentation time (seconds from
// the stream start) is at or after timestamps[i] (timestamps need not be sorted); a time past the last
// frame gives the last frame.
// If the stream ends cleanly before a selected frame (the decoder produced fewer frames than the
// container declared), the last decoded frame is repeated; if it ends because data is missing or a
// decoder error occurred, decoding fails (errc::truncated / errc::decode_failed).
// Frames are decoded sequentially from the start (no seeking).
struct video_decode_options {
  int num_frames = 8;             // T frames at uniform stride over the whole clip; 0 = all frames
  // > 0: frames 0, s, 2s, ... from the start instead (num_frames >= 1 of them; an index past the last frame
  // gives the last frame, so a short clip repeats its last frame); ignored with timestamps.
  int frame_stride = 0;
  std::vector<double> timestamps; // if non-empty: the frame at (nearest at-or-after) each time, seconds
  int width = 0, height = 0;      // 0 = native; else swscale (bicubic) resize to exactly this (both or neither)
  int threads = 0;                // decoder threads (frame + slice threading); 0 = auto
};

}  // namespace jitembed::codec
