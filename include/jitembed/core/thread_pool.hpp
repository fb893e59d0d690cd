// A small fixed-size thread pool: submit() returns a future; parallel_for() splits an index range.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace jitembed {

// Movable: the queue and the workers live behind a pointer the workers hold, so moving the pool moves
// only that pointer (work in flight is untouched); a moved-from pool may only be destroyed or assigned to.
class thread_pool {
 public:
  explicit thread_pool(std::size_t threads = std::max(1u, std::thread::hardware_concurrency()))
      : s_(std::make_unique<state>()) {
    threads = std::max<std::size_t>(threads, 1);
    s_->workers.reserve(threads);
    for (std::size_t i = 0; i < threads; ++i) s_->workers.emplace_back([s = s_.get()] { s->run(); });
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  thread_pool(thread_pool&&) noexcept = default;
  thread_pool& operator=(thread_pool&& o) noexcept {
    if (this != &o) {
      stop();
      s_ = std::move(o.s_);
    }
    return *this;
  }
  ~thread_pool() { stop(); }

  std::size_t size() const noexcept { return s_->workers.size(); }

  template <class F>
  auto submit(F&& f) -> std::future<std::invoke_result_t<std::decay_t<F>>> {
    using R = std::invoke_result_t<std::decay_t<F>>;
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(f));
    auto fut = task->get_future();
    {
      std::lock_guard lock(s_->mu);
      s_->queue.emplace_back([task] { (*task)(); });
    }
    s_->cv.notify_one();
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
  struct state {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> queue;
    bool stopping = false;
    std::vector<std::thread> workers;

    void run() {
      for (;;) {
        std::function<void()> job;
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [this] { return stopping || !queue.empty(); });
          if (queue.empty()) return;  // stopping and drained
          job = std::move(queue.front());
          queue.pop_front();
        }
        job();
      }
    }
  };

  // Drains the queue and joins the workers (a moved-from pool has nothing to stop).
  void stop() noexcept {
    if (!s_) return;
    {
      std::lock_guard lock(s_->mu);
      s_->stopping = true;
    }
    s_->cv.notify_all();
    for (auto& t : s_->workers) t.join();
    s_.reset();
  }

  std::unique_ptr<state> s_;
};

}  // namespace jitembed
