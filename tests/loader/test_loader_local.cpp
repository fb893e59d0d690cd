// jit_loader over a local-mode client: dataset order, completion order, embeddings equal to the
// reference models, failed samples reported with their errc, cache warm epochs, back-pressure, options.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "jitembed/cache/memory_cache.hpp"
#include "loader/loader_test_util.hpp"

using namespace loader_test;
using loader::jit_loader;

TEST_CASE("dataset order: every sample once, in order, embeddings equal the reference") {
  temp_dataset ds(23, /*text_only=*/5);
  auto c = local_client();
  auto l = jit_loader::create(ds.data, c, base_options());
  REQUIRE_MESSAGE(l.has_value(), l.error().message);
  CHECK(l->steps_per_epoch() == 6);
  auto d = drain(*l);
  std::vector<std::uint64_t> want(23);
  std::iota(want.begin(), want.end(), 0);
  CHECK(d.order == want);
  CHECK(d.step_sizes == std::vector<std::size_t>{4, 4, 4, 4, 4, 3});
  for (const auto& s : d.samples) check_against_reference(ds.data, s);
  // The end of the epoch is reported once; then the next epoch starts.
  auto again = l->next();
  REQUIRE(again.has_value());
  CHECK(*again);
  CHECK((*again)->epoch == 1);
  const auto st = l->stats();
  CHECK(st.samples_delivered == 23 + 4);
  CHECK(st.samples_failed == 0);
  CHECK(st.max_buffered_seen <= 24);
}

TEST_CASE("completion order: every sample exactly once, the same step sizes") {
  temp_dataset ds(31);
  auto c = local_client(3);
  auto o = base_options();
  o.order = loader::delivery_order::completion;
  o.samples_per_request = 2;
  o.workers = 3;
  auto l = jit_loader::create(ds.data, c, o);
  REQUIRE(l.has_value());
  auto d = drain(*l);
  CHECK(d.step_sizes == std::vector<std::size_t>{4, 4, 4, 4, 4, 4, 4, 3});
  std::vector<std::uint64_t> got = d.order;
  std::sort(got.begin(), got.end());
  std::vector<std::uint64_t> want(31);
  std::iota(want.begin(), want.end(), 0);
  CHECK(got == want);
  for (const auto& s : d.samples) check_against_reference(ds.data, s);
}

TEST_CASE("a broken sample fails alone, with its errc, and is delivered") {
  temp_dataset ds(12, 0, {3, 7});
  auto c = local_client();
  auto l = jit_loader::create(ds.data, c, base_options());
  REQUIRE(l.has_value());
  auto d = drain(*l);
  REQUIRE(d.samples.size() == 12);
  const auto img = image_model();
  for (const auto& s : d.samples) {
    if (s.index == 3 || s.index == 7) {
      REQUIRE_FALSE(s.ok());
      auto src = ds.data.get(static_cast<std::size_t>(s.index)).value();
      const auto want = img.preprocess(src.first(format::field_kind::image)->bytes, {}).code();
      CHECK(want != errc::ok);
      CHECK(s.error->code == want);
      CHECK_FALSE(is_retryable(s.error->code));
      CHECK(s.error->message.find(src.id) != std::string::npos);
      CHECK(s.embeddings.empty());
    } else {
      check_against_reference(ds.data, s);
    }
  }
  CHECK(l->stats().samples_failed == 2);
}

TEST_CASE("cache: epoch 2 with a warm memory cache sends no request") {
  temp_dataset ds(20, 4);
  auto c = local_client();
  auto o = base_options();
  o.shuffle = true;
  o.seed = 7;
  o.cache = cache::any_store(std::in_place_type<cache::memory_cache>, std::size_t{64} << 20);
  auto l = jit_loader::create(ds.data, c, o);
  REQUIRE_MESSAGE(l.has_value(), l.error().message);
  auto e1 = drain(*l);
  REQUIRE(e1.samples.size() == 20);
  const auto s1 = l->stats();  // the loader may already be prefetching epoch 2 (from the cache)
  CHECK(s1.cache_misses == 20 + 15);  // 20 captions + 15 images
  CHECK(s1.cache_puts == 35);
  CHECK(s1.client.requests > 0);
  auto e2 = drain(*l);
  REQUIRE(e2.samples.size() == 20);
  CHECK(e2.order != e1.order);  // a new permutation
  const auto s2 = l->stats();
  CHECK(s2.client.requests == s1.client.requests);
  CHECK(s2.requests == s1.requests);
  CHECK(s2.cache_hits >= 35);  // epoch 3 may be prefetching (from the cache) already
  CHECK(s2.cache_misses == 35);
  for (const auto& s : e2.samples) check_against_reference(ds.data, s);

  // Per epoch: epoch 0 sent every request (35 misses), epoch 1 none (35 hits, prefetched or not); both ended.
  REQUIRE(s2.epochs.size() >= 2);
  const auto& p0 = s2.epochs[0];
  const auto& p1 = s2.epochs[1];
  CHECK(p0.epoch == 0);
  CHECK(p1.epoch == 1);
  for (const auto* p : {&p0, &p1}) {
    CHECK(p->ended);
    CHECK(p->steps == l->steps_per_epoch());
    CHECK(p->samples_delivered == 20);
    CHECK(p->samples_failed == 0);
    CHECK(p->wall_s > 0);
    CHECK(p->wait_s <= p->wall_s);
    CHECK(p->max_wait_s <= p->wait_s);
    CHECK(p->samples_per_s() > 0);
  }
  CHECK(p0.cache_misses == 35);
  CHECK(p0.cache_hits == 0);
  CHECK(p0.requests == s1.requests);
  CHECK(p0.rows_requested == s2.rows_requested);
  CHECK(p1.requests == 0);
  CHECK(p1.cache_hits == 35);
  CHECK(p1.cache_misses == 0);
  std::uint64_t delivered = 0, requests = 0, hits = 0;
  for (const auto& p : s2.epochs) {
    delivered += p.samples_delivered;
    requests += p.requests;
    hits += p.cache_hits;
  }
  CHECK(delivered == s2.samples_delivered);
  CHECK(requests == s2.requests);
  CHECK(hits == s2.cache_hits);
}

