// The engine behind jit_loader: admission of chunks of B samples into a bounded window, worker threads
// that read samples, consult the cache and send one request per (model, field kind), completion of
// chunks from the client's callbacks, and next()'s ordered or completion-order hand-out.
//
// Invariants (all under mu_):
// - every position of this rank's epoch sequence is, in order: not admitted -> in exactly one chunk ->
//   in ready_ -> delivered (delivered_[pos]); nothing leaves a chunk except by release(), which moves
//   all of the chunk's samples into ready_ at once;
// - once every position of the current epoch is admitted and completed, admission goes on into the next
//   epoch's plan (one epoch ahead at most), so the first step of an epoch need not wait; those samples
//   are keyed by their epoch in ready_ and are not part of the current epoch's checkpoint;
// - buffered_ (admitted, not delivered) <= max_buffered, chunks_in_flight_ <= requests_in_flight;
// - outstanding_ == live_.size() == requests sent whose callback has not run yet.
// The client's callback only moves its result into finished_ (short, under the lock); workers do the
// rest. The lock is never held while calling into the client or the cache.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stop_token>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jitembed/cache/key.hpp"
#include "jitembed/cache/tiered_cache.hpp"
#include "jitembed/cache/value.hpp"
#include "jitembed/client/jit_client.hpp"
#include "jitembed/core/detail/capture.hpp"
#include "jitembed/core/worker_group.hpp"
#include "jitembed/format/dataset.hpp"
#include "jitembed/format/field.hpp"
#include "jitembed/loader/detail/loader_checkpoint.hpp"
#include "jitembed/loader/detail/loader_chunk.hpp"
#include "jitembed/loader/epoch_plan.hpp"
#include "jitembed/loader/options.hpp"
#include "jitembed/loader/stats.hpp"
#include "jitembed/loader/step.hpp"
#include "jitembed/models/model.hpp"
#include "jitembed/models/preprocess_input.hpp"
#include "jitembed/net/kserve/datatype.hpp"

namespace jitembed::loader::detail {

// loader_request::id holds one (loader_chunk.hpp names the type without including the client).
static_assert(std::is_same_v<client::jit_client::request_id, std::uint64_t>);

class loader_state {
 public:
  loader_state(format::dataset ds, client::jit_client client, loader_options opts)
      : ds_(std::move(ds)), client_(std::move(client)), opts_(std::move(opts)) {}
  loader_state(const loader_state&) = delete;
  loader_state& operator=(const loader_state&) = delete;
  ~loader_state() { close(); }

  // Every failure is in the result (core_detail::capture): a worker that cannot start is
  // resource_exhausted, after the workers already started are stopped and joined.
  static result<std::unique_ptr<loader_state>> create(format::dataset ds, client::jit_client client,
                                                      loader_options opts) {
    return core_detail::capture("jit_loader", [&]() -> result<std::unique_ptr<loader_state>> {
      JITEMBED_TRY(check(opts));
      auto s = std::make_unique<loader_state>(std::move(ds), std::move(client), std::move(opts));
      JITEMBED_TRY(s->wait_ready());  // before make_groups' identity requests: their errors would hide its
      JITEMBED_TRY(s->make_groups());
      JITEMBED_TRY(s->start_epoch(s->opts_.epoch));
      if (!s->opts_.resume.empty()) JITEMBED_TRY(s->restore(s->opts_.resume));
      s->opts_.resume = {};
      // On a failed start, s's destructor (close()) cancels what the started workers sent.
      s->workers_ = worker_group(s->opts_.workers, [p = s.get()](std::stop_token stop, std::size_t) { p->work(stop); });
      return s;
    });
  }

