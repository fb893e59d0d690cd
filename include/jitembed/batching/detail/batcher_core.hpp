// detail::batcher_core: the queues, counters and threads behind batching::dynamic_batcher (scheduling
// internals in dynamic_batcher_impl.hpp). Users include jitembed/batching/dynamic_batcher.hpp.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <new>
#include <condition_variable>
#include <optional>
#include <set>
#include <span>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "jitembed/batching/detail/caller_sequencer.hpp"
#include "jitembed/batching/detail/completion.hpp"
#include "jitembed/batching/detail/histogram.hpp"
#include "jitembed/batching/errors.hpp"
#include "jitembed/batching/options.hpp"
#include "jitembed/batching/runner.hpp"
#include "jitembed/batching/stats.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/worker_group.hpp"

namespace jitembed::batching::detail {

// The state and threads of a dynamic_batcher (which owns one through a unique_ptr, so it stays movable while
// runner threads hold `this`). Thread-safe: submit, stats and shutdown may be called from any thread.
template <class Request, class Response, class BucketKey = std::monostate>
  requires std::movable<Request> && std::movable<Response> && std::equality_comparable<BucketKey> &&
           std::copyable<BucketKey>
class batcher_core {
 public:
  using request_type = Request;
  using response_type = Response;
  using bucket_type = BucketKey;
  using options_type = submit_options<BucketKey>;
  using callback_type = std::function<void(result<Response>)>;
  using runner_type =
      std::function<void(const batch_context<BucketKey>&, std::span<Request>, std::span<result<Response>>)>;
  using clock = std::chrono::steady_clock;

  // Starts options.runner_threads runner threads. `options` passed validate() (dynamic_batcher::create).
  // Throws what starting a thread throws (std::system_error), after stopping the threads it started (the
  // worker_group asks them to stop; their stop callback ends them as a shutdown would).
  batcher_core(batcher_options options, runner_type runner) : options_(std::move(options)), runner_(std::move(runner)) {
    std::sort(options_.preferred_batch_sizes.begin(), options_.preferred_batch_sizes.end());
    options_.preferred_batch_sizes.erase(
        std::unique(options_.preferred_batch_sizes.begin(), options_.preferred_batch_sizes.end()),
        options_.preferred_batch_sizes.end());
    batch_sizes_.assign(options_.max_batch_size + 1, 0);
    workers_ = worker_group(options_.runner_threads, [this](std::stop_token token, std::size_t i) {
      std::stop_callback wake(token, [this] { stop_waiting(); });
      worker_loop(i);
    });
  }

  batcher_core(const batcher_core&) = delete;
  batcher_core& operator=(const batcher_core&) = delete;

  // Drains: everything accepted runs (or times out) before the destructor returns.
  ~batcher_core() { shutdown(true); }

  // Queues one request; the future becomes ready with the runner's result or a batcher error
  // (errors.hpp). Never blocks: a full queue gives an already-ready future (queue_full).
  std::future<result<Response>> submit(Request request, options_type opts = {}) {
    std::promise<result<Response>> p;
    auto fut = p.get_future();
    enqueue(std::move(request), std::move(opts), detail::completion<Response>(std::move(p)));
    return fut;
  }

  // Queues one request; `callback(result<Response>)` is called exactly once: on this thread before submit
  // returns if the request is rejected, else on a runner thread. It must not throw (exceptions are
  // swallowed and counted) and must not call shutdown or destroy the batcher.
  template <class F>
    requires std::invocable<F&, result<Response>>
  void submit(Request request, options_type opts, F&& callback) {
    enqueue(std::move(request), std::move(opts),
            detail::completion<Response>(callback_type(std::forward<F>(callback))));
  }

  // Stops accepting requests (later submits fail with errc::unavailable). drain = true: everything queued
  // still runs, without waiting for max_queue_delay; drain = false: everything queued fails with
  // errc::cancelled.
  // Batches already running finish either way. Returns when every accepted request is delivered and
  // the runner threads have exited. Idempotent.
  void shutdown(bool drain = true) {
    std::vector<entry> dropped;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      if (!drain) {
        for (auto& b : buckets_)
          for (auto& q : b.by_priority)
            for (auto& e : q) dropped.push_back(std::move(e));
        buckets_.clear();
        deadlines_.clear();
        queued_ = 0;
        cancelled_ += dropped.size();
      }
    }
    cv_.notify_all();
    reaper_cv_.notify_all();
    for (auto& e : dropped) finish(std::move(e), detail::cancelled_error());
    std::lock_guard join_lock(join_mu_);
    workers_.join();
    // No submit starts the reaper once stopping_ is set (under mu_, above), so reading it here is safe.
    reaper_.join();
  }

