// Per-thread reusable zstd contexts and scratch buffer, and the mapping of zstd error codes to errc.
#pragma once

#include <zstd.h>
#include <zstd_errors.h>

#include <cstddef>
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

// Maps an error returned by a zstd decompression call to a stable errc and message.
inline error_info zstd_decode_error(std::size_t code, std::size_t in_offset, unsigned window_log_max) {
  const auto e = ZSTD_getErrorCode(code);
  const std::string at = " at input offset " + std::to_string(in_offset);
  switch (e) {
    case ZSTD_error_frameParameter_windowTooLarge:
      return fail(errc::limit_exceeded, "zstd: frame window exceeds max_zstd_window_log " +
                                            std::to_string(window_log_max) + at + " (" + zstd_error_name(code) + ")");
    case ZSTD_error_checksum_wrong:
      return fail(errc::checksum_mismatch, "zstd: content checksum mismatch" + at);
    case ZSTD_error_memory_allocation:
      return fail(errc::limit_exceeded, "zstd: decoder allocation failed" + at);
    default:
      return fail(errc::decode_failed, "zstd: " + zstd_error_name(code) + at);
  }
}

}  // namespace jitembed::codec::detail
