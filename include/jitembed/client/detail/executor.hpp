// The client's executor: one Asio io_context run by the client's I/O threads, on which every user callback,
// timer and transport completion runs (gRPC's and the local workers' threads post theirs here).
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <utility>

#include "jitembed/core/worker_group.hpp"

namespace jitembed::client::detail {

namespace asio = boost::asio;
using clock = std::chrono::steady_clock;

// A timer armed on the executor: cancel() stops it (the function then never runs).
class scheduled {
 public:
  explicit scheduled(asio::io_context& ioc) : timer_(ioc) {}
  void cancel() { timer_.cancel(); }

 private:
  friend class client_executor;
  asio::steady_timer timer_;
};

class client_executor {
 public:
  client_executor() : work_(asio::make_work_guard(ioc_)) {}
  client_executor(const client_executor&) = delete;
  client_executor& operator=(const client_executor&) = delete;
  ~client_executor() { stop(std::chrono::milliseconds(0)); }

  // The I/O threads (throws worker_group's std::system_error, after stopping the threads already started).
  void start(std::size_t threads) {
    {
      std::lock_guard lk(count_->mu);
      count_->running = threads;
    }
    // The count is shared with the threads: one detached by stop() (an I/O thread closing its own client)
    // may return from run() after the executor is gone.
    threads_ = worker_group(threads, [this, count = count_](std::stop_token stop, std::size_t) {
      {
        std::stop_callback wake(stop, [this] { ioc_.stop(); });  // only a failed start asks: stop() stops ioc_ itself
        ioc_.run();
      }
      std::lock_guard lk(count->mu);
      --count->running;
      count->ran_out.notify_all();
    });
  }

  asio::io_context& context() noexcept { return ioc_; }

  // Runs `fn` on an I/O thread.
  template <class F>
  void post(F&& fn) {
    asio::post(ioc_, std::forward<F>(fn));
  }

  // Runs `fn` on an I/O thread at `when` unless the returned timer is cancelled first; `reuse` (a timer
  // from an earlier call, maybe the one running `fn` now) is re-armed instead of making another.
  std::shared_ptr<scheduled> at(clock::time_point when, std::function<void()> fn,
                                std::shared_ptr<scheduled> reuse = nullptr) {
    auto s = reuse ? std::move(reuse) : std::make_shared<scheduled>(ioc_);
    s->timer_.expires_at(when);
    s->timer_.async_wait([fn = std::move(fn)](boost::system::error_code ec) {
      if (!ec) fn();
    });
    return s;
  }

  // Lets the loop run out of work, for at most `grace` (the handlers already queued run: user callbacks
  // posted before close()), then stops it, joins the threads and runs what is still queued on this thread,
  // so that no posted callback is lost. An I/O thread stopping its own executor (a callback closing its
  // client) is detached instead and cannot run the rest: the handlers queued behind its own are dropped.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000)) {
    work_.reset();
    const bool own = ioc_.get_executor().running_in_this_thread();
    if (grace.count() > 0 && !own) {
      std::unique_lock lk(count_->mu);
      count_->ran_out.wait_for(lk, grace, [&] { return count_->running == 0; });
    }
    ioc_.stop();
    threads_.join();
    if (!own) {
      ioc_.restart();
      ioc_.poll();
    }
  }

 private:
  asio::io_context ioc_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  struct thread_count {
    std::mutex mu;
    std::condition_variable ran_out;  // an I/O thread's run() returned
    std::size_t running = 0;
  };
  std::shared_ptr<thread_count> count_ = std::make_shared<thread_count>();
  worker_group threads_;  // last: the threads use the members above
};

}  // namespace jitembed::client::detail
