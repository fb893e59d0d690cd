// Per-thread reusable zstd contexts and scratch buffer, and the mapping of zstd error codes to errc.
#pragma once

// ZSTD_getFrameHeader (a frame's window size, read by zstd itself) is in zstd.h's "static linking only"
// part, exported by the shared library too. zstd.h guards that part on its own, so this works after an
// earlier plain #include <zstd.h>; the macro is not left defined for the includer.
#ifndef ZSTD_STATIC_LINKING_ONLY
#define ZSTD_STATIC_LINKING_ONLY
#define JITEMBED_ZSTD_STATIC_LINKING_ONLY_SET
#endif
#include <zstd.h>
#ifdef JITEMBED_ZSTD_STATIC_LINKING_ONLY_SET
#undef ZSTD_STATIC_LINKING_ONLY
#undef JITEMBED_ZSTD_STATIC_LINKING_ONLY_SET
#endif
#include <zstd_errors.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::codec::detail {

struct cctx_deleter {
  void operator()(ZSTD_CCtx* c) const noexcept { ZSTD_freeCCtx(c); }
};
struct dctx_deleter {
  void operator()(ZSTD_DCtx* c) const noexcept { ZSTD_freeDCtx(c); }
};

// One compression context per thread, created on first use and reused (its tables stay warm).
inline ZSTD_CCtx* thread_cctx() noexcept {
  thread_local std::unique_ptr<ZSTD_CCtx, cctx_deleter> ctx(ZSTD_createCCtx());
  return ctx.get();
}

// One decompression context per thread.
inline ZSTD_DCtx* thread_dctx() noexcept {
  thread_local std::unique_ptr<ZSTD_DCtx, dctx_deleter> ctx(ZSTD_createDCtx());
  return ctx.get();
}

// Scratch kept per thread for the shuffle step. Buffers above kScratchKeep are released after use so one
// huge payload does not pin its size in every worker thread for the life of the process.
inline constexpr std::size_t kScratchKeep = std::size_t{64} << 20;

inline byte_buffer& thread_scratch_buffer() noexcept {
  thread_local byte_buffer buf;
  return buf;
}

// RAII lease of the thread's scratch: at least n bytes while alive; trims an oversized buffer on release.
class scratch_lease {
 public:
  explicit scratch_lease(std::size_t n) : buf_(thread_scratch_buffer()) {
    if (buf_.size() < n) buf_.resize(n);  // grows only: no zero fill once warm
    span_ = mutable_bytes(buf_.data(), n);
  }
  ~scratch_lease() {
    if (buf_.size() > kScratchKeep) {
      buf_.clear();
      buf_.shrink_to_fit();
    }
  }
  scratch_lease(const scratch_lease&) = delete;
  scratch_lease& operator=(const scratch_lease&) = delete;

  mutable_bytes bytes() const noexcept { return span_; }

 private:
  byte_buffer& buf_;
  mutable_bytes span_;
};

inline std::string zstd_error_name(std::size_t code) { return ZSTD_getErrorName(code); }

// Maps an error returned by a zstd decompression call to a stable errc and message. A frame's own content
// checksum is part of the frame: a mismatch is a frame the decoder rejects (decode_failed, as
// docs/format.md says), not checksum_mismatch, which names jitembed's own checksums (XXH3 of payloads,
// headers, indexes), checked before a payload reaches the decoder.
inline error_info zstd_decode_error(std::size_t code, std::size_t in_offset, unsigned window_log_max) {
  const auto e = ZSTD_getErrorCode(code);
  const std::string at = " at input offset " + std::to_string(in_offset);
  switch (e) {
    case ZSTD_error_frameParameter_windowTooLarge:
      return fail(errc::limit_exceeded, "zstd: frame window exceeds max_zstd_window_log " +
                                            std::to_string(window_log_max) + at + " (" + zstd_error_name(code) + ")");
    case ZSTD_error_checksum_wrong:
      return fail(errc::decode_failed, "zstd: frame content checksum does not match the content" + at);
    case ZSTD_error_memory_allocation:
      return fail(errc::limit_exceeded, "zstd: decoder allocation failed" + at);
    default:
      return fail(errc::decode_failed, "zstd: " + zstd_error_name(code) + at);
  }
}

// The window of the frame starting at `in[at]`, as zstd reads it from the frame header (ZSTD_getFrameHeader:
// the window descriptor, or the content size of a single-segment frame), against 2^window_log_max. zstd's
// own ZSTD_d_windowLogMax check is skipped when a frame declares its content size and the output has room
// for it (one-pass decoding), so a frame's verdict would depend on the caller's buffer; this check runs at
// every frame start whatever the buffer. A header that is cut off or malformed passes here: the decoder
// then reports it (truncated / decode_failed).
inline result<void> check_frame_window(bytes_view in, std::size_t at, unsigned window_log_max) {
  if (at >= in.size()) return {};
  ZSTD_frameHeader h{};
  const std::size_t r = ZSTD_getFrameHeader(&h, in.data() + at, in.size() - at);
  if (r != 0) return {};
  if (h.frameType == ZSTD_frame && h.windowSize > (std::uint64_t{1} << window_log_max))
    return fail(errc::limit_exceeded, "zstd: frame window of " + std::to_string(h.windowSize) + " bytes exceeds max_zstd_window_log " +
                                          std::to_string(window_log_max) + " (" + std::to_string(std::uint64_t{1} << window_log_max) +
                                          " bytes) at input offset " + std::to_string(at));
  return {};
}

}  // namespace jitembed::codec::detail