  result<std::optional<step>> next() {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock lock(mu_);
    if (closed_) return fail(errc::cancelled, "jit_loader: closed");
    auto& es = epoch_stats_locked(epoch_);
    if (!es.begun) {
      es.begun = true;
      es.begin = t0;
    }
    if (steps_done_ >= plan_.steps()) {  // the epoch is over: report it once and start the next one
      es.s.ended = true;
      es.s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - es.begin).count();
      start_epoch_locked(epoch_ + 1);
      cv_.notify_all();
      return std::optional<step>{};
    }
    const std::uint64_t size = plan_.step_size(steps_done_);
    std::vector<std::uint64_t> want;
    if (opts_.order == delivery_order::dataset) {
      while (head_ < delivered_.size() && delivered_[head_]) ++head_;
      for (std::uint64_t p = head_; want.size() < size && p < delivered_.size(); ++p)
        if (!delivered_[p]) want.push_back(p);
      cv_.wait(lock, [&] {
        if (closed_) return true;
        for (auto p : want)
          if (!ready_.contains({epoch_, p})) return false;
        return true;
      });
    } else {
      cv_.wait(lock, [&] { return closed_ || ready_current_ >= size; });
      if (!closed_) {
        for (auto it = ready_.begin(); want.size() < size; ++it) want.push_back(it->first.second);  // current epoch first
      }
    }
    if (closed_) return fail(errc::cancelled, "jit_loader: closed while waiting");
    step b;
    b.epoch = epoch_;
    b.index = steps_done_++;
    b.samples.reserve(want.size());
    std::uint64_t failed = 0;
    for (auto p : want) {
      auto it = ready_.find({epoch_, p});
      b.samples.push_back(std::move(it->second));
      ready_.erase(it);
      --ready_current_;
      delivered_[p] = true;
      if (!b.samples.back().ok()) ++failed;
    }
    buffered_ -= want.size();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    count_locked(epoch_, [&](loader_epoch_stats& c) {  // not `es`: workers add entries while next() waits
      ++c.steps;
      c.samples_delivered += want.size();
      c.samples_failed += failed;
      c.wait_s += waited;
      c.max_wait_s = std::max(c.max_wait_s, waited);
    });
    cv_.notify_all();  // room in the window
    lock.unlock();     // step_error asks the client for its endpoints
    if (failed != 0)
      if (auto e = step_error(b, failed)) return std::move(*e);
    return std::optional<step>(std::move(b));
  }

  byte_buffer state() const {
    std::lock_guard lock(mu_);
    const loader_checkpoint c{.n = plan_.n,
                              .world = plan_.world,
                              .rank = plan_.rank,
                              .batch = plan_.batch,
                              .seed = opts_.seed,
                              .shuffle = opts_.shuffle,
                              .epoch = epoch_,
                              .steps_done = steps_done_,
                              .delivered = delivered_};
    return c.serialize();
  }

  loader_stats stats() const {
    auto cs = client_.stats();  // not under mu_: the lock is never held while calling into the client
    std::lock_guard lock(mu_);
    const auto& t = totals_;
    loader_stats s{.epoch = epoch_,
                   .step = steps_done_,
                   .steps_per_epoch = plan_.steps(),
                   .batches = t.steps,
                   .samples_delivered = t.samples_delivered,
                   .samples_failed = t.samples_failed,
                   .wait_s = t.wait_s,
                   .max_wait_s = t.max_wait_s,
                   .buffered = buffered_,
                   .max_buffered_seen = max_buffered_seen_,
                   .ready = ready_.size(),
                   .chunks_in_flight = chunks_in_flight_,
                   .requests_in_flight = outstanding_,
                   .requests = t.requests,
                   .rows_requested = t.rows_requested,
                   .resubmits = t.resubmits,
                   .cache_hits = t.cache_hits,
                   .cache_misses = t.cache_misses,
                   .cache_puts = cache_puts_.load(),
                   .cache_put_failures = cache_put_failures_.load(),
                   .client = std::move(cs)};
    const auto now = std::chrono::steady_clock::now();
    s.epochs.reserve(epoch_stats_.size());
    for (const auto& [e, es] : epoch_stats_) {
      s.epochs.push_back(es.s);
      if (es.begun && !es.s.ended) s.epochs.back().wall_s = std::chrono::duration<double>(now - es.begin).count();
    }
    return s;
  }

  std::uint64_t epoch() const {
    std::lock_guard lock(mu_);
    return epoch_;
  }
  std::uint64_t steps_per_epoch() const {
    std::lock_guard lock(mu_);
    return plan_.steps();
  }
  std::uint64_t samples_per_epoch() const {
    std::lock_guard lock(mu_);
    return plan_.count();
  }

