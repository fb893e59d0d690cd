// A small fixed-size thread pool: submit() returns a future; parallel_for() splits an index range. Its threads
// are a worker_group (stopped through their stop_token).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>
#include <type_traits>
#include <vector>

#include "jitembed/core/worker_group.hpp"

namespace jitembed {

// Movable: the queue and the workers live behind a pointer the workers hold, so moving the pool moves
// only that pointer (work in flight is untouched); a moved-from pool may only be destroyed or assigned to.
class thread_pool {
 public:
  explicit thread_pool(std::size_t threads = std::max(1u, std::thread::hardware_concurrency()))
      : s_(std::make_unique<state>()) {
    s_->workers = worker_group(std::max<std::size_t>(threads, 1),
                               [s = s_.get()](std::stop_token token, std::size_t) { s->run(token); });
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
    std::condition_variable_any cv;  // waits on the workers' stop_token too
    std::deque<std::function<void()>> queue;
    worker_group workers;  // last: stopped (joined) before the queue it reads goes away

    void run(const std::stop_token& token) {
      for (;;) {
        std::function<void()> job;
        {
          std::unique_lock lock(mu);
          cv.wait(lock, token, [this] { return !queue.empty(); });
          if (queue.empty()) return;  // stop requested and drained
          job = std::move(queue.front());
          queue.pop_front();
        }
        job();
      }
    }
  };

  // Drains the queue and joins the workers (a moved-from pool has nothing to stop): a worker asked to stop
  // still takes jobs until the queue is empty.
  void stop() noexcept {
    if (!s_) return;
    s_->workers.stop();
    s_.reset();
  }

  std::unique_ptr<state> s_;
};

}  // namespace jitembed
