// Batching building blocks: the duration histogram, the per-caller sequencer, resolution buckets.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "jitembed/batching.hpp"
#include "jitembed/batching/detail/caller_sequencer.hpp"
#include "jitembed/batching/detail/histogram.hpp"

using namespace jitembed;
using namespace jitembed::batching;
using namespace std::chrono_literals;

TEST_CASE("duration histogram: quantiles within one bucket (19%) of the truth, capped at max") {
  detail::duration_histogram h;
  CHECK(h.summary().count == 0);
  CHECK(h.summary().p99_us == 0.0);
  for (int i = 1; i <= 1000; ++i) h.record(std::chrono::microseconds(i));
  const auto s = h.summary();
  CHECK(s.count == 1000);
  CHECK(s.sum_us == doctest::Approx(500500.0));
  CHECK(s.max_us == doctest::Approx(1000.0));
  CHECK(s.p50_us >= 500.0);
  CHECK(s.p50_us <= 500.0 * 1.19);
  CHECK(s.p90_us >= 900.0);
  CHECK(s.p90_us <= 1000.0);
  CHECK(s.p99_us >= 990.0);
  CHECK(s.p99_us <= 1000.0);
  CHECK(s.mean_us() == doctest::Approx(500.5));

  detail::duration_histogram tiny;
  tiny.record(0ns);
  tiny.record(500ns);
  CHECK(tiny.summary().p99_us == doctest::Approx(0.5));  // capped at max
  detail::duration_histogram huge;
  huge.record(std::chrono::hours(200));  // beyond the last edge: the overflow bucket reports max
  CHECK(huge.summary().p50_us == doctest::Approx(200.0 * 3600e6));
}

TEST_CASE("caller sequencer delivers in sequence order whatever order completions arrive in") {
  detail::caller_sequencer<int> seq;
  std::vector<int> out;
  auto deliver = [&](int v) { out.push_back(v); };
  for (int i = 0; i < 5; ++i) CHECK(seq.assign(42) == static_cast<std::uint64_t>(i));
  seq.complete(42, 3, 3, deliver);
  seq.complete(42, 1, 1, deliver);
  CHECK(out.empty());
  CHECK(seq.held() == 2);
  seq.complete(42, 0, 0, deliver);
  CHECK(out == std::vector<int>{0, 1});
  seq.complete(42, 4, 4, deliver);
  seq.complete(42, 2, 2, deliver);
  CHECK(out == std::vector<int>{0, 1, 2, 3, 4});
  CHECK(seq.held() == 0);
  CHECK(seq.callers() == 0);  // state is dropped when a caller has nothing outstanding
  CHECK(seq.assign(42) == 0);
}

TEST_CASE("resolution buckets pick the closest aspect ratio, then the closest area") {
  CHECK(resolution_buckets::create({}).code() == errc::invalid_argument);
  auto zero = resolution_buckets::create({{512, 0}});
  CHECK(zero.error().message == "resolution_buckets: bucket 0 is 512x0 (zero dimension)");
  CHECK(resolution_buckets::create({{512, 512}, {512, 512}}).error().message ==
        "resolution_buckets: bucket 1 repeats bucket 0");

  auto rb = resolution_buckets::create({{1024, 1024}, {768, 1344}, {1344, 768}, {512, 512}}).value();
  CHECK(rb.nearest(1000, 1000).value() == resolution{1024, 1024});  // same aspect, area closer to 1024^2
  CHECK(rb.nearest(400, 420).value() == resolution{512, 512});
  CHECK(rb.nearest(1080, 1920).value() == resolution{768, 1344});   // landscape 16:9
  CHECK(rb.nearest(1920, 1080).value() == resolution{1344, 768});
  CHECK(rb.nearest(0, 5).code() == errc::invalid_argument);
  CHECK(std::hash<resolution>{}({1, 2}) != std::hash<resolution>{}({2, 1}));
}