TEST_CASE("back-pressure: a trainer that does not call next() holds the loader at its bound") {
  temp_dataset ds(64);
  auto c = local_client();
  auto o = base_options();
  o.max_buffered = 8;
  o.samples_per_request = 4;
  o.batch_size = 4;
  auto l = jit_loader::create(ds.data, c, o);
  REQUIRE(l.has_value());
  REQUIRE(eventually([&] {
    const auto s = l->stats();
    return s.ready == 8 && s.chunks_in_flight == 0 && s.requests_in_flight == 0;
  }));
  // Nothing in flight and the window full: nothing more can start until next() is called.
  auto s = l->stats();
  CHECK(s.buffered == 8);
  CHECK(s.max_buffered_seen == 8);
  CHECK(s.rows_requested == 2 * 8);  // two models, 8 samples
  auto b = l->next();
  REQUIRE(b.has_value());
  REQUIRE(*b);
  CHECK((*b)->samples.size() == 4);
  REQUIRE(eventually([&] { return l->stats().ready == 8; }));
  s = l->stats();
  CHECK(s.max_buffered_seen == 8);
  CHECK(s.rows_requested == 2 * 12);
}

TEST_CASE("create validates its options") {
  temp_dataset ds(4);
  auto c = local_client(1);
  auto expect_invalid = [&](loader::loader_options o, std::string_view what) {
    auto l = jit_loader::create(ds.data, c, std::move(o));
    REQUIRE_FALSE(l.has_value());
    CHECK(l.error().code == errc::invalid_argument);
    CHECK_MESSAGE(l.error().message.find(what) != std::string::npos, l.error().message);
  };
  auto o = base_options();
  o.embeddings.clear();
  expect_invalid(o, "no embeddings");
  o = base_options();
  o.batch_size = 0;
  expect_invalid(o, "batch_size 0");
  o = base_options();
  o.rank = 2;
  o.world_size = 2;
  expect_invalid(o, "rank 2 not in [0, 2)");
  o = base_options();
  o.max_buffered = 3;
  expect_invalid(o, "max_buffered 3");
  o = base_options();
  o.embeddings.push_back(o.embeddings.front());
  expect_invalid(o, "given twice");
  o = base_options();
  o.embeddings[0].kind = static_cast<models::modality>(7);  // not a modality (e.g. a value read from a file)
  expect_invalid(o, "is not image, video or text");
  // An unknown model with a cache: its identity cannot be found.
  o = base_options();
  o.embeddings[0].model = "no-such-model";
  o.cache = cache::any_store(std::in_place_type<cache::memory_cache>, std::size_t{1} << 20);
  auto l = jit_loader::create(ds.data, c, o);
  REQUIRE_FALSE(l.has_value());
  CHECK(l.error().message.find("no-such-model") != std::string::npos);
}

TEST_CASE("close() while samples are in flight: next() fails with cancelled, nothing hangs") {
  temp_dataset ds(40);
  auto c = local_client();
  auto l = jit_loader::create(ds.data, c, base_options());
  REQUIRE(l.has_value());
  auto b = l->next();
  REQUIRE(b.has_value());
  l->close();
  l->close();
  auto after = l->next();
  REQUIRE_FALSE(after.has_value());
  CHECK(after.error().code == errc::cancelled);
}

TEST_CASE("a loader that owns its client, moved, keeps working") {
  temp_dataset ds(9);
  auto l = jit_loader::create(ds.data, local_client(), base_options());
  REQUIRE(l.has_value());
  jit_loader moved = std::move(*l);
  auto d = drain(moved);
  CHECK(d.order.size() == 9);
}

