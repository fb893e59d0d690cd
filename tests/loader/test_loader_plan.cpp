// Distribution and reproducibility of jit_loader: rank partitioning (W = 1..4, N not divisible), the
// deterministic shuffle (seed, epoch), and checkpoint / resume mid-epoch in both delivery orders.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "loader/loader_test_util.hpp"

using namespace loader_test;
using loader::jit_loader;
using loader::epoch_plan;

TEST_CASE("plan: ranks split N into ceil/floor shares with equal step counts, no padding") {
  for (std::uint64_t n : {0, 1, 2, 7, 23, 24, 25, 100}) {
    for (std::uint64_t w : {1, 2, 3, 4, 5}) {
      for (std::uint64_t b : {1, 3, 4, 8}) {
        CAPTURE(n);
        CAPTURE(w);
        CAPTURE(b);
        std::vector<int> seen(n, 0);
        std::uint64_t steps = 0;
        for (std::uint64_t r = 0; r < w; ++r) {
          const auto p = epoch_plan::make(n, w, r, b, 11, 2, true);
          if (r == 0) steps = p.steps();
          CHECK(p.steps() == steps);
          CHECK((p.count() == (n + w - 1) / w || p.count() == n / w));
          std::uint64_t total = 0;
          for (std::uint64_t k = 0; k < p.steps(); ++k) {
            const auto sz = p.step_size(k);
            if (k + 1 < p.steps()) CHECK(sz == b);  // only the last step may be smaller
            CHECK(sz <= b);
            total += sz;
          }
          CHECK(total == p.count());
          for (std::uint64_t j = 0; j < p.count(); ++j) ++seen[p.index(j)];
        }
        CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
      }
    }
  }
}

