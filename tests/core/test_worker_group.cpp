// worker_group (the library's one way to start and join threads) and thread_pool on top of it.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <stop_token>
#include <thread>
#include <vector>

#include "jitembed/core/thread_pool.hpp"
#include "jitembed/core/worker_group.hpp"

using namespace jitembed;

TEST_CASE("worker_group: n threads, one index each, stop() ends threads that watch their token") {
  std::mutex mu;
  std::set<std::size_t> seen;
  std::set<std::thread::id> ids;
  std::atomic<int> running{0};
  worker_group g(4, [&](std::stop_token token, std::size_t i) {
    {
      std::lock_guard lock(mu);
      seen.insert(i);
      ids.insert(std::this_thread::get_id());
    }
    ++running;
    while (!token.stop_requested()) std::this_thread::yield();
    --running;
  });
  CHECK(g.size() == 4);
  while (running.load() < 4) std::this_thread::yield();
  g.stop();
  CHECK(g.empty());
  CHECK(running.load() == 0);
  CHECK(seen == std::set<std::size_t>{0, 1, 2, 3});
  CHECK(ids.size() == 4);
  CHECK_FALSE(ids.count(std::this_thread::get_id()));
}

TEST_CASE("worker_group: join() waits without asking to stop, a stop callback wakes a blocked thread") {
  std::atomic<bool> stopped_early{false};
  std::atomic<int> done{0};
  worker_group finishing(3, [&](std::stop_token token, std::size_t) {
    for (int i = 0; i < 1000; ++i) std::this_thread::yield();
    if (token.stop_requested()) stopped_early = true;
    ++done;
  });
  finishing.join();
  CHECK(done.load() == 3);
  CHECK_FALSE(stopped_early.load());

  // A thread blocked on something that does not watch the token (a future here, an io_context in the
  // library) registers a stop_callback that wakes it.
  std::promise<void> wake;
  std::shared_future<void> woken = wake.get_future().share();
  std::once_flag once;
  worker_group blocked(1, [&](std::stop_token token, std::size_t) {
    std::stop_callback cb(token, [&] { std::call_once(once, [&] { wake.set_value(); }); });
    woken.wait();
  });
  blocked.stop();  // returns: the callback released the wait
  CHECK(woken.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
}

TEST_CASE("worker_group: movable, a thread that ends its own group is detached, not self-joined") {
  std::atomic<int> ran{0};
  worker_group a(2, [&](std::stop_token token, std::size_t) {
    ++ran;
    while (!token.stop_requested()) std::this_thread::yield();
  });
  worker_group b = std::move(a);
  CHECK(a.empty());  // NOLINT(bugprone-use-after-move): a moved-from group is empty
  CHECK(b.size() == 2);
  b = worker_group();  // move-assigning stops (and joins) what b ran
  CHECK(ran.load() == 2);
  CHECK(b.empty());

  // The worker joins the group that runs it: join() detaches that one thread instead of deadlocking.
  worker_group self_ending;
  std::promise<void> started;
  std::shared_future<void> go = started.get_future().share();
  std::atomic<bool> finished{false};
  worker_group* g = &self_ending;
  self_ending = worker_group(1, [g, go, &finished](std::stop_token, std::size_t) {
    go.wait();  // until the group is assigned
    g->join();
    finished = true;
  });
  started.set_value();
  while (!finished.load()) std::this_thread::yield();
  CHECK(self_ending.empty());
}

TEST_CASE("thread_pool on worker_group: stopping drains the queue first") {
  std::atomic<int> ran{0};
  {
    thread_pool pool(2);
    for (int i = 0; i < 50; ++i) {
      (void)pool.submit([&] {
        for (int k = 0; k < 100; ++k) std::this_thread::yield();
        ++ran;
      });
    }
  }  // the destructor stops: every queued job still runs
  CHECK(ran.load() == 50);
  thread_pool moved_from(1);
  thread_pool pool = std::move(moved_from);
  CHECK(pool.size() == 1);
  CHECK(pool.submit([] { return 5; }).get() == 5);
}
