// Statistics snapshot of a dynamic batcher: batch-size histogram, queue/compute time summaries, counters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace jitembed::batching {

// Summary of durations in microseconds. Quantiles come from a fixed log-scale histogram (4 buckets per
// doubling): each is the upper edge of its bucket, capped at max_us, so it overstates by at most 19%.
struct duration_summary {
  std::uint64_t count = 0;
  double sum_us = 0;
  double max_us = 0;
  double p50_us = 0;
  double p90_us = 0;
  double p99_us = 0;
  double mean_us() const noexcept { return count ? sum_us / static_cast<double>(count) : 0.0; }
};

// What a batcher holds right now, without the counters and summaries of batcher_stats (cheap: two
// integers read under the lock; for autoscalers and health checks that poll often).
struct batcher_load {
  std::size_t queued = 0;     // waiting for a batch
  std::size_t in_flight = 0;  // in a batch being run (or being delivered)
};

struct batcher_stats {
  std::vector<std::uint64_t> batch_sizes;  // batch_sizes[n] = batches that held n requests, n <= max_batch_size
  duration_summary queue_time;             // per request that ran: submit -> dispatch to the runner
  duration_summary compute_time;           // per batch: time inside the runner
  std::uint64_t batches = 0;               // batches run
  std::uint64_t submitted = 0;             // submit calls
  std::uint64_t accepted = 0;              // queued (all others were rejected in submit)
  std::uint64_t rejected_queue_full = 0;
  std::uint64_t rejected_invalid = 0;    // bad priority or negative timeout
  std::uint64_t rejected_shut_down = 0;  // submitted after shutdown
  std::uint64_t rejected_expired = 0;    // submitted with a deadline that had already passed
  std::uint64_t timed_out = 0;           // expired while queued, never run
  std::uint64_t cancelled = 0;           // dropped by shutdown(drain = false), never run
  std::uint64_t completed_ok = 0;        // ran, runner set a value
  std::uint64_t completed_error = 0;     // ran, runner set an error, threw, or left the result unset
  std::uint64_t runner_exceptions = 0;   // batches whose runner threw
  std::uint64_t callback_exceptions = 0; // callbacks that threw (swallowed)
  std::size_t queued = 0;                // waiting for a batch now
  std::size_t in_flight = 0;             // in a batch being run now (or being delivered)
  std::size_t held_for_order = 0;        // finished, held until an earlier request of the same caller finishes

  std::size_t pending() const noexcept { return queued + in_flight; }
};

}  // namespace jitembed::batching
