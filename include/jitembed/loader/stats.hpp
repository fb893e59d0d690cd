// Counters of jit_loader (a snapshot; see jit_loader::stats()): trainer wait, prefetch state, cache, and
// the client's own counters (retries, hedges, per-endpoint requests and latency).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "jitembed/client/stats.hpp"

namespace jitembed::loader {

// One epoch's share of the counters. Delivery (steps, samples, waits) counts where the trainer received it;
// requests and cache lookups count for the epoch of the samples they were for, also when they were sent
// while the trainer was still in the previous epoch (prefetch).
struct loader_epoch_stats {
  std::uint64_t epoch = 0;
  std::uint64_t steps = 0;               // batches returned
  std::uint64_t samples_delivered = 0;   // failed ones included
  std::uint64_t samples_failed = 0;
  double wait_s = 0;                     // time the trainer spent blocked in next() during this epoch
  double max_wait_s = 0;
  double wall_s = 0;                     // from the epoch's first next() call to its end-of-epoch next() (or now)
  bool ended = false;                    // the end-of-epoch next() returned
  std::uint64_t requests = 0;            // embed requests sent for this epoch's samples (resubmissions included)
  std::uint64_t rows_requested = 0;
  std::uint64_t resubmits = 0;
  std::uint64_t cache_hits = 0;
  std::uint64_t cache_misses = 0;
  double samples_per_s() const noexcept { return wall_s > 0 ? static_cast<double>(samples_delivered) / wall_s : 0.0; }
  double stall() const noexcept { return wall_s > 0 ? wait_s / wall_s : 0.0; }  // fraction of the epoch spent waiting
};

struct loader_stats {
  std::uint64_t epoch = 0;
  std::uint64_t step = 0;                 // steps returned in this epoch
  std::uint64_t steps_per_epoch = 0;      // the same on every rank
  std::uint64_t batches = 0;              // next() calls that returned a batch, all epochs
  std::uint64_t samples_delivered = 0;    // samples returned by next() (failed ones included), all epochs
  std::uint64_t samples_failed = 0;       // of those, delivered with an error
  double wait_s = 0;                      // time the trainer spent blocked in next()
  double max_wait_s = 0;                  // longest single wait in next()

  std::uint64_t buffered = 0;             // samples admitted and not yet returned (<= max_buffered)
  std::uint64_t max_buffered_seen = 0;    // high-water mark of `buffered`
  std::uint64_t ready = 0;                // of those, finished and waiting for next()
  std::uint64_t chunks_in_flight = 0;     // chunks being read, looked up or embedded (<= requests_in_flight)
  std::uint64_t requests_in_flight = 0;   // embed requests sent and not completed

  std::uint64_t requests = 0;             // embed requests sent (resubmissions included)
  std::uint64_t rows_requested = 0;       // rows in those requests
  std::uint64_t resubmits = 0;            // requests sent again by the loader after a retryable failure
  std::uint64_t cache_hits = 0;           // (sample, model) lookups answered by the cache
  std::uint64_t cache_misses = 0;
  std::uint64_t cache_puts = 0;           // values stored after a request
  std::uint64_t cache_put_failures = 0;   // values the store did not take (budget, store error)

  client::client_stats client;                    // the client's counters: retries, hedges, endpoints

  // Per epoch, oldest first: every epoch this loader has delivered from or prefetched for (the last
  // kMaxEpochStats of them).
  std::vector<loader_epoch_stats> epochs;
  static constexpr std::size_t kMaxEpochStats = 1024;
};

}  // namespace jitembed::loader