TEST_CASE("the next epoch is prefetched before the trainer reaches it") {
  temp_dataset ds(12);
  auto c = local_client();
  auto o = base_options();
  o.shuffle = true;
  o.seed = 5;
  auto l = jit_loader::create(ds.data, c, o);
  REQUIRE(l.has_value());
  const auto steps = l->steps_per_epoch();
  auto first = drain(*l, steps);  // every step of epoch 0, not yet the end-of-epoch nullopt
  CHECK(first.order.size() == 12);
  // Epoch 1's samples become ready while the trainer has not asked for them.
  REQUIRE(eventually([&] { return l->stats().ready >= 12; }));
  CHECK(l->stats().buffered == 12);
  CHECK(l->epoch() == 0);
  auto end = l->next();
  REQUIRE(end.has_value());
  CHECK_FALSE(*end);
  auto second = drain(*l);
  CHECK(second.order == loader::epoch_permutation(12, 5, 1, true));
  for (const auto& s : second.samples) check_against_reference(ds.data, s);
}

TEST_CASE("failed steps: all failed for the service fails next(), max_failed_fraction, fail_fast, wait_ready") {
  temp_dataset ds(8, 0, {0, 1, 2, 3, 5});  // steps of 4: step 0 all broken JPEGs, step 1 one
  auto c = local_client();
  auto o = base_options();
  o.embeddings = {{"latent", "image-latent", models::modality::image, "latent", ""}};
  SUBCASE("bad input fails samples, not steps, unless fail_fast") {
    auto l = jit_loader::create(ds.data, c, o);
    REQUIRE(l.has_value());
    auto d = drain(*l);
    CHECK(d.step_sizes == std::vector<std::size_t>{4, 4});
    // Each with its own error, also when every row of a request failed (samples 0-2: before, "no outputs")
    for (const auto& s : d.samples)
      if (!s.ok()) CHECK_MESSAGE(caller_action(s.error->code) == caller_move::fix_input, s.error->message);
    o.fail_fast = true;
    auto f = jit_loader::create(ds.data, c, o);  // waits for readiness first: local models are ready at once
    REQUIRE_MESSAGE(f.has_value(), f.error().message);
    auto s0 = f->next();
    REQUIRE_FALSE(s0.has_value());
    CHECK_MESSAGE(caller_action(s0.error().code) == caller_move::fix_input, s0.error().message);  // the junk "JPEG": bad input
    CHECK(s0.error().message.find("jit_loader: step 0 of epoch 0: 4 of 4 samples failed (fail_fast); endpoints: local models; "
                                  "first error: sample '") == 0);
    auto s1 = f->next();  // the failed step counts as delivered: the next one follows
    REQUIRE_FALSE(s1.has_value());
    CHECK(s1.error().message.find("step 1 of epoch 0: 1 of 4 samples failed (fail_fast)") != std::string::npos);
  }
  SUBCASE("a model nobody serves: every sample fails, so does the step; a fraction above 1 never") {
    temp_dataset good(8, /*text_only=*/2);  // odd samples have no image: they get no request, and do not fail
    o.embeddings = {{"latent", "no-such-model", models::modality::image, "", ""}};
    o.max_failed_fraction = 0.5;
    auto l = jit_loader::create(good.data, c, o);
    REQUIRE(l.has_value());
    auto s = l->next();
    REQUIRE_FALSE(s.has_value());
    CHECK(s.error().code == errc::not_found);
    CHECK(s.error().message.find("jit_loader: step 0 of epoch 0: 2 of 4 samples failed (max_failed_fraction 0.5); "
                                 "endpoints: local models; first error: sample '") == 0);
    o.max_failed_fraction = 1.0;  // the default: half failed is handed out
    auto h = jit_loader::create(good.data, c, o);
    REQUIRE(h.has_value());
    CHECK(drain(*h).step_sizes == std::vector<std::size_t>{4, 4});
    auto all = jit_loader::create(ds.data, c, o);  // every sample has an image: all 4 of a step fail
    REQUIRE(all.has_value());
    auto a0 = all->next();
    REQUIRE_FALSE(a0.has_value());
    CHECK(a0.error().message.find("step 0 of epoch 0: 4 of 4 samples failed (max_failed_fraction 1)") != std::string::npos);
    o.max_failed_fraction = 1.5;
    auto t = jit_loader::create(good.data, c, o);
    REQUIRE(t.has_value());
    CHECK(drain(*t).step_sizes == std::vector<std::size_t>{4, 4});
    o.max_failed_fraction = -1;
    CHECK(jit_loader::create(ds.data, c, o).error().code == errc::invalid_argument);
  }
  SUBCASE("wait_ready") {
    CHECK(c.wait_ready({"image-latent", "text-embed"}, std::chrono::milliseconds(100)).has_value());
    auto r = c.wait_ready({"nope"}, std::chrono::milliseconds(100));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == errc::not_found);
    CHECK(r.error().message.find("client: local models do not serve 'nope'") == 0);
    CHECK(c.wait_ready({}, std::chrono::milliseconds(100)).error().code == errc::invalid_argument);
    o.embeddings = {{"latent", "no-such-model", models::modality::image, "", ""}};
    o.ready_timeout = std::chrono::milliseconds(100);
    auto l = jit_loader::create(ds.data, c, o);
    REQUIRE_FALSE(l.has_value());
    CHECK(l.error().message.find("jit_loader: client: local models do not serve 'no-such-model'") == 0);
  }
}