  // A consistent snapshot of the counters and summaries.
  batcher_stats stats() const {
    batcher_stats s;
    {
      std::lock_guard lock(mu_);
      s.batch_sizes = batch_sizes_;
      s.queue_time = queue_time_.summary();
      s.compute_time = compute_time_.summary();
      s.batches = batches_;
      s.submitted = submitted_;
      s.accepted = accepted_;
      s.rejected_queue_full = rejected_queue_full_;
      s.rejected_invalid = rejected_invalid_;
      s.rejected_shut_down = rejected_shut_down_;
      s.rejected_expired = rejected_expired_;
      s.timed_out = timed_out_;
      s.cancelled = cancelled_;
      s.completed_ok = completed_ok_;
      s.completed_error = completed_error_;
      s.runner_exceptions = runner_exceptions_;
      s.queued = queued_;
      s.in_flight = in_flight_;
    }
    s.callback_exceptions = callback_exceptions_.load(std::memory_order_relaxed);
    s.held_for_order = sequencer_.held();
    return s;
  }

  batcher_load load() const {
    std::lock_guard lock(mu_);
    return {.queued = queued_, .in_flight = in_flight_};
  }

  // Requests accepted and not yet delivered to the runner's caller (queued + in flight).
  std::size_t pending() const {
    std::lock_guard lock(mu_);
    return queued_ + in_flight_;
  }

  const batcher_options& options() const noexcept { return options_; }

 private:
  static constexpr auto kNoDeadline = clock::time_point::max();

  struct entry {
    Request request;
    detail::completion<Response> done;
    clock::time_point enqueued;
    clock::time_point deadline;  // kNoDeadline: none
    std::chrono::microseconds timeout;
    bool by_deadline;            // `deadline` is submit_options::deadline (not enqueued + timeout)
    std::uint64_t caller;
    std::uint64_t seq;
  };

  struct bucket_queue {
    BucketKey key;
    std::vector<std::deque<entry>> by_priority;  // index = priority
    std::size_t size = 0;
  };

  struct held_completion {
    detail::completion<Response> done;
    result<Response> value;
  };

  static clock::time_point add_saturated(clock::time_point t, std::chrono::microseconds d) {
    const auto room = std::chrono::duration_cast<std::chrono::microseconds>(clock::time_point::max() - t);
    return d >= room ? clock::time_point::max() : t + d;
  }

  void reject(detail::completion<Response>&& done, error_info err) {
    if (!done.deliver(result<Response>(std::move(err)))) callback_exceptions_.fetch_add(1, std::memory_order_relaxed);
  }

  void enqueue(Request&& request, options_type&& opts, detail::completion<Response>&& done);

  clock::time_point oldest(const bucket_queue& b) const {
    auto t = clock::time_point::max();
    for (const auto& q : b.by_priority)
      if (!q.empty()) t = std::min(t, q.front().enqueued);
    return t;
  }

  // idle_dispatch and no batch running: waiting for a fuller batch would only leave the runner idle.
  bool idle() const { return options_.idle_dispatch && in_flight_ == 0; }

  // How many requests of `b` to dispatch now (0: not ready).
  std::size_t ready_size(const bucket_queue& b, clock::time_point now) const {
    if (b.size >= options_.max_batch_size) return options_.max_batch_size;
    if (stopping_ || idle()) return b.size;  // draining, or nothing running: no point waiting for more
    if (now - oldest(b) >= options_.max_queue_delay) return b.size;
    const auto& pref = options_.preferred_batch_sizes;
    auto it = std::upper_bound(pref.begin(), pref.end(), b.size);
    return it == pref.begin() ? 0 : *std::prev(it);
  }

