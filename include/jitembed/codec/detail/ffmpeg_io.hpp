// In-memory AVIOContexts: a read+seek source over a bytes_view (demuxing never touches a file or URL)
// and a write+seek sink into a growable byte_buffer or a caller's fixed buffer (muxing).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <limits>
#include <optional>

#include "jitembed/codec/detail/ffmpeg.hpp"
#include "jitembed/core/buffer.hpp"

namespace jitembed::codec::detail {

inline constexpr int kAvioBufferSize = 64 * 1024;

// Read position over untrusted bytes. `reached_end` records that the demuxer asked for data at or beyond
// the end (a read there or a seek past it): when that comes with a demuxer or decoder error, the file
// is taken to be truncated rather than corrupt.
struct memory_source {
  const std::uint8_t* data = nullptr;
  std::int64_t size = 0;
  std::int64_t pos = 0;
  bool reached_end = false;
};

inline int memory_source_read(void* opaque, std::uint8_t* buf, int n) {
  auto* s = static_cast<memory_source*>(opaque);
  if (n <= 0) return 0;
  if (s->pos >= s->size) {
    s->reached_end = true;
    return AVERROR_EOF;
  }
  const std::int64_t len = std::min<std::int64_t>(n, s->size - s->pos);
  std::memcpy(buf, s->data + s->pos, static_cast<std::size_t>(len));
  s->pos += len;
  return static_cast<int>(len);
}

// Where an AVIO seek's offset counts from (SEEK_SET / SEEK_CUR / SEEK_END), or nullopt for another whence.
// AVSEEK_SIZE and AVSEEK_FORCE are handled by the callers / masked off before.
inline std::optional<std::int64_t> avio_seek_base(int whence, std::int64_t pos, std::int64_t size) noexcept {
  if (whence == SEEK_SET) return 0;
  if (whence == SEEK_CUR) return pos;
  if (whence == SEEK_END) return size;
  return std::nullopt;
}

inline std::int64_t memory_source_seek(void* opaque, std::int64_t offset, int whence) {
  auto* s = static_cast<memory_source*>(opaque);
  whence &= ~AVSEEK_FORCE;
  if (whence == AVSEEK_SIZE) return s->size;
  const auto b = avio_seek_base(whence, s->pos, s->size);
  if (!b) return AVERROR(EINVAL);
  const std::int64_t base = *b;
  if ((offset > 0 && base > std::numeric_limits<std::int64_t>::max() - offset) || base + offset < 0)
    return AVERROR(EINVAL);
  const std::int64_t target = base + offset;
  if (target > s->size) {
    s->reached_end = true;
    return AVERROR_EOF;
  }
  s->pos = target;
  return target;
}

// A read-only AVIOContext over `src` (which must outlive it). Null on allocation failure.
inline io_context_ptr make_source_io(memory_source* src) {
  auto* buf = static_cast<unsigned char*>(av_malloc(kAvioBufferSize));
  if (!buf) return nullptr;
  AVIOContext* pb = avio_alloc_context(buf, kAvioBufferSize, 0, src, &memory_source_read, nullptr, &memory_source_seek);
  if (!pb) {
    av_free(buf);
    return nullptr;
  }
  return io_context_ptr(pb);
}

// Output of a muxer: either appends to `grow` or writes into `fixed`, never past its end (overflow is
// recorded and reported as ENOSPC so the muxer fails cleanly).
struct memory_sink {
  byte_buffer* grow = nullptr;
  mutable_bytes fixed{};
  std::int64_t pos = 0;
  std::int64_t size = 0;  // high-water mark: bytes of the output
  bool overflow = false;
};

// FFmpeg 5.x declares the buffer non-const (const from FFmpeg 7).
inline int memory_sink_write(void* opaque, std::uint8_t* buf, int n) {
  auto* s = static_cast<memory_sink*>(opaque);
  if (n <= 0) return 0;
  const std::int64_t end = s->pos + n;
  if (s->grow) {
    if (static_cast<std::uint64_t>(end) > s->grow->size()) s->grow->resize(static_cast<std::size_t>(end));
    std::memcpy(s->grow->data() + s->pos, buf, static_cast<std::size_t>(n));
  } else {
    if (static_cast<std::uint64_t>(end) > s->fixed.size()) {
      s->overflow = true;
      return AVERROR(ENOSPC);
    }
    std::memcpy(s->fixed.data() + s->pos, buf, static_cast<std::size_t>(n));
  }
  s->pos = end;
  s->size = std::max(s->size, end);
  return n;
}

inline std::int64_t memory_sink_seek(void* opaque, std::int64_t offset, int whence) {
  auto* s = static_cast<memory_sink*>(opaque);
  whence &= ~AVSEEK_FORCE;
  if (whence == AVSEEK_SIZE) return s->size;
  const auto base = avio_seek_base(whence, s->pos, s->size);
  if (!base) return AVERROR(EINVAL);
  const std::int64_t target = *base + offset;
  if (target < 0 || target > s->size) return AVERROR(EINVAL);  // muxers only seek back to patch headers
  s->pos = target;
  return target;
}

inline io_context_ptr make_sink_io(memory_sink* sink) {
  auto* buf = static_cast<unsigned char*>(av_malloc(kAvioBufferSize));
  if (!buf) return nullptr;
  AVIOContext* pb = avio_alloc_context(buf, kAvioBufferSize, 1, sink, nullptr, &memory_sink_write, &memory_sink_seek);
  if (!pb) {
    av_free(buf);
    return nullptr;
  }
  return io_context_ptr(pb);
}

// Installed as AVFormatContext::io_open: a demuxer that tries to open another resource (a playlist
// entry, an external data reference) is refused, whatever the protocol whitelist says.
inline int deny_io_open(AVFormatContext*, AVIOContext**, const char*, int, AVDictionary**) { return AVERROR(EPERM); }

}  // namespace jitembed::codec::detail
