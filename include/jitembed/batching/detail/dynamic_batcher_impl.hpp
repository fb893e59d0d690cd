// batcher_core's scheduling internals (behind dynamic_batcher): admission (enqueue), expiry, delivery in
// caller order, running a batch, and the runner and reaper threads' loops.
// Included at the end of jitembed/batching/detail/batcher_core.hpp
// (users include jitembed/batching/dynamic_batcher.hpp).
#pragma once

#include "jitembed/batching/detail/batcher_core.hpp"

#define JITEMBED_DYNAMIC_BATCHER_TEMPLATE                                                                 \
  template <class Request, class Response, class BucketKey>                                              \
    requires std::movable<Request> && std::movable<Response> && std::equality_comparable<BucketKey> && \
             std::copyable<BucketKey>

namespace jitembed::batching::detail {

JITEMBED_DYNAMIC_BATCHER_TEMPLATE
void batcher_core<Request, Response, BucketKey>::enqueue(Request&& request, options_type&& opts, detail::completion<Response>&& done) {
  const auto timeout = opts.timeout.value_or(options_.default_timeout);
  std::unique_lock lock(mu_);
  ++submitted_;
  if (opts.priority < 0 || opts.priority >= options_.priority_levels) {
    ++rejected_invalid_;
    lock.unlock();
    return reject(std::move(done), detail::priority_error(opts.priority, options_.priority_levels));
  }
  if (timeout.count() < 0) {
    ++rejected_invalid_;
    lock.unlock();
    return reject(std::move(done), detail::negative_timeout_error(timeout.count()));
  }
  if (stopping_) {
    ++rejected_shut_down_;
    lock.unlock();
    return reject(std::move(done), detail::shut_down_error());
  }
  if (options_.max_queue_size != 0 && queued_ >= options_.max_queue_size) {
    ++rejected_queue_full_;
    lock.unlock();
    return reject(std::move(done), detail::queue_full_error(options_.max_queue_size));
  }
  const auto now = clock::now();
  auto deadline = timeout.count() > 0 ? add_saturated(now, timeout) : kNoDeadline;
  bool by_deadline = false;
  if (opts.deadline) {
    if (*opts.deadline <= now) {
      ++rejected_expired_;
      lock.unlock();
      return reject(std::move(done), detail::deadline_before_queue_error());
    }
    if (*opts.deadline < deadline) {
      deadline = *opts.deadline;
      by_deadline = true;
    }
  }
  const std::uint64_t seq = opts.caller_id != 0 ? sequencer_.assign(opts.caller_id) : 0;

  bucket_queue* bq = nullptr;
  for (auto& b : buckets_) {
    if (b.key == opts.bucket) {
      bq = &b;
      break;
    }
  }
  if (bq == nullptr) {
    buckets_.push_back(bucket_queue{std::move(opts.bucket), {}, 0});
    bq = &buckets_.back();
    bq->by_priority.resize(static_cast<std::size_t>(options_.priority_levels));
  }
  const bool was_empty = bq->size == 0;
  const bool earliest_deadline = deadline != kNoDeadline && (deadlines_.empty() || deadline < *deadlines_.begin());
  bq->by_priority[static_cast<std::size_t>(opts.priority)].push_back(
      entry{std::move(request), std::move(done), now, deadline, timeout, by_deadline, opts.caller_id, seq});
  ++bq->size;
  ++queued_;
  ++accepted_;
  if (deadline != kNoDeadline) {
    deadlines_.insert(deadline);
    // Expiry must not wait for a busy runner: the first request with a deadline starts the reaper.
    if (reaper_.empty()) {
      try {
        reaper_ = worker_group(1, [this](std::stop_token token, std::size_t) {
          std::stop_callback wake(token, [this] { stop_waiting(); });
          reaper_loop();
        });
      } catch (const std::system_error&) {
        // No thread to spare: the runners still expire requests whenever they are free.
      }
    }
  }
  // Wake a runner only when this request changes what it waits for: a new delay timer (bucket was
  // empty), a batch that is ready now (full, preferred size, or nothing running), or an earlier expiry.
  const bool ready = bq->size >= options_.max_batch_size || idle() ||
                     (!options_.preferred_batch_sizes.empty() && bq->size >= options_.preferred_batch_sizes.front());
  lock.unlock();
  if (was_empty || ready || earliest_deadline) cv_.notify_one();
  if (earliest_deadline) reaper_cv_.notify_one();
}

JITEMBED_DYNAMIC_BATCHER_TEMPLATE
void batcher_core<Request, Response, BucketKey>::take_expired(clock::time_point now, std::vector<entry>& out) {
  for (auto& b : buckets_) {
    for (auto& q : b.by_priority) {
      std::size_t w = 0;
      for (std::size_t r = 0; r < q.size(); ++r) {
        if (q[r].deadline <= now) {
          drop_deadline(q[r].deadline);
          out.push_back(std::move(q[r]));
          --b.size;
          --queued_;
        } else {
          if (w != r) q[w] = std::move(q[r]);
          ++w;
        }
      }
      q.erase(q.begin() + static_cast<std::ptrdiff_t>(w), q.end());
    }
  }
  erase_empty_buckets();
}

JITEMBED_DYNAMIC_BATCHER_TEMPLATE
void batcher_core<Request, Response, BucketKey>::finish(entry&& e, result<Response>&& r) {
  if (e.caller == 0) {
    if (!e.done.deliver(std::move(r))) callback_exceptions_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  sequencer_.complete(e.caller, e.seq, held_completion{std::move(e.done), std::move(r)}, [this](held_completion&& h) {
    if (!h.done.deliver(std::move(h.value))) callback_exceptions_.fetch_add(1, std::memory_order_relaxed);
  });
}

JITEMBED_DYNAMIC_BATCHER_TEMPLATE
auto batcher_core<Request, Response, BucketKey>::run_batch(std::size_t instance, const BucketKey& key, std::vector<entry>& batch) -> batch_outcome {
  const std::size_t n = batch.size();
  std::vector<Request> requests;
  requests.reserve(n);
  for (auto& e : batch) requests.push_back(std::move(e.request));
  std::vector<result<Response>> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) out.emplace_back(error_info{errc::internal, {}});  // "unset" marker

  batch_outcome o;
  std::string what;
  const batch_context<BucketKey> ctx{key, instance};
  const auto t0 = clock::now();
  bool out_of_memory = false;
  try {
    runner_(ctx, std::span<Request>(requests), std::span<result<Response>>(out));
  } catch (const std::bad_alloc& ex) {
    o.threw = true;
    out_of_memory = true;
    what = ex.what();
  } catch (const std::exception& ex) {
    o.threw = true;
    what = ex.what();
  } catch (...) {
    o.threw = true;
    what = "unknown exception";
  }
  o.compute = clock::now() - t0;

  for (std::size_t i = 0; i < n; ++i) {
    if (o.threw) {
      out[i] = out_of_memory ? detail::runner_out_of_memory_error(what) : detail::runner_threw_error(what);
    } else if (!out[i] && out[i].code() == errc::internal && out[i].error().message.empty()) {
      out[i] = detail::runner_unset_error();
    }
    if (out[i]) ++o.ok; else ++o.failed;
  }
  for (std::size_t i = 0; i < n; ++i) finish(std::move(batch[i]), std::move(out[i]));
  return o;
}

JITEMBED_DYNAMIC_BATCHER_TEMPLATE
void batcher_core<Request, Response, BucketKey>::expire_due(clock::time_point now, std::unique_lock<std::mutex>& lock, std::vector<entry>& work) {
  take_expired(now, work);
  timed_out_ += work.size();
  lock.unlock();
  for (auto& e : work) {
    auto err = e.by_deadline
                   ? detail::deadline_error(std::chrono::duration_cast<std::chrono::microseconds>(now - e.enqueued).count())
                   : detail::timeout_error(e.timeout.count());
    finish(std::move(e), std::move(err));
  }
  work.clear();
  lock.lock();
}

JITEMBED_DYNAMIC_BATCHER_TEMPLATE
void batcher_core<Request, Response, BucketKey>::reaper_loop() {
  std::vector<entry> work;
  std::unique_lock lock(mu_);
  while (!stopping_) {
    const auto now = clock::now();
    if (!deadlines_.empty() && *deadlines_.begin() <= now) {
      expire_due(now, lock, work);
      continue;
    }
    if (deadlines_.empty()) reaper_cv_.wait(lock);
    else reaper_cv_.wait_until(lock, std::min(*deadlines_.begin(), now + std::chrono::hours(1)));
  }
}

JITEMBED_DYNAMIC_BATCHER_TEMPLATE
void batcher_core<Request, Response, BucketKey>::worker_loop(std::size_t instance) {
  std::vector<entry> work;
  std::unique_lock lock(mu_);
  for (;;) {
    const auto now = clock::now();
    if (!deadlines_.empty() && *deadlines_.begin() <= now) {
      expire_due(now, lock, work);
      continue;
    }
    if (auto pick = pick_ready(now)) {
      const auto [index, n] = *pick;
      BucketKey key = buckets_[index].key;
      take_batch(index, n, now, work);
      erase_empty_buckets();
      ++batches_;
      ++batch_sizes_[work.size()];
      in_flight_ += work.size();
      const bool more = queued_ > 0;
      lock.unlock();
      if (more) cv_.notify_one();  // another runner may serve the rest
      const batch_outcome o = run_batch(instance, key, work);
      const std::size_t ran = work.size();
      work.clear();
      lock.lock();
      compute_time_.record(o.compute);
      completed_ok_ += o.ok;
      completed_error_ += o.failed;
      if (o.threw) ++runner_exceptions_;
      in_flight_ -= ran;
      continue;
    }
    if (stopping_ && queued_ == 0) break;
    if (auto wake = next_wake()) {
      // A far-off wake (huge delay or timeout) is capped: wait_until with time_point::max() overflows.
      cv_.wait_until(lock, std::min(*wake, now + std::chrono::hours(1)));
    } else {
      cv_.wait(lock);
    }
  }
}

}  // namespace jitembed::batching::detail

#undef JITEMBED_DYNAMIC_BATCHER_TEMPLATE
