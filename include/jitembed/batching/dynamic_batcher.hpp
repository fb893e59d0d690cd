// dynamic_batcher: queues requests and hands them to a runner in batches (max and preferred batch sizes,
// max queue delay, priorities, shape buckets, queue timeouts, per-caller ordering); futures or callbacks.
#pragma once

#include <concepts>
#include <cstddef>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include "jitembed/batching/detail/batcher_core.hpp"
#include "jitembed/batching/options.hpp"
#include "jitembed/batching/runner.hpp"
#include "jitembed/batching/stats.hpp"
#include "jitembed/core/detail/capture.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::batching {

// Batches requests of type Request for a runner producing Response. Thread-safe: submit, stats and
// shutdown may be called from any thread. See docs/batching.md for the exact scheduling and ordering rules.
// A movable value: the queues and runner threads live behind a pointer, so moving the batcher never
// disturbs a request in flight. A moved-from batcher may only be destroyed or assigned to.
template <class Request, class Response, class BucketKey = std::monostate>
  requires std::movable<Request> && std::movable<Response> && std::equality_comparable<BucketKey> &&
           std::copyable<BucketKey>
class dynamic_batcher {
  using core = detail::batcher_core<Request, Response, BucketKey>;

 public:
  using request_type = typename core::request_type;
  using response_type = typename core::response_type;
  using bucket_type = typename core::bucket_type;
  using options_type = typename core::options_type;
  using callback_type = typename core::callback_type;
  using runner_type = typename core::runner_type;
  using clock = typename core::clock;

  // Validates `options` (validate(): invalid_argument) and starts options.runner_threads runner threads
  // (resource_exhausted when the system refuses a thread or memory).
  template <class F>
    requires batch_runner<F, Request, Response, BucketKey>
  static result<dynamic_batcher> create(batcher_options options, F runner) {
    JITEMBED_TRY(validate(options));
    runner_type run;
    if constexpr (std::invocable<F&, const batch_context<BucketKey>&, std::span<Request>, std::span<result<Response>>>) {
      run = std::move(runner);
    } else {
      run = [f = std::move(runner)](const batch_context<BucketKey>&, std::span<Request> in,
                                    std::span<result<Response>> out) mutable { f(in, out); };
    }
    // Starting a runner thread may fail (std::system_error: resource_exhausted when the system has no
    // thread to spare), as may the allocations.
    return jitembed::core_detail::capture("dynamic_batcher: starting the runner threads", [&] {
      return dynamic_batcher(std::make_unique<core>(std::move(options), std::move(run)));
    });
  }

  dynamic_batcher(dynamic_batcher&&) noexcept = default;
  // Drains the batcher assigned over (as its destructor does), then takes `other`'s.
  dynamic_batcher& operator=(dynamic_batcher&&) noexcept = default;

  // Drains: everything accepted runs (or times out) before the destructor returns.
  ~dynamic_batcher() = default;

  // Queues one request; the future becomes ready with the runner's result or a batcher error
  // (errors.hpp). Never blocks: a full queue gives an already-ready future (queue_full).
  std::future<result<Response>> submit(Request request, options_type opts = {}) {
    return core_->submit(std::move(request), std::move(opts));
  }

  // Queues one request; `callback(result<Response>)` is called exactly once: on this thread before submit
  // returns if the request is rejected, else on a runner thread. It must not throw (exceptions are
  // swallowed and counted) and must not call shutdown or destroy the batcher.
  template <class F>
    requires std::invocable<F&, result<Response>>
  void submit(Request request, options_type opts, F&& callback) {
    core_->submit(std::move(request), std::move(opts), std::forward<F>(callback));
  }

  // Stops accepting requests (later submits fail with errc::unavailable). drain = true: everything queued
  // still runs, without waiting for max_queue_delay; drain = false: everything queued fails with
  // errc::cancelled.
  // Batches already running finish either way. Returns when every accepted request is delivered and
  // the runner threads have exited. Idempotent.
  void shutdown(bool drain = true) { core_->shutdown(drain); }

  // A consistent snapshot of the counters and summaries.
  batcher_stats stats() const { return core_->stats(); }

  // Queued and in-flight requests now, without copying the summaries stats() assembles.
  batcher_load load() const { return core_->load(); }

  // Requests accepted and not yet delivered to the runner's caller (queued + in flight).
  std::size_t pending() const { return core_->pending(); }

  // The options in effect (preferred_batch_sizes sorted, duplicates removed).
  const batcher_options& options() const noexcept { return core_->options(); }

 private:
  explicit dynamic_batcher(std::unique_ptr<core> c) noexcept : core_(std::move(c)) {}

  std::unique_ptr<core> core_;
};

}  // namespace jitembed::batching
