// The client's hedging policy, free of I/O: when a call still running gets a second attempt on another
// endpoint (the first answer wins). The latency window behind it also gives the client's percentiles.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "jitembed/client/detail/client_policy.hpp"
#include "jitembed/client/options.hpp"

namespace jitembed::client::detail {

class hedger {
 public:
  explicit hedger(const hedge_options& o) : o_(o) {}

  // An answered attempt's latency (the hedge delay is recomputed every 64 samples).
  void add(double ms) {
    window_.add(ms);
    if (window_.total() % 64 == 0 || window_.total() == o_.min_samples) after_ms_ = window_.percentile(o_.percentile);
  }

  // Whether calls are hedged yet: enabled and min_samples latencies seen.
  bool armed() const noexcept { return o_.enabled && window_.size() >= o_.min_samples; }

  // How long after a call's first attempt its hedge goes out: the latency percentile, at least min_delay.
  clock::duration delay() const {
    const auto ms = std::chrono::duration<double, std::milli>(
        std::max<double>(after_ms_, static_cast<double>(o_.min_delay.count())));
    return std::chrono::duration_cast<clock::duration>(ms);
  }

  // A hedge goes only toward an endpoint with fewer attempts in flight than the primary's: when every
  // endpoint is as busy, the delay is queueing, and a hedge would only add load to a saturated fleet.
  static bool worth_it(std::uint64_t primary_outstanding, std::uint64_t candidate_outstanding) noexcept {
    return candidate_outstanding < primary_outstanding;
  }

  double percentile(double p) const { return window_.percentile(p); }

 private:
  hedge_options o_;
  latency_window window_;
  double after_ms_ = 0;
};

}  // namespace jitembed::client::detail
