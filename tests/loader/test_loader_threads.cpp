// jit_loader's workers start all or none: when the system has no thread to spare, create says
// resource_exhausted, after stopping the workers that started (they may already have sent requests, which
// the loader cancels and waits for), instead of terminating the process. Run in a forked child whose
// address space is capped (RLIMIT_AS; not under a sanitizer, which reserves far more address space).
#include <doctest/doctest.h>

#include <optional>

#include "loader/loader_test_util.hpp"
#include "support/capped_child.hpp"

#ifndef JITEMBED_TEST_SANITIZED
TEST_CASE("a loader whose workers cannot all start: resource_exhausted from create, no crash") {
  using namespace loader_test;
  temp_dataset ds(12);
  std::optional<client::jit_client> cc;
  const int rc = jitembed::test::run_capped(
      [&] {
        auto o = base_options();
        o.workers = 100000;  // 100000 stacks do not fit in 64 MiB
        auto l = loader::jit_loader::create(ds.data, *cc, o);
        return l ? 2 : l.code() == errc::resource_exhausted ? 0 : 1;
      },
      [&] { cc = local_client(); });  // made in the child, before the cap
  CHECK(rc == 0);
}
#endif