  void close() {
    {
      std::lock_guard lock(mu_);
      if (closed_) return;
      closed_ = true;
      cv_.notify_all();
    }
    workers_.join();  // closed_ ends them
    std::vector<client::jit_client::request_id> ids;
    {
      std::lock_guard lock(mu_);
      for (const auto& [token, r] : live_)
        if (r.id) ids.push_back(*r.id);
    }
    for (auto id : ids) client_.cancel(id);
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return outstanding_ == 0; });
    finished_.clear();
    ready_.clear();
  }

 private:
  struct finished_request {
    loader_request req;
    result<client::embed_result> res;
  };

  static result<void> check(const loader_options& o);

  struct epoch_entry {
    loader_epoch_stats s;
    bool begun = false;  // the trainer's first next() of the epoch happened (at `begin`)
    std::chrono::steady_clock::time_point begin{};
  };

  // The entry of epoch e (made on first use; past loader_stats::kMaxEpochStats the oldest other entry is
  // dropped). Under mu_.
  epoch_entry& epoch_stats_locked(std::uint64_t e) {
    auto [it, made] = epoch_stats_.try_emplace(e);
    if (made) {
      it->second.s.epoch = e;
      if (epoch_stats_.size() > loader_stats::kMaxEpochStats) {
        auto oldest = epoch_stats_.begin();
        if (oldest == it) ++oldest;
        epoch_stats_.erase(oldest);
      }
    }
    return it->second;
  }

  // Adds to epoch e's counters and to the totals together (under mu_), so stats() sees them agree.
  template <class Add>
  void count_locked(std::uint64_t e, Add add) {
    add(totals_);
    add(epoch_stats_locked(e).s);
  }

  result<void> make_groups();

  // opts_.ready_timeout (or fail_fast's default): client::jit_client::wait_ready for every model of the embeddings.
  result<void> wait_ready();

  // The error that fails step `b` (`failed` of its samples failed) under fail_fast / max_failed_fraction,
  // or nullopt when it is handed out.
  std::optional<error_info> step_error(const step& b, std::uint64_t failed) const;

  result<void> start_epoch(std::uint64_t e);

  void start_epoch_locked(std::uint64_t e);

  epoch_plan make_plan(std::uint64_t e) const;

  result<void> restore(bytes_view bytes);

  // --- workers ---------------------------------------------------------------------------------------

  struct admitted {
    std::uint64_t epoch, pos, index;
  };

  // The next chunk: up to B positions not delivered yet, from `from` on in `plan` (delivered: nullptr
  // when none is). Empty when the window has no room for a full chunk (or what is left of the epoch).
  std::vector<admitted> take_locked(const epoch_plan& plan, std::uint64_t e, const std::vector<bool>* delivered, std::uint64_t& from);

  // The next chunk of the current epoch, or once it is all admitted, of the next one.
  std::vector<admitted> admit_locked();

  // Runs until closed_ (close()) or its stop_token (a failed start) is set.
  void work(std::stop_token stop);

  void read_sample(chunk_sample& s, std::uint64_t index);

  // Group g's field `f` of the sample (its named field, or the first of its kind) into s.content / s.types /
  // s.keys.
  result<void> read_field(chunk_sample& s, std::size_t g, const format::sample_field& f);

  // The tensors a group's specs need, from a cached value; nullopt when it lacks one (a miss).
  std::optional<named_tensors> from_cache(const loader_group& g, const cache::cached_value& v) const;

  void run_chunk(const std::vector<admitted>& items);

  void submit(loader_request r);

  // The client's callback: hand the result to a worker (short; notify under the lock so close() cannot
  // destroy the condition variable under us).
  void on_done(std::uint64_t token, result<client::embed_result> res) noexcept;

  // A request's rows: slice every output to each row, fill the cache, resend retryable failures.
  void on_finished(finished_request f);

  void fill_cache(const cache::cache_key& key, const named_tensors& row);

  // Drops one hold on the chunk; the last one publishes its samples.
  void release(const std::shared_ptr<loader_chunk>& chunk);

  void finish_sample(chunk_sample& s);

  format::dataset ds_;
  client::jit_client client_;  // the caller's client, shared
  loader_options opts_;
  std::vector<loader_group> groups_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;
  std::uint64_t epoch_ = 0;
  epoch_plan plan_;
  std::vector<bool> delivered_;
  std::uint64_t steps_done_ = 0, head_ = 0, next_admit_ = 0;
  std::map<std::pair<std::uint64_t, std::uint64_t>, embedded_sample> ready_;  // by (epoch, position)
  std::uint64_t ready_current_ = 0;                // entries of ready_ in epoch_
  std::optional<epoch_plan> next_plan_;            // the next epoch's, once admission reached it
  std::uint64_t next_epoch_ = 0, next_epoch_admit_ = 0;
  std::uint64_t buffered_ = 0, max_buffered_seen_ = 0, chunks_in_flight_ = 0, outstanding_ = 0;
  std::uint64_t next_token_ = 1;
  std::unordered_map<std::uint64_t, loader_request> live_;
  std::deque<finished_request> finished_;
  std::map<std::uint64_t, epoch_entry> epoch_stats_;  // by epoch, at most loader_stats::kMaxEpochStats
  loader_epoch_stats totals_;                         // all epochs (count_locked)
  worker_group workers_;

  std::atomic<std::uint64_t> cache_puts_{0}, cache_put_failures_{0};
};

}  // namespace jitembed::loader::detail
