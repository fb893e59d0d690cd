// The batcher's stable error messages and classify(), which tells them apart (a server maps
// queue_full / timeout / shut_down / cancelled to HTTP 503, invalid_request to 400, runner_failed to 500).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "jitembed/core/error.hpp"

namespace jitembed::batching {

// Why a request did not get its runner's result. errc per kind:
//   queue_full      limit_exceeded   "queue full (max_queue_size N)"           (rejected in submit)
//   timeout         limit_exceeded   "timeout: queued longer than T us"        (expired in the queue, never run)
//   shut_down       limit_exceeded   "shut down: not accepting requests"       (submit after shutdown)
//   cancelled       limit_exceeded   "shut down: cancelled before it ran"      (shutdown(drain = false))
//   invalid_request invalid_argument "priority P out of range [0, L)" / "timeout T us is negative"
//   runner_failed   internal         "runner threw: <what()>" / "runner left the result unset"
enum class batcher_error : std::uint8_t { none, queue_full, timeout, shut_down, cancelled, invalid_request, runner_failed, other };

inline constexpr std::string_view kQueueFullPrefix = "queue full (max_queue_size ";
inline constexpr std::string_view kTimeoutPrefix = "timeout: queued longer than ";
inline constexpr std::string_view kShutDownMessage = "shut down: not accepting requests";
inline constexpr std::string_view kCancelledMessage = "shut down: cancelled before it ran";
inline constexpr std::string_view kRunnerThrewPrefix = "runner threw: ";
inline constexpr std::string_view kRunnerUnsetMessage = "runner left the result unset";

constexpr std::string_view to_string(batcher_error e) noexcept {
  switch (e) {
    case batcher_error::none: return "none";
    case batcher_error::queue_full: return "queue_full";
    case batcher_error::timeout: return "timeout";
    case batcher_error::shut_down: return "shut_down";
    case batcher_error::cancelled: return "cancelled";
    case batcher_error::invalid_request: return "invalid_request";
    case batcher_error::runner_failed: return "runner_failed";
    case batcher_error::other: return "other";
  }
  return "other";
}

// Classifies an error the batcher produced; errors a runner set itself are `other` (or `none` for ok).
inline batcher_error classify(const error_info& e) noexcept {
  const std::string_view m = e.message;
  switch (e.code) {
    case errc::ok: return batcher_error::none;
    case errc::limit_exceeded:
      if (m.starts_with(kQueueFullPrefix)) return batcher_error::queue_full;
      if (m.starts_with(kTimeoutPrefix)) return batcher_error::timeout;
      if (m == kShutDownMessage) return batcher_error::shut_down;
      if (m == kCancelledMessage) return batcher_error::cancelled;
      return batcher_error::other;
    case errc::invalid_argument:
      if (m.starts_with("priority ") || m.starts_with("timeout ")) return batcher_error::invalid_request;
      return batcher_error::other;
    case errc::internal:
      if (m.starts_with(kRunnerThrewPrefix) || m == kRunnerUnsetMessage) return batcher_error::runner_failed;
      return batcher_error::other;
    default: return batcher_error::other;
  }
}

namespace detail {
inline error_info queue_full_error(std::size_t max_queue_size) {
  return fail(errc::limit_exceeded, std::string(kQueueFullPrefix) + std::to_string(max_queue_size) + ")");
}
inline error_info timeout_error(std::int64_t timeout_us) {
  return fail(errc::limit_exceeded, std::string(kTimeoutPrefix) + std::to_string(timeout_us) + " us");
}
}  // namespace detail

}  // namespace jitembed::batching
