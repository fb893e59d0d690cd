// Memory accounting at tensor allocation (core/memory_account.hpp): live and peak bytes per tag, released with
// the storage, nested scopes, threads, and a budget that refuses with resource_exhausted and counts nothing.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "jitembed/core/memory_account.hpp"
#include "jitembed/core/tensor.hpp"

using namespace jitembed;

TEST_CASE("memory account: tensors count against the thread's scope and tag until their storage goes") {
  memory_account acc;
  tensor outside = tensor::empty(shape{1000}, dtype::f32);  // no scope: not counted
  CHECK(acc.usage().allocations == 0);
  {
    memory_scope enc(acc, "encoder");
    tensor a = tensor::empty(shape{256}, dtype::f32);     // 1024 bytes
    tensor b = tensor::zeros(shape{2, 128}, dtype::f64);  // 2048
    CHECK(acc.usage().live == 3072);
    {
      memory_scope llm(acc, "llm");  // nested: the inner tag until it ends
      tensor c = tensor::empty(shape{100}, dtype::u8);
      CHECK(acc.tag("llm").host.live == 100);
      tensor shared = c;  // a copy shares the storage: counted once
      CHECK(acc.usage().live == 3172);
    }
    CHECK(acc.tag("llm").host.live == 0);
    CHECK(acc.tag("llm").host.peak == 100);
    tensor d = tensor::empty(shape{10}, dtype::f32);  // back to "encoder"
    CHECK(acc.tag("encoder").host.live == 3112);
    a = tensor();
    CHECK(acc.tag("encoder").host.live == 2088);
  }
  CHECK(acc.usage().live == 0);
  CHECK(acc.usage().peak == 3172);
  CHECK(acc.tag("encoder").host.peak == 3112);
  CHECK(acc.tag("encoder").host.allocations == 3);
  CHECK(acc.usage().allocations == 4);
  const auto tags = acc.tags();
  REQUIRE(tags.size() == 2);
  CHECK(tags[0].tag == "encoder");
  CHECK(tags[1].tag == "llm");
  CHECK(tags[0].device.allocations == 0);
  acc.reset_peaks();
  CHECK(acc.usage().peak == 0);

  // a tensor that outlives its account and scope still releases safely
  tensor kept;
  {
    memory_account tmp;
    memory_scope s(tmp, "x");
    kept = tensor::empty(shape{64}, dtype::f32);
  }
  kept = tensor();
}

TEST_CASE("memory account: a host budget refuses the allocation that would pass it, with resource_exhausted only") {
  memory_account acc(memory_budget{.host = 4096});
  memory_scope s(acc, "encoder");
  tensor a = tensor::empty(shape{512}, dtype::f32);  // 2048
  tensor b = tensor::empty(shape{512}, dtype::f32);  // 4096: at the budget, allowed
  try {
    (void)tensor::empty(shape{1}, dtype::u8);
    FAIL("no error over the budget");
  } catch (const error& e) {
    CHECK(e.code() == errc::resource_exhausted);
    CHECK(e.message() ==
          "memory budget: host allocation of 1 bytes for 'encoder' would hold 4097 live bytes, over the budget of "
          "4096 (peak so far 4096)");
  }
  CHECK(acc.usage().live == 4096);  // nothing counted for the refused one
  CHECK(acc.usage().refused == 1);
  CHECK(acc.tag("encoder").host.refused == 1);
  b = tensor();
  CHECK_NOTHROW((void)tensor::empty(shape{512}, dtype::f32));  // room again
  // the direct call, as the device allocator uses it
  auto r = memory_account::charge_current(std::uint64_t{1} << 40, memory_kind::host);
  CHECK(r.code() == errc::resource_exhausted);
  auto dev = memory_account::charge_current(std::uint64_t{1} << 40, memory_kind::device);  // no device budget
  REQUIRE(dev.has_value());
  CHECK(acc.usage(memory_kind::device).live == std::uint64_t{1} << 40);
  dev->release();
  CHECK(acc.usage(memory_kind::device).live == 0);
}

TEST_CASE("memory account: threads with their own scopes on one account add up, peaks are per tag") {
  memory_account acc;
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      memory_scope s(acc, t % 2 ? "odd" : "even");
      for (int i = 0; i < 200; ++i) {
        tensor x = tensor::empty(shape{64}, dtype::f32);
        tensor y = tensor::empty(shape{64}, dtype::f32);
      }
    });
  for (auto& t : ts) t.join();
  CHECK(acc.usage().live == 0);
  CHECK(acc.usage().allocations == 1600);
  CHECK(acc.tag("odd").host.allocations == 800);
  CHECK(acc.tag("even").host.peak >= 512);
  CHECK(acc.tag("even").host.peak <= 1024);
}
