// core_detail::capture, the one exception -> result ladder (docs/api.md rule 1.1): every rung.
#include <doctest/doctest.h>

#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>

#include "jitembed/core/detail/capture.hpp"

using namespace jitembed;
using jitembed::core_detail::capture;

TEST_CASE("capture: values and results pass through, void becomes result<void>") {
  const result<int> v = capture("op", [] { return 7; });
  REQUIRE(v);
  CHECK(*v == 7);
  const result<int> r = capture("op", []() -> result<int> { return fail(errc::not_found, "op: missing"); });
  CHECK(r.code() == errc::not_found);
  CHECK(r.error().message == "op: missing");
  int calls = 0;
  const result<void> done = capture("op", [&] { ++calls; });
  CHECK(done.has_value());
  CHECK(calls == 1);
  // A move-only value moves through.
  const result<std::unique_ptr<int>> p = capture("op", [] { return std::make_unique<int>(3); });
  REQUIRE(p);
  CHECK(**p == 3);
}

TEST_CASE("capture: what is thrown becomes the result's errc") {
  const auto thrown = capture("op", []() -> int { throw error(errc::timeout, "op: too slow"); });
  CHECK(thrown.code() == errc::timeout);
  CHECK(thrown.error().message == "op: too slow");

  const auto oom = capture("alloc", []() -> result<void> { throw std::bad_alloc(); });
  CHECK(oom.code() == errc::resource_exhausted);
  CHECK(oom.error().message == "alloc: out of memory");

  // What std::thread throws when the system has no thread to spare: resource_exhausted (retryable).
  const auto no_thread = capture("start", [] {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again), "thread");
  });
  CHECK(no_thread.code() == errc::resource_exhausted);
  CHECK(no_thread.error().message.starts_with("start: thread"));
  // Any other system_error is a bug here: internal.
  const auto other =
      capture("start", [] { throw std::system_error(std::make_error_code(std::errc::invalid_argument), "x"); });
  CHECK(other.code() == errc::internal);

  const auto logic = capture("op", [] { throw std::logic_error("broken"); });
  CHECK(logic.code() == errc::internal);
  CHECK(logic.error().message == "op: broken");

  const auto odd = capture("op", [] { throw 42; });
  CHECK(odd.code() == errc::internal);
  CHECK(odd.error().message == "op: unknown exception");
}
