// Fixed-bucket log-scale duration histogram behind the batcher's queue/compute time summaries.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "jitembed/batching/stats.hpp"

namespace jitembed::batching::detail {

class duration_histogram {
 public:
  static constexpr int kPerDoubling = 4;
  // Bucket 0: <= 1 us; bucket b: (2^((b-1)/4), 2^(b/4)] us; the last bucket holds everything above 2^28 us.
  static constexpr std::size_t kBuckets = 28 * kPerDoubling + 2;

  void record(std::chrono::nanoseconds d) noexcept {
    const double us = std::max(0.0, static_cast<double>(d.count()) / 1000.0);
    std::size_t b = 0;
    if (us > 1.0) {
      const double x = std::ceil(std::log2(us) * kPerDoubling);
      b = x >= static_cast<double>(kBuckets - 1) ? kBuckets - 1 : static_cast<std::size_t>(x);
    }
    ++counts_[b];
    ++count_;
    sum_us_ += us;
    max_us_ = std::max(max_us_, us);
  }

  duration_summary summary() const noexcept {
    duration_summary s;
    s.count = count_;
    s.sum_us = sum_us_;
    s.max_us = max_us_;
    s.p50_us = quantile(0.50);
    s.p90_us = quantile(0.90);
    s.p99_us = quantile(0.99);
    return s;
  }

  static double upper_edge_us(std::size_t b) noexcept { return std::exp2(static_cast<double>(b) / kPerDoubling); }

 private:
  double quantile(double q) const noexcept {
    if (count_ == 0) return 0.0;
    const auto rank = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count_))));
    std::uint64_t seen = 0;
    for (std::size_t b = 0; b < kBuckets; ++b) {
      seen += counts_[b];
      if (seen >= rank) return b == kBuckets - 1 ? max_us_ : std::min(upper_edge_us(b), max_us_);
    }
    return max_us_;
  }

  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t count_ = 0;
  double sum_us_ = 0;
  double max_us_ = 0;
};

}  // namespace jitembed::batching::detail
