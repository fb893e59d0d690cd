// A small fixed-size thread pool: submit() returns a future; parallel_for() splits an index range.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace jitembed {

class thread_pool {
 public:
  explicit thread_pool(std::size_t threads = std::max(1u, std::thread::hardware_concurrency())) {
    threads = std::max<std::size_t>(threads, 1);
    workers_.reserve(threads);
    for (std::size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { run(); });
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  std::size_t size() const noexcept { return workers_.size(); }

  template <class F>
  auto submit(F&& f) -> std::future<std::invoke_result_t<std::decay_t<F>>> {
    using R = std::invoke_result_t<std::decay_t<F>>;
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(f));
    auto fut = task->get_future();
    {
      std::lock_guard lock(mu_);
      queue_.emplace_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return fut;
  }

  // Runs body(i) for i in [0, n) on the pool, in contiguous chunks; rethrows the first exception.
  template <class F>
  void parallel_for(std::size_t n, F&& body) {
    if (n == 0) return;
    const std::size_t chunks = std::min(n, size());
    std::vector<std::future<void>> futs;
    futs.reserve(chunks);
    for (std::size_t c = 0; c < chunks; ++c) {
      const std::size_t lo = n * c / chunks, hi = n * (c + 1) / chunks;
      futs.push_back(submit([lo, hi, &body] {
        for (std::size_t i = lo; i < hi; ++i) body(i);
      }));
    }
    for (auto& f : futs) f.wait();
    for (auto& f : futs) f.get();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace jitembed
