// A closed-loop load generator over jit_client for the client benchmarks: `concurrency` requests in flight,
// each completion submitting the next, counted after a 0.3 s warm-up.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "jitembed/client/jit_client.hpp"

namespace jitembed::bench {

// Completed requests per second (make() builds each request); the first error's message into first_error.
// A request that fails ends its loop.
inline double drive(jitembed::client::jit_client& c, const std::function<jitembed::client::embed_request()>& make,
                    int concurrency, double seconds, std::string& first_error) {
  using clock_type = std::chrono::steady_clock;
  std::atomic<int> phase{0};  // 0 warm-up, 1 measure, 2 stop
  std::atomic<std::uint64_t> ok{0};
  std::mutex mu;
  std::condition_variable cv;
  int live = concurrency;
  std::function<void()> submit = [&] {
    c.embed(make(), [&](jitembed::result<jitembed::client::embed_result> res) {
      const int ph = phase.load(std::memory_order_acquire);
      if (ph == 1 && res) ok.fetch_add(1, std::memory_order_relaxed);
      if (!res) {
        std::lock_guard lk(mu);
        if (first_error.empty()) first_error = res.error().message;
      }
      if (ph == 2 || !res) {
        std::lock_guard lk(mu);
        if (--live == 0) cv.notify_all();
        return;
      }
      submit();
    });
  };
  for (int i = 0; i < concurrency; ++i) submit();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = clock_type::now();
  phase.store(1, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  phase.store(2, std::memory_order_release);
  const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  std::unique_lock lk(mu);
  cv.wait_for(lk, std::chrono::seconds(60), [&] { return live == 0; });
  return static_cast<double>(ok.load()) / s;
}

}  // namespace jitembed::bench