TEST_CASE("plan: the permutation depends on seed and epoch only, and is a permutation") {
  const auto a = loader::epoch_permutation(1000, 5, 0, true);
  CHECK(a == loader::epoch_permutation(1000, 5, 0, true));
  CHECK(a != loader::epoch_permutation(1000, 5, 1, true));
  CHECK(a != loader::epoch_permutation(1000, 6, 0, true));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::uint64_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  CHECK(sorted == iota);
  CHECK(loader::epoch_permutation(1000, 5, 0, false) == iota);
  // Pinned values: the same permutation on every platform and standard library.
  const auto small = loader::epoch_permutation(8, 1, 0, true);
  std::vector<std::uint64_t> copy = small;
  std::sort(copy.begin(), copy.end());
  CHECK(copy == std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(small == std::vector<std::uint64_t>{0, 3, 4, 6, 5, 7, 2, 1});
}

TEST_CASE("ranks W = 1..4 over N = 23: disjoint, complete, equal steps, ceil/floor sizes, same permutation") {
  temp_dataset ds(23);
  auto c = local_client(2);
  for (std::size_t w = 1; w <= 4; ++w) {
    CAPTURE(w);
    std::vector<int> seen(23, 0);
    std::size_t steps = 0;
    std::vector<std::uint64_t> global(23, ~std::uint64_t{0});  // position in the shared permutation -> index
    for (std::size_t r = 0; r < w; ++r) {
      auto o = base_options();
      o.world_size = w;
      o.rank = r;
      o.shuffle = true;
      o.seed = 1234;
      o.batch_size = 3;
      auto l = jit_loader::create(ds.data, c, o);
      REQUIRE(l.has_value());
      auto d = drain(*l);
      if (r == 0) steps = d.step_sizes.size();
      CHECK(d.step_sizes.size() == steps);
      CHECK(d.step_sizes.size() == l->steps_per_epoch());
      const std::size_t share = d.order.size();
      CHECK((share == (23 + w - 1) / w || share == 23 / w));
      CHECK(share == (r < 23 % w || 23 % w == 0 ? (23 + w - 1) / w : 23 / w));
      for (std::size_t k = 0; k + 1 < d.step_sizes.size(); ++k) CHECK(d.step_sizes[k] == 3);
      for (std::size_t j = 0; j < d.order.size(); ++j) {
        ++seen[d.order[j]];
        global[j * w + r] = d.order[j];
      }
      for (const auto& s : d.samples) check_against_reference(ds.data, s);
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    // Rank r's j-th sample is the shared permutation's entry j * W + r.
    CHECK(global == loader::epoch_permutation(23, 1234, 0, true));
  }
}

TEST_CASE("shuffle: the same seed gives the same order, a new epoch or seed another") {
  temp_dataset ds(17);
  auto c = local_client(2);
  auto order_of = [&](std::uint64_t seed, int epochs) {
    auto o = base_options();
    o.shuffle = true;
    o.seed = seed;
    auto l = jit_loader::create(ds.data, c, o);
    REQUIRE(l.has_value());
    std::vector<std::vector<std::uint64_t>> out;
    for (int e = 0; e < epochs; ++e) out.push_back(drain(*l).order);
    return out;
  };
  const auto a = order_of(42, 2), b = order_of(42, 2), other = order_of(43, 1);
  CHECK(a == b);
  CHECK(a[0] != a[1]);
  CHECK(a[0] != other[0]);
  CHECK(a[0] == loader::epoch_permutation(17, 42, 0, true));
  CHECK(a[1] == loader::epoch_permutation(17, 42, 1, true));
}

namespace {

void check_resume(loader::delivery_order order, std::size_t world, std::size_t rank) {
  temp_dataset ds(29);
  auto c = local_client(2);
  auto o = base_options();
  o.order = order;
  o.shuffle = true;
  o.seed = 99;
  o.world_size = world;
  o.rank = rank;
  std::vector<std::uint64_t> first, full;
  byte_buffer saved;
  {
    auto l = jit_loader::create(ds.data, c, o);
    REQUIRE(l.has_value());
    const auto d = drain(*l, 2);
    first = d.order;
    saved = l->state();
    // Samples were prefetched past the checkpoint: they must come again after resume, exactly once.
    CHECK(l->stats().buffered > 0);
  }
  {
    auto l = jit_loader::create(ds.data, c, o);
    REQUIRE(l.has_value());
    full = drain(*l).order;
  }
  auto o2 = o;
  o2.resume = saved;
  auto l = jit_loader::create(ds.data, c, o2);
  REQUIRE_MESSAGE(l.has_value(), l.error().message);
  CHECK(l->stats().step == 2);
  const auto rest = drain(*l);
  std::vector<std::uint64_t> all = first;
  all.insert(all.end(), rest.order.begin(), rest.order.end());
  CHECK(rest.step_sizes.size() + 2 == l->steps_per_epoch());
  if (order == loader::delivery_order::dataset) CHECK(all == full);
  std::sort(all.begin(), all.end());
  std::sort(full.begin(), full.end());
  CHECK(all == full);  // exactly the samples not yet delivered, each once
  for (const auto& s : rest.samples) check_against_reference(ds.data, s);
  // The next epoch continues from the resumed one.
  auto next_epoch = drain(*l);
  CHECK(next_epoch.order.size() == full.size());
  CHECK(l->epoch() == 2);
}

}  // namespace

TEST_CASE("checkpoint / resume mid-epoch delivers exactly the rest") {
  SUBCASE("dataset order, one rank") { check_resume(loader::delivery_order::dataset, 1, 0); }
  SUBCASE("dataset order, rank 2 of 3") { check_resume(loader::delivery_order::dataset, 3, 2); }
  SUBCASE("completion order") { check_resume(loader::delivery_order::completion, 1, 0); }
}

TEST_CASE("resume refuses a state of another configuration or damaged bytes") {
  temp_dataset ds(10);
  auto c = local_client(1);
  auto o = base_options();
  o.shuffle = true;
  byte_buffer saved;
  {
    auto l = jit_loader::create(ds.data, c, o);
    REQUIRE(l.has_value());
    drain(*l, 1);
    saved = l->state();
  }
  auto o2 = o;
  o2.resume = saved;
  o2.seed = 5;
  auto l = jit_loader::create(ds.data, c, o2);
  REQUIRE_FALSE(l.has_value());
  CHECK(l.error().code == errc::invalid_argument);
  CHECK(l.error().message.find("seed") != std::string::npos);
  o2 = o;
  o2.resume = saved;
  o2.resume[20] ^= std::byte{1};
  l = jit_loader::create(ds.data, c, o2);
  REQUIRE_FALSE(l.has_value());
  CHECK(l.error().code == errc::checksum_mismatch);
  o2.resume = byte_buffer(saved.begin(), saved.begin() + 10);
  l = jit_loader::create(ds.data, c, o2);
  REQUIRE_FALSE(l.has_value());
  CHECK(l.error().code == errc::truncated);
}
