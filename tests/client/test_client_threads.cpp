// The client's threads (local workers, I/O threads) start all or none: when the system has no thread to
// spare, jit_client::create says resource_exhausted, after stopping and joining the threads it started,
// instead of terminating the process. Run in a forked child whose address space is capped (RLIMIT_AS), so
// a thread's stack cannot be mapped (not under a sanitizer, which reserves far more address space).
#include <doctest/doctest.h>

#include <chrono>

#include "jitembed/client/jit_client.hpp"
#include "jitembed/models/text_embed.hpp"
#include "support/capped_child.hpp"

namespace {

namespace cl = jitembed::client;
using jitembed::test::run_capped;

// 0: create failed with resource_exhausted; 1: another code; 2: it succeeded.
int create_code(cl::client_options o) {
  auto c = cl::jit_client::create(std::move(o));
  if (c) return 2;
  return c.code() == jitembed::errc::resource_exhausted ? 0 : 1;
}

}  // namespace

#ifndef JITEMBED_TEST_SANITIZED
TEST_CASE("a client whose local workers cannot all start: resource_exhausted from create, no crash") {
  auto model = jitembed::models::text_embed::create({}).value();
  CHECK(run_capped([&] {
          cl::client_options o;
          o.local_models = {model};
          o.local_threads = 100000;  // 100000 stacks do not fit in 64 MiB
          return create_code(std::move(o));
        }) == 0);
}

TEST_CASE("a client whose I/O threads cannot all start: resource_exhausted, the started event loops stopped") {
  CHECK(run_capped([] {
          cl::client_options o;
          o.endpoints.list = {"http://127.0.0.1:1"};
          o.io_threads = 100000;
          return create_code(std::move(o));
        }) == 0);
}
#endif

TEST_CASE("close() wakes the endpoint watcher at once (its stop_token), not at its next refresh") {
  cl::client_options o;
  o.endpoints.list = {"http://127.0.0.1:1"};
  o.endpoints.refresh = std::chrono::hours(1);
  o.io_threads = 3;
  auto c = cl::jit_client::create(std::move(o));
  REQUIRE(c);
  const auto t0 = std::chrono::steady_clock::now();
  c->close();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
}
