// worker_group: the one way the library starts and joins its own threads (the thread pool, the batcher's
// runners, the HTTP server's and the TCP store's I/O threads, the JIT client's I/O threads, endpoint watcher
// and local-mode workers, the loader's workers).
#pragma once

#include <cstddef>
#include <stop_token>
#include <thread>
#include <utility>
#include <vector>

namespace jitembed {

// A fixed group of std::jthreads started together, each running fn(std::stop_token, index).
// - Starting is all or nothing: when thread k cannot start (std::system_error), threads 0..k-1 are asked to
//   stop and joined before the error is thrown, so no thread outlives a failed start. A function whose
//   threads block elsewhere (an io_context) registers a std::stop_callback on its token to wake them.
// - request_stop() asks every thread to stop (their tokens); join() waits for them without asking; stop()
//   does both. The destructor stops. A thread that joins its own group (a callback ending the object that
//   runs it) is detached instead: it cannot wait for itself, and it is already on its way out.
// Movable (a moved-from group is empty); not copyable. join() and stop() are not thread-safe against
// each other: one owner calls them (the objects above do so under their own lock or once).
class worker_group {
 public:
  worker_group() = default;

  template <class F>
  worker_group(std::size_t n, F fn) {
    threads_.reserve(n);
    try {
      for (std::size_t i = 0; i < n; ++i) {
        threads_.emplace_back([fn, i](std::stop_token token) mutable { fn(std::move(token), i); });
      }
    } catch (...) {
      stop();
      throw;
    }
  }

  worker_group(worker_group&&) noexcept = default;
  worker_group& operator=(worker_group&& o) noexcept {
    if (this != &o) {
      stop();
      threads_ = std::move(o.threads_);
    }
    return *this;
  }
  worker_group(const worker_group&) = delete;
  worker_group& operator=(const worker_group&) = delete;
  ~worker_group() { stop(); }

  std::size_t size() const noexcept { return threads_.size(); }
  bool empty() const noexcept { return threads_.empty(); }

  void request_stop() noexcept {
    for (auto& t : threads_) t.request_stop();
  }

  // Waits for every thread to return (the calling thread, if it is one of them, is detached instead).
  void join() noexcept {
    const auto self = std::this_thread::get_id();
    for (auto& t : threads_) {
      if (!t.joinable()) continue;
      if (t.get_id() == self) {
        t.detach();
      } else {
        t.join();
      }
    }
    threads_.clear();
  }

  void stop() noexcept {
    request_stop();
    join();
  }

 private:
  std::vector<std::jthread> threads_;
};

}  // namespace jitembed