  // The ready bucket to serve next: highest-priority head first, then the oldest head.
  std::optional<std::pair<std::size_t, std::size_t>> pick_ready(clock::time_point now) const {
    std::optional<std::pair<std::size_t, std::size_t>> best;
    std::size_t best_priority = 0;
    clock::time_point best_time{};
    for (std::size_t i = 0; i < buckets_.size(); ++i) {
      const auto& b = buckets_[i];
      const std::size_t n = ready_size(b, now);
      if (n == 0) continue;
      std::size_t p = 0;
      while (b.by_priority[p].empty()) ++p;
      const auto t = b.by_priority[p].front().enqueued;
      if (!best || p < best_priority || (p == best_priority && t < best_time)) {
        best = std::pair{i, n};
        best_priority = p;
        best_time = t;
      }
    }
    return best;
  }

  std::optional<clock::time_point> next_wake() const {
    auto t = clock::time_point::max();
    for (const auto& b : buckets_) t = std::min(t, add_saturated(oldest(b), options_.max_queue_delay));
    if (!deadlines_.empty()) t = std::min(t, *deadlines_.begin());
    if (t == clock::time_point::max()) return std::nullopt;
    return t;
  }

  void drop_deadline(clock::time_point d) {
    if (d != kNoDeadline) deadlines_.erase(deadlines_.find(d));
  }

  void erase_empty_buckets() {
    std::erase_if(buckets_, [](const bucket_queue& b) { return b.size == 0; });
  }

  void take_batch(std::size_t index, std::size_t n, clock::time_point now, std::vector<entry>& out) {
    auto& b = buckets_[index];
    for (auto& q : b.by_priority) {
      while (n > 0 && !q.empty()) {
        entry& e = q.front();
        drop_deadline(e.deadline);
        queue_time_.record(now - e.enqueued);
        out.push_back(std::move(e));
        q.pop_front();
        --n;
      }
    }
    b.size -= out.size();
    queued_ -= out.size();
  }

  void take_expired(clock::time_point now, std::vector<entry>& out);

  void finish(entry&& e, result<Response>&& r);

  struct batch_outcome {
    std::chrono::nanoseconds compute{};
    std::uint64_t ok = 0;
    std::uint64_t failed = 0;
    bool threw = false;
  };

  batch_outcome run_batch(std::size_t instance, const BucketKey& key, std::vector<entry>& batch);

  // Fails every queued request whose deadline is <= now; drops and retakes `lock` around delivery.
  void expire_due(clock::time_point now, std::unique_lock<std::mutex>& lock, std::vector<entry>& work);

  // Expires queued requests on time while every runner is busy (runners expire them too when free).
  // Runs from the first submit with a deadline until shutdown; a draining shutdown leaves the rest to
  // the runners.
  void reaper_loop();

  void worker_loop(std::size_t instance);

  // What a stop request on a runner's or the reaper's stop_token does (only a failed start makes one):
  // no more waiting for work, as after shutdown(true).
  void stop_waiting() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    reaper_cv_.notify_all();
  }

  batcher_options options_;
  runner_type runner_;

  mutable std::mutex mu_;  // guards everything below up to the sequencer
  std::condition_variable cv_;         // runners wait here
  std::condition_variable reaper_cv_;  // the reaper waits here (a separate cv: a notify meant for a runner
                                       // must never be taken by the reaper)
  worker_group reaper_;                // one thread, started (under mu_) by the first submit with a deadline
  std::vector<bucket_queue> buckets_;  // few buckets are expected (e.g. resolution buckets): linear search
  std::multiset<clock::time_point> deadlines_;  // of queued requests that have one
  std::size_t queued_ = 0;
  std::size_t in_flight_ = 0;
  bool stopping_ = false;
  std::vector<std::uint64_t> batch_sizes_;
  detail::duration_histogram queue_time_;
  detail::duration_histogram compute_time_;
  std::uint64_t batches_ = 0, submitted_ = 0, accepted_ = 0, rejected_queue_full_ = 0, rejected_invalid_ = 0,
                rejected_shut_down_ = 0, rejected_expired_ = 0, timed_out_ = 0, cancelled_ = 0, completed_ok_ = 0, completed_error_ = 0,
                runner_exceptions_ = 0;

  std::atomic<std::uint64_t> callback_exceptions_{0};
  detail::caller_sequencer<held_completion> sequencer_;

  std::mutex join_mu_;
  worker_group workers_;
};

}  // namespace jitembed::batching::detail

// The member functions declared above and defined out of the class.
#include "jitembed/batching/detail/dynamic_batcher_impl.hpp"
