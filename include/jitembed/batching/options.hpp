// Configuration of the dynamic batcher (batcher_options) and of one request (submit_options), with
// validate(): the checks dynamic_batcher::create applies.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "jitembed/core/error.hpp"

namespace jitembed::batching {

// Upper bounds that keep a misconfigured batcher from asking for absurd resources.
inline constexpr int kMaxPriorityLevels = 1024;
inline constexpr std::size_t kMaxRunnerThreads = 1024;

struct batcher_options {
  std::size_t max_batch_size = 8;                 // a batch never holds more requests
  std::chrono::microseconds max_queue_delay{1000};  // the oldest queued request waits at most this long
  // true: while no batch is running, whatever is queued is dispatched at once (a lone request never
  // waits for company); max_queue_delay and preferred sizes then only shape batches that form while
  // another batch runs. false: Triton's rule, every batch waits up to max_queue_delay to fill.
  bool idle_dispatch = true;
  std::vector<std::size_t> preferred_batch_sizes;   // each in [1, max_batch_size]; dispatched as soon as reached
  std::size_t max_queue_size = 1024;              // queued (not yet running) requests; 0 = unbounded
  int priority_levels = 1;                        // priorities 0 (highest) .. priority_levels-1 (lowest)
  std::chrono::microseconds default_timeout{0};   // queue-time bound of a request; 0 = none
  std::size_t runner_threads = 1;                 // runner instances; each runs one batch at a time
};

// Per-request options. BucketKey: requests are batched only with requests of an equal bucket.
template <class BucketKey = std::monostate>
struct submit_options {
  int priority = 0;                                 // 0 = highest; must be < priority_levels
  std::optional<std::chrono::microseconds> timeout{};  // queue-time bound; unset = default_timeout, 0 = none
  // An absolute deadline (e.g. a request's, counted from its arrival): a request still queued when it
  // passes fails with errc::timeout and never runs; one already past at submit is rejected. Applies
  // together with `timeout` (whichever comes first).
  std::optional<std::chrono::steady_clock::time_point> deadline{};
  BucketKey bucket{};
  std::uint64_t caller_id = 0;  // nonzero: completions of this caller are delivered in submit order
};

// dynamic_batcher::create returns this error (invalid_argument) when it fails.
inline result<void> validate(const batcher_options& o) {
  if (o.max_batch_size < 1) return fail(errc::invalid_argument, "batcher_options: max_batch_size 0 must be >= 1");
  if (o.max_queue_delay.count() < 0)
    return fail(errc::invalid_argument,
                "batcher_options: max_queue_delay " + std::to_string(o.max_queue_delay.count()) + " us is negative");
  for (std::size_t i = 0; i < o.preferred_batch_sizes.size(); ++i) {
    const std::size_t p = o.preferred_batch_sizes[i];
    if (p < 1 || p > o.max_batch_size)
      return fail(errc::invalid_argument, "batcher_options: preferred_batch_sizes[" + std::to_string(i) + "] = " +
                                              std::to_string(p) + " not in [1, max_batch_size " +
                                              std::to_string(o.max_batch_size) + "]");
  }
  if (o.priority_levels < 1 || o.priority_levels > kMaxPriorityLevels)
    return fail(errc::invalid_argument, "batcher_options: priority_levels " + std::to_string(o.priority_levels) +
                                            " not in [1, " + std::to_string(kMaxPriorityLevels) + "]");
  if (o.default_timeout.count() < 0)
    return fail(errc::invalid_argument,
                "batcher_options: default_timeout " + std::to_string(o.default_timeout.count()) + " us is negative");
  if (o.runner_threads < 1 || o.runner_threads > kMaxRunnerThreads)
    return fail(errc::invalid_argument, "batcher_options: runner_threads " + std::to_string(o.runner_threads) +
                                            " not in [1, " + std::to_string(kMaxRunnerThreads) + "]");
  return {};
}

}  // namespace jitembed::batching
