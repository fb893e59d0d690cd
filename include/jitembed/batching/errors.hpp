// The batcher's own errors: one stable errc per cause (callers decide on the errc alone, never on the
// message) and a specific, stable message for each (tests and logs may match it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "jitembed/core/error.hpp"

namespace jitembed::batching::detail {

// errc per cause (docs/batching.md, "Errors"):
//   queue full                    unavailable         "queue full (max_queue_size N)"
//   queue timeout expired         timeout             "timeout: queued longer than T us"
//   the request's deadline passed timeout             "timeout: deadline passed after T us in the queue"
//                                                     "timeout: deadline passed before it was queued"
//   submit after shutdown         unavailable         "shut down: not accepting requests"
//   shutdown(drain = false)       cancelled           "shut down: cancelled before it ran"
//   bad submit options            invalid_argument    "priority P out of range [0, L)" / "timeout T us is negative"
//   the runner threw bad_alloc    resource_exhausted  "runner ran out of memory: <what()>"
//   the runner threw              internal            "runner threw: <what()>"
//   the runner wrote nothing      internal            "runner left the result unset"
inline error_info queue_full_error(std::size_t max_queue_size) {
  return fail(errc::unavailable, "queue full (max_queue_size " + std::to_string(max_queue_size) + ")");
}
inline error_info timeout_error(std::int64_t timeout_us) {
  return fail(errc::timeout, "timeout: queued longer than " + std::to_string(timeout_us) + " us");
}
inline error_info deadline_error(std::int64_t queued_us) {
  return fail(errc::timeout, "timeout: deadline passed after " + std::to_string(queued_us) + " us in the queue");
}
inline error_info deadline_before_queue_error() {
  return fail(errc::timeout, "timeout: deadline passed before it was queued");
}
inline error_info shut_down_error() { return fail(errc::unavailable, "shut down: not accepting requests"); }
inline error_info cancelled_error() { return fail(errc::cancelled, "shut down: cancelled before it ran"); }
inline error_info priority_error(int priority, int levels) {
  return fail(errc::invalid_argument,
              "priority " + std::to_string(priority) + " out of range [0, " + std::to_string(levels) + ")");
}
inline error_info negative_timeout_error(std::int64_t timeout_us) {
  return fail(errc::invalid_argument, "timeout " + std::to_string(timeout_us) + " us is negative");
}
inline error_info runner_out_of_memory_error(std::string_view what) {
  return fail(errc::resource_exhausted, "runner ran out of memory: " + std::string(what));
}
inline error_info runner_threw_error(std::string_view what) {
  return fail(errc::internal, "runner threw: " + std::string(what));
}
inline error_info runner_unset_error() { return fail(errc::internal, "runner left the result unset"); }

}  // namespace jitembed::batching::detail
