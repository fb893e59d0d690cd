// Shape bucketing for images: maps a height x width to the configured bucket resolution with the
// closest aspect ratio (as in aspect-ratio bucketing for diffusion training), to use as a BucketKey.
#pragma once

#include <cmath>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"

namespace jitembed::batching {

struct resolution {
  std::uint32_t height = 0;
  std::uint32_t width = 0;
  friend bool operator==(const resolution&, const resolution&) = default;
  friend auto operator<=>(const resolution&, const resolution&) = default;
};

class resolution_buckets {
 public:
  // Fails with invalid_argument for an empty list, a zero dimension or a resolution given twice.
  static result<resolution_buckets> create(std::vector<resolution> buckets) {
    if (buckets.empty()) return fail(errc::invalid_argument, "resolution_buckets: no buckets");
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      if (buckets[i].height == 0 || buckets[i].width == 0)
        return fail(errc::invalid_argument, "resolution_buckets: bucket " + std::to_string(i) + " is " +
                                                std::to_string(buckets[i].height) + "x" +
                                                std::to_string(buckets[i].width) + " (zero dimension)");
      for (std::size_t j = 0; j < i; ++j)
        if (buckets[j] == buckets[i])
          return fail(errc::invalid_argument, "resolution_buckets: bucket " + std::to_string(i) + " repeats bucket " +
                                                  std::to_string(j));
    }
    return resolution_buckets(std::move(buckets));
  }

  // The bucket whose aspect ratio is closest (|log(h/w) - log(bh/bw)|); ties go to the closest area
  // (|log(h*w) - log(bh*bw)|), then to the earlier bucket. Fails with invalid_argument for a zero dimension.
  result<resolution> nearest(std::uint32_t height, std::uint32_t width) const {
    if (height == 0 || width == 0)
      return fail(errc::invalid_argument, "resolution_buckets: image is " + std::to_string(height) + "x" +
                                              std::to_string(width) + " (zero dimension)");
    const double aspect = std::log(static_cast<double>(height)) - std::log(static_cast<double>(width));
    const double area = std::log(static_cast<double>(height)) + std::log(static_cast<double>(width));
    std::size_t best = 0;
    double best_a = 0, best_s = 0;
    for (std::size_t i = 0; i < buckets_.size(); ++i) {
      const double bh = std::log(static_cast<double>(buckets_[i].height));
      const double bw = std::log(static_cast<double>(buckets_[i].width));
      const double da = std::abs(aspect - (bh - bw));
      const double ds = std::abs(area - (bh + bw));
      constexpr double eps = 1e-12;
      if (i == 0 || da < best_a - eps || (std::abs(da - best_a) <= eps && ds < best_s - eps)) {
        best = i;
        best_a = da;
        best_s = ds;
      }
    }
    return buckets_[best];
  }

  std::span<const resolution> buckets() const noexcept { return buckets_; }

 private:
  explicit resolution_buckets(std::vector<resolution> b) : buckets_(std::move(b)) {}
  std::vector<resolution> buckets_;
};

}  // namespace jitembed::batching

template <>
struct std::hash<jitembed::batching::resolution> {
  std::size_t operator()(const jitembed::batching::resolution& r) const noexcept {
    return std::hash<std::uint64_t>{}((std::uint64_t{r.height} << 32) | r.width);
  }
};
