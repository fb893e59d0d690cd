// A trainer's path: steps() ranges over epochs, collate() into [B, ...], own(), status() after close(),
// the copyable client handle and the future overload's stop_token.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <stop_token>

#include "jitembed/models/emulated_latency.hpp"
#include "loader/loader_test_util.hpp"

using namespace loader_test;
using loader::jit_loader;

TEST_CASE("steps(): one range per epoch, every sample once, then the next epoch") {
  temp_dataset ds(10, /*text_only=*/0);
  auto c = local_client();
  auto l = jit_loader::create(ds.data, c, base_options());
  REQUIRE_MESSAGE(l.has_value(), l.error().message);
  for (std::uint64_t e = 0; e < 2; ++e) {
    std::vector<std::uint64_t> seen;
    std::vector<std::uint64_t> steps;
    for (loader::step& step : l->steps()) {
      CHECK(step.epoch == e);
      steps.push_back(step.index);
      for (const auto& s : step.samples) seen.push_back(s.index);
    }
    CHECK(l->status().has_value());
    std::sort(seen.begin(), seen.end());
    std::vector<std::uint64_t> want(10);
    std::iota(want.begin(), want.end(), 0);
    CHECK(seen == want);
    CHECK(steps == std::vector<std::uint64_t>{0, 1, 2});
  }
}

TEST_CASE("steps(): a loop left by break resumes the same epoch, close() ends it with cancelled") {
  temp_dataset ds(12);
  auto c = local_client();
  auto l = jit_loader::create(ds.data, c, base_options());
  REQUIRE(l.has_value());
  std::vector<std::uint64_t> steps;
  for (loader::step& step : l->steps()) {
    steps.push_back(step.index);
    break;
  }
  for (loader::step& step : l->steps()) steps.push_back(step.index);
  CHECK(steps == std::vector<std::uint64_t>{0, 1, 2});
  l->close();
  std::size_t after = 0;
  for (loader::step& step : l->steps()) after += step.samples.size();
  CHECK(after == 0);
  CHECK(l->status().code() == errc::cancelled);
}

TEST_CASE("collate(): one [B, ...] tensor per field, equal to the rows, in its own storage") {
  temp_dataset ds(9, 0, {4});  // sample 4 is not a JPEG: it fails alone and is not a row
  auto c = local_client();
  auto l = jit_loader::create(ds.data, c, base_options());
  REQUIRE(l.has_value());
  std::size_t rows = 0;
  for (loader::step& step : l->steps()) {
    auto latent = step.collate("latent");
    REQUIRE_MESSAGE(latent.has_value(), latent.error().message);
    const loader::embedded_sample* first_ok = nullptr;
    for (const auto& s : step.samples)
      if (s.ok() && !first_ok) first_ok = &s;
    REQUIRE(first_ok != nullptr);
    const tensor* row = first_ok->find("latent");
    REQUIRE(row != nullptr);
    CHECK(latent->rank() == row->rank() + 1);
    CHECK(latent->size(0) == static_cast<std::int64_t>(step.ok_count()));
    CHECK(latent->owner() != row->owner());
    std::size_t i = 0;
    for (const auto& s : step.samples) {
      if (!s.ok()) continue;
      const tensor* t = s.find("latent");
      CHECK(std::memcmp(static_cast<const std::byte*>(latent->data()) + i * t->nbytes(), t->data(), t->nbytes()) == 0);
      ++i;
    }
    rows += i;
    auto tokens = step.collate("tokens");
    REQUIRE(tokens.has_value());
    CHECK(tokens->size(0) == latent->size(0));
    CHECK(step.collate("no-such-embedding").code() == errc::not_found);
  }
  CHECK(rows == 8);
}

TEST_CASE("collate(): rows that differ, a missing field, no rows") {
  loader::step b;
  b.samples.resize(2);
  b.samples[0].id = "a";
  b.samples[1].id = "b";
  b.samples[0].embeddings = {{"x", tensor::zeros(shape{2, 3}, dtype::f32)}};
  b.samples[1].embeddings = {{"x", tensor::zeros(shape{3, 2}, dtype::f32)}};
  auto r = b.collate("x");
  CHECK(r.code() == errc::invalid_argument);
  CHECK(r.error().message.find("row 1") != std::string::npos);
  b.samples[1].embeddings = {{"x", tensor::zeros(shape{2, 3}, dtype::f16)}};
  CHECK(b.collate("x").code() == errc::invalid_argument);
  b.samples[1].embeddings.clear();
  auto missing = b.collate("x");
  CHECK(missing.code() == errc::not_found);
  CHECK(missing.error().message.find("'b'") != std::string::npos);
  b.samples[1].error = fail(errc::decode_failed, "bad");  // a failed sample is not a row
  auto one = b.collate("x");
  REQUIRE(one.has_value());
  CHECK(one->shape() == shape{1, 2, 3});
  b.samples[0].error = fail(errc::decode_failed, "bad");
  CHECK(b.collate("x").code() == errc::invalid_argument);
}

TEST_CASE("own(): the sample's tensors no longer share the response buffer") {
  temp_dataset ds(4);
  auto c = local_client();
  auto o = base_options();
  o.samples_per_request = 4;
  auto l = jit_loader::create(ds.data, c, o);
  REQUIRE(l.has_value());
  auto b = l->next();
  REQUIRE(b.has_value());
  REQUIRE(*b);
  auto& s = (*b)->samples.at(0);
  REQUIRE(s.ok());
  const tensor before = *s.find("latent");
  s.own();
  const tensor* after = s.find("latent");
  CHECK(after->owner() != before.owner());
  CHECK(same_bytes(*after, before));
}

TEST_CASE("jit_client is a copyable handle: copies share one client, close() closes every copy") {
  auto a = local_client();
  client::jit_client b = a;  // NOLINT: the copy is the point
  CHECK(b.local());
  {
    client::jit_client c = b;
    (void)c;
  }  // a copy going away does not close the others
  const std::string caption = "a caption";
  client::embed_request req;
  req.model = "text-embed";
  req.input = "text";
  req.rows = {as_bytes_view(caption)};
  auto f = b.embed(req);
  auto r = f.get();
  REQUIRE_MESSAGE(r.has_value(), r.error().message);
  a.close();
  auto g = b.embed(req).get();
  CHECK(g.code() == errc::cancelled);
}

TEST_CASE("the future overload is cancelled through its stop_token") {
  // A slow local model: the request is still queued or running when stop is requested.
  client::client_options o;
  o.local_models = {models::any_model(models::emulated_latency(text_model(), {std::chrono::milliseconds(300), {}}))};
  o.local_threads = 1;
  auto cl = client::jit_client::create(std::move(o)).value();
  const std::string caption = "a caption";
  client::embed_request req;
  req.model = "text-embed";
  req.input = "text";
  req.rows = {as_bytes_view(caption)};
  std::stop_source src;
  auto f = cl.embed(req, src.get_token());
  src.request_stop();
  auto r = f.get();
  CHECK(r.code() == errc::cancelled);
  // A token already stopped cancels at once; an unstopped one changes nothing.
  std::stop_source done;
  done.request_stop();
  CHECK(cl.embed(req, done.get_token()).get().code() == errc::cancelled);
  std::stop_source never;
  CHECK(cl.embed(req, never.get_token()).get().has_value());
}
