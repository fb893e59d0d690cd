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
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jitembed/cache/key.hpp"
#include "jitembed/cache/tiered_cache.hpp"
#include "jitembed/cache/value.hpp"
#include "jitembed/client/detail/loader_checkpoint.hpp"
#include "jitembed/client/detail/loader_plan.hpp"
#include "jitembed/client/jit_client.hpp"
#include "jitembed/client/loader_batch.hpp"
#include "jitembed/client/loader_options.hpp"
#include "jitembed/client/loader_stats.hpp"
#include "jitembed/format/dataset.hpp"

namespace jitembed::client::detail {

// Specs that share (model, field kind): one request row and one cache entry per sample.
struct loader_group {
  std::string model;
  format::field_kind kind = format::field_kind::image;
  std::string input;
  std::vector<std::size_t> specs;    // indices into options.embeddings
  std::vector<std::string> outputs;  // asked for; empty: every output
  model_identity identity;           // cache key inputs (only fetched with a cache)
};

using named_rows = std::vector<std::pair<std::string, tensor>>;

struct chunk_sample {
  std::uint64_t epoch = 0, pos = 0;
  loaded_sample out;
  format::sample src;                           // keeps the field bytes alive until the chunk completes
  std::vector<std::string> texts;               // per group: owned UTF-8 of a text field
  std::vector<bytes_view> content;              // per group: the bytes sent and hashed
  std::vector<char> has;                        // per group: the sample has a field of that kind
  std::vector<cache::cache_key> keys;           // per group (with a cache)
  std::vector<named_rows> rows;                 // per group: this sample's outputs
  std::vector<std::optional<error_info>> errors;  // per group
};

struct loader_chunk {
  std::vector<chunk_sample> samples;
  std::size_t pending = 0;  // requests not finished + 1 while the submitting worker holds it (under mu_)
};

struct loader_request {
  std::shared_ptr<loader_chunk> chunk;
  std::size_t group = 0;
  std::vector<std::size_t> rows;  // sample indices in the chunk
  int attempt = 0;
  std::optional<jit_client::request_id> id;
};

class loader_state {
 public:
  loader_state(format::dataset ds, jit_client* client, std::optional<jit_client> owned, loader_options opts)
      : ds_(std::move(ds)), owned_(std::move(owned)), client_(owned_ ? &*owned_ : client), opts_(std::move(opts)) {}
  loader_state(const loader_state&) = delete;
  loader_state& operator=(const loader_state&) = delete;
  ~loader_state() { close(); }

  static result<std::unique_ptr<loader_state>> create(format::dataset ds, jit_client* client, std::optional<jit_client> owned,
                                                      loader_options opts) try {
    if (!client && !owned) return fail(errc::invalid_argument, "jit_loader: no client");
    JITEMBED_TRY(check(opts));
    auto s = std::make_unique<loader_state>(std::move(ds), client, std::move(owned), std::move(opts));
    JITEMBED_TRY(s->make_groups());
    JITEMBED_TRY(s->start_epoch(s->opts_.epoch));
    if (!s->opts_.resume.empty()) JITEMBED_TRY(s->restore(s->opts_.resume));
    s->opts_.resume = {};
    s->workers_.reserve(s->opts_.workers);
    for (std::size_t i = 0; i < s->opts_.workers; ++i) s->workers_.emplace_back([p = s.get()] { p->work(); });
    return s;
  } catch (const error& e) {
    return fail(e.code(), e.message());
  } catch (const std::bad_alloc&) {
    return fail(errc::resource_exhausted, "jit_loader: out of memory at create");
  } catch (const std::exception& e) {
    return fail(errc::internal, std::string("jit_loader: ") + e.what());
  }

  result<std::optional<batch>> next() {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock lock(mu_);
    if (closed_) return fail(errc::cancelled, "jit_loader: closed");
    if (steps_done_ >= plan_.steps()) {  // the epoch is over: report it once and start the next one
      start_epoch_locked(epoch_ + 1);
      cv_.notify_all();
      return std::optional<batch>{};
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
    batch b;
    b.epoch = epoch_;
    b.step = steps_done_++;
    b.samples.reserve(want.size());
    for (auto p : want) {
      auto it = ready_.find({epoch_, p});
      b.samples.push_back(std::move(it->second));
      ready_.erase(it);
      --ready_current_;
      delivered_[p] = true;
      if (!b.samples.back().ok()) ++failed_total_;
    }
    buffered_ -= want.size();
    delivered_total_ += want.size();
    ++batches_;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    wait_s_ += waited;
    max_wait_s_ = std::max(max_wait_s_, waited);
    cv_.notify_all();  // room in the window
    return std::optional<batch>(std::move(b));
  }

  byte_buffer state() const {
    std::lock_guard lock(mu_);
    loader_checkpoint c;
    c.n = plan_.n;
    c.world = plan_.world;
    c.rank = plan_.rank;
    c.batch = plan_.batch;
    c.seed = opts_.seed;
    c.shuffle = opts_.shuffle;
    c.epoch = epoch_;
    c.steps_done = steps_done_;
    c.delivered = delivered_;
    return c.serialize();
  }

  loader_stats stats() const {
    loader_stats s;
    {
      std::lock_guard lock(mu_);
      s.epoch = epoch_;
      s.step = steps_done_;
      s.steps_per_epoch = plan_.steps();
      s.batches = batches_;
      s.samples_delivered = delivered_total_;
      s.samples_failed = failed_total_;
      s.wait_s = wait_s_;
      s.max_wait_s = max_wait_s_;
      s.buffered = buffered_;
      s.max_buffered_seen = max_buffered_seen_;
      s.ready = ready_.size();
      s.chunks_in_flight = chunks_in_flight_;
      s.requests_in_flight = outstanding_;
    }
    s.requests = requests_.load();
    s.rows_requested = rows_requested_.load();
    s.resubmits = resubmits_.load();
    s.cache_hits = cache_hits_.load();
    s.cache_misses = cache_misses_.load();
    s.cache_puts = cache_puts_.load();
    s.cache_put_failures = cache_put_failures_.load();
    s.client = client_->stats();
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
    for (auto& t : workers_)
      if (t.joinable()) t.join();
    std::vector<jit_client::request_id> ids;
    {
      std::lock_guard lock(mu_);
      for (const auto& [token, r] : live_)
        if (r.id) ids.push_back(*r.id);
    }
    for (auto id : ids) client_->cancel(id);
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return outstanding_ == 0; });
    finished_.clear();
    ready_.clear();
  }

 private:
  struct finished_request {
    loader_request req;
    result<embed_result> res;
  };

  static result<void> check(const loader_options& o) {
    auto bad = [](const std::string& m) { return fail(errc::invalid_argument, "jit_loader: " + m); };
    if (o.embeddings.empty()) return bad("no embeddings");
    for (std::size_t i = 0; i < o.embeddings.size(); ++i) {
      const auto& e = o.embeddings[i];
      if (e.name.empty()) return bad("embedding " + std::to_string(i) + " has no name");
      if (e.model.empty()) return bad("embedding '" + e.name + "' has no model");
      if (e.kind != format::field_kind::image && e.kind != format::field_kind::video && e.kind != format::field_kind::text)
        return bad("embedding '" + e.name + "': field kind " + std::string(format::to_string(e.kind)) + " is not image, video or text");
      for (std::size_t k = 0; k < i; ++k)
        if (o.embeddings[k].name == e.name) return bad("embedding name '" + e.name + "' given twice");
    }
    if (o.batch_size == 0) return bad("batch_size 0");
    if (o.samples_per_request == 0) return bad("samples_per_request 0");
    if (o.requests_in_flight == 0) return bad("requests_in_flight 0");
    if (o.workers == 0) return bad("workers 0");
    if (o.world_size == 0) return bad("world_size 0");
    if (o.rank >= o.world_size) return bad("rank " + std::to_string(o.rank) + " not in [0, " + std::to_string(o.world_size) + ")");
    if (o.max_buffered < o.batch_size || o.max_buffered < o.samples_per_request)
      return bad("max_buffered " + std::to_string(o.max_buffered) + " < batch_size " + std::to_string(o.batch_size) +
                 " or samples_per_request " + std::to_string(o.samples_per_request));
    if (o.resubmits < 0) return bad("resubmits < 0");
    if (o.request_timeout && o.request_timeout->count() <= 0) return bad("request_timeout <= 0");
    return {};
  }

  result<void> make_groups() {
    for (std::size_t i = 0; i < opts_.embeddings.size(); ++i) {
      const auto& e = opts_.embeddings[i];
      const std::string input = e.input.empty() ? std::string(format::to_string(e.kind)) : e.input;
      auto it = std::find_if(groups_.begin(), groups_.end(), [&](const loader_group& g) { return g.model == e.model && g.kind == e.kind; });
      if (it == groups_.end()) {
        loader_group g;
        g.model = e.model;
        g.kind = e.kind;
        g.input = input;
        groups_.push_back(std::move(g));
        it = groups_.end() - 1;
      } else if (it->input != input) {
        return fail(errc::invalid_argument, "jit_loader: embedding '" + e.name + "': input '" + input + "' differs from '" + it->input +
                                                "' of another embedding of model '" + e.model + "'");
      }
      it->specs.push_back(i);
    }
    for (auto& g : groups_) {
      bool all = false;
      for (auto i : g.specs) {
        const auto& out = opts_.embeddings[i].output;
        if (out.empty()) all = true;
        else if (std::find(g.outputs.begin(), g.outputs.end(), out) == g.outputs.end()) g.outputs.push_back(out);
      }
      if (all) g.outputs.clear();
      if (opts_.cache) {
        auto id = client_->identity(g.model);
        if (!id) return fail(id.code(), "jit_loader: identity of model '" + g.model + "': " + id.error().message);
        g.identity = std::move(*id);
      }
    }
    return {};
  }

  result<void> start_epoch(std::uint64_t e) {
    std::lock_guard lock(mu_);
    start_epoch_locked(e);
    return {};
  }

  void start_epoch_locked(std::uint64_t e) {
    epoch_ = e;
    if (next_plan_ && next_epoch_ == e) {  // admission already went into this epoch
      plan_ = std::move(*next_plan_);
      next_admit_ = next_epoch_admit_;
    } else {
      plan_ = make_plan(e);
      next_admit_ = 0;
    }
    next_plan_.reset();
    next_epoch_admit_ = 0;
    delivered_.assign(static_cast<std::size_t>(plan_.count()), false);
    steps_done_ = 0;
    head_ = 0;
    ready_current_ = 0;
    for (const auto& [key, v] : ready_)
      if (key.first == e) ++ready_current_;
  }

  epoch_plan make_plan(std::uint64_t e) const {
    return epoch_plan::make(ds_.size(), opts_.world_size, opts_.rank, opts_.batch_size, opts_.seed, e, opts_.shuffle);
  }

  result<void> restore(bytes_view bytes) {
    auto c = loader_checkpoint::parse(bytes);
    if (!c) return c.error();
    auto mismatch = [](const char* what, std::uint64_t have, std::uint64_t want) {
      return fail(errc::invalid_argument, std::string("jit_loader: resume state is for ") + what + " " + std::to_string(have) +
                                              ", this loader has " + std::to_string(want));
    };
    if (c->n != ds_.size()) return mismatch("a data set of size", c->n, ds_.size());
    if (c->world != opts_.world_size) return mismatch("world_size", c->world, opts_.world_size);
    if (c->rank != opts_.rank) return mismatch("rank", c->rank, opts_.rank);
    if (c->batch != opts_.batch_size) return mismatch("batch_size", c->batch, opts_.batch_size);
    if (c->seed != opts_.seed) return mismatch("seed", c->seed, opts_.seed);
    if (c->shuffle != opts_.shuffle) return mismatch("shuffle", c->shuffle, opts_.shuffle);
    std::lock_guard lock(mu_);
    start_epoch_locked(c->epoch);
    if (c->delivered.size() != delivered_.size())
      return fail(errc::corrupt_data, "jit_loader: resume state has " + std::to_string(c->delivered.size()) + " positions, the plan " +
                                          std::to_string(delivered_.size()));
    if (c->steps_done > plan_.steps()) return fail(errc::corrupt_data, "jit_loader: resume state past the epoch's last step");
    std::uint64_t want = 0, have = 0;
    for (std::uint64_t k = 0; k < c->steps_done; ++k) want += plan_.step_size(k);
    for (bool d : c->delivered) have += d ? 1 : 0;
    if (want != have)
      return fail(errc::corrupt_data, "jit_loader: resume state marks " + std::to_string(have) + " samples delivered, its " +
                                          std::to_string(c->steps_done) + " steps hold " + std::to_string(want));
    delivered_ = std::move(c->delivered);
    steps_done_ = c->steps_done;
    return {};
  }

  // --- workers ---------------------------------------------------------------------------------------

  struct admitted {
    std::uint64_t epoch, pos, index;
  };

  // The next chunk: up to B positions not delivered yet, from `from` on in `plan` (delivered: nullptr
  // when none is). Empty when the window has no room for a full chunk (or what is left of the epoch).
  std::vector<admitted> take_locked(const epoch_plan& plan, std::uint64_t e, const std::vector<bool>* delivered, std::uint64_t& from) {
    std::vector<admitted> out;
    const std::uint64_t count = plan.count();
    auto done = [&](std::uint64_t q) { return delivered && (*delivered)[static_cast<std::size_t>(q)]; };
    while (from < count && done(from)) ++from;
    if (from >= count) return out;
    std::size_t want = opts_.samples_per_request, left = 0;
    for (std::uint64_t q = from; q < count && left < want; ++q) left += done(q) ? 0 : 1;
    want = std::min(want, left);  // a full chunk unless the epoch has fewer left: wait for room instead
    if (opts_.max_buffered - buffered_ < want) return out;
    std::uint64_t p = from;
    for (; p < count && out.size() < want; ++p)
      if (!done(p)) out.push_back({e, p, plan.index(p)});
    from = p;
    buffered_ += out.size();
    max_buffered_seen_ = std::max<std::uint64_t>(max_buffered_seen_, buffered_);
    ++chunks_in_flight_;
    return out;
  }

  // The next chunk of the current epoch, or once it is all admitted, of the next one.
  std::vector<admitted> admit_locked() {
    if (chunks_in_flight_ >= opts_.requests_in_flight) return {};
    while (next_admit_ < delivered_.size() && delivered_[next_admit_]) ++next_admit_;
    if (next_admit_ < delivered_.size()) return take_locked(plan_, epoch_, &delivered_, next_admit_);
    if (!next_plan_) {
      // Only once the current epoch's chunks have all completed: their cache puts are done, so a warm
      // cache answers every lookup of the next epoch (none is sent twice because it was still in flight).
      if (chunks_in_flight_ != 0) return {};
      next_plan_ = make_plan(epoch_ + 1);
      next_epoch_ = epoch_ + 1;
      next_epoch_admit_ = 0;
    }
    return take_locked(*next_plan_, next_epoch_, nullptr, next_epoch_admit_);
  }

  void work() {
    std::unique_lock lock(mu_);
    while (!closed_) {
      if (!finished_.empty()) {
        auto f = std::move(finished_.front());
        finished_.pop_front();
        lock.unlock();
        on_finished(std::move(f));
        lock.lock();
        continue;
      }
      auto items = admit_locked();
      if (!items.empty()) {
        lock.unlock();
        run_chunk(items);
        lock.lock();
        continue;
      }
      cv_.wait(lock);
    }
  }

  static error_info from_exception() {
    try {
      throw;
    } catch (const error& e) {
      return fail(e.code(), e.message());
    } catch (const std::bad_alloc&) {
      return fail(errc::resource_exhausted, "jit_loader: out of memory");
    } catch (const std::exception& e) {
      return fail(errc::internal, std::string("jit_loader: ") + e.what());
    } catch (...) {
      return fail(errc::internal, "jit_loader: unknown exception");
    }
  }

  void read_sample(chunk_sample& s, std::uint64_t index) {
    const std::size_t ng = groups_.size();
    s.texts.resize(ng);
    s.content.resize(ng);
    s.has.assign(ng, 0);
    s.keys.resize(ng);
    s.rows.resize(ng);
    s.errors.resize(ng);
    auto got = ds_.get(static_cast<std::size_t>(index));
    if (!got) {
      s.out.error = got.error();
      return;
    }
    s.src = std::move(*got);
    s.out.id = s.src.id;
    for (std::size_t g = 0; g < ng; ++g) {
      const auto kind = groups_[g].kind;
      // An image model decodes JPEG: prefer the JPEG of a sample that also has, say, a PNG stored raw.
      const auto* f = kind == format::field_kind::image ? s.src.first(kind, codec::codec_id::jpeg) : nullptr;
      if (!f) f = s.src.first(kind);
      if (!f) continue;
      if (groups_[g].kind == format::field_kind::text) {
        auto t = f->text(opts_.limits);  // the model and the key see UTF-8, whatever the stored encoding
        if (!t) {
          s.out.error = fail(t.code(), "sample '" + s.src.id + "': " + t.error().message);
          return;
        }
        s.texts[g] = std::move(*t);
        s.content[g] = as_bytes_view(s.texts[g]);
      } else {
        s.content[g] = f->bytes;
      }
      s.has[g] = 1;
      if (opts_.cache) {
        const auto& id = groups_[g].identity;
        s.keys[g] = cache::make_key({groups_[g].model, id.fingerprint, id.preprocess_key, s.content[g]});
      }
    }
  }

  // The tensors a group's specs need, from a cached value; nullopt when it lacks one (a miss).
  std::optional<named_rows> from_cache(const loader_group& g, const cache::cached_value& v) const {
    auto dec = cache::decode_value(v, opts_.limits);
    if (!dec) return std::nullopt;
    auto ts = dec->tensors();
    if (!ts || ts->empty()) return std::nullopt;
    for (const auto& o : g.outputs)
      if (std::none_of(ts->begin(), ts->end(), [&](const auto& p) { return p.first == o; })) return std::nullopt;
    return std::move(*ts);
  }

  void run_chunk(const std::vector<admitted>& items) {
    auto chunk = std::make_shared<loader_chunk>();
    chunk->pending = 1;
    try {
      chunk->samples.resize(items.size());
      for (std::size_t i = 0; i < items.size(); ++i) {
        auto& s = chunk->samples[i];
        s.epoch = items[i].epoch;
        s.pos = items[i].pos;
        s.out.index = items[i].index;
        try {
          read_sample(s, items[i].index);
        } catch (...) {
          s.out.error = from_exception();
        }
      }
      for (std::size_t g = 0; g < groups_.size(); ++g) {
        std::vector<std::size_t> rows;
        for (std::size_t i = 0; i < chunk->samples.size(); ++i)
          if (!chunk->samples[i].out.error && chunk->samples[i].has[g]) rows.push_back(i);
        if (rows.empty()) continue;
        if (opts_.cache) {
          std::vector<cache::cache_key> keys;
          keys.reserve(rows.size());
          for (auto i : rows) keys.push_back(chunk->samples[i].keys[g]);
          auto got = opts_.cache.multi_get(keys);
          std::vector<std::size_t> miss;
          for (std::size_t k = 0; k < rows.size(); ++k) {
            std::optional<named_rows> hit;
            if (k < got.size() && got[k]) hit = from_cache(groups_[g], *got[k]);
            if (hit) {
              chunk->samples[rows[k]].rows[g] = std::move(*hit);
              ++cache_hits_;
            } else {
              miss.push_back(rows[k]);
              ++cache_misses_;
            }
          }
          rows = std::move(miss);
        }
        if (rows.empty()) continue;
        loader_request r;
        r.chunk = chunk;
        r.group = g;
        r.rows = std::move(rows);
        submit(std::move(r));
      }
    } catch (...) {
      const auto e = from_exception();
      for (auto& s : chunk->samples)
        if (!s.out.error) s.out.error = e;
    }
    release(chunk);
  }

  void submit(loader_request r) {
    const auto& g = groups_[r.group];
    embed_request req;
    req.model = g.model;
    req.input = g.input;
    req.outputs = g.outputs;
    req.timeout = opts_.request_timeout;
    req.rows.reserve(r.rows.size());
    for (auto i : r.rows) req.rows.push_back(r.chunk->samples[i].content[r.group]);
    std::uint64_t token = 0;
    {
      std::lock_guard lock(mu_);
      token = next_token_++;
      ++r.chunk->pending;
      ++outstanding_;
      live_.emplace(token, std::move(r));
    }
    ++requests_;
    rows_requested_ += req.rows.size();
    const auto id = client_->embed(std::move(req), [this, token](result<embed_result> res) { on_done(token, std::move(res)); });
    std::lock_guard lock(mu_);
    if (auto it = live_.find(token); it != live_.end()) it->second.id = id;
  }

  // The client's callback: hand the result to a worker (short; notify under the lock so close() cannot
  // destroy the condition variable under us).
  void on_done(std::uint64_t token, result<embed_result> res) noexcept {
    try {
      std::lock_guard lock(mu_);
      auto it = live_.find(token);
      if (it == live_.end()) return;
      finished_.push_back({std::move(it->second), std::move(res)});
      live_.erase(it);
      --outstanding_;
      cv_.notify_all();
    } catch (...) {  // bad_alloc in push_back: nothing sensible left; the loader's close() still ends
    }
  }

  // A request's rows: slice every output to each row, fill the cache, resend retryable failures.
  void on_finished(finished_request f) {
    auto& req = f.req;
    auto& chunk = *req.chunk;
    const auto& g = groups_[req.group];
    std::vector<std::size_t> again;
    auto failed_row = [&](std::size_t i, const error_info& e) {
      if (is_retryable(e.code) && req.attempt < opts_.resubmits) {
        again.push_back(i);
        return;
      }
      chunk.samples[i].errors[req.group] = fail(e.code, "model '" + g.model + "': " + e.message);
    };
    try {
      if (!f.res) {
        for (auto i : req.rows) failed_row(i, f.res.error());
      } else {
        const embed_result& r = *f.res;
        const std::size_t n = req.rows.size();
        std::optional<error_info> bad;
        if (!r.row_errors.empty() && r.row_errors.size() != n)
          bad = fail(errc::internal, std::to_string(r.row_errors.size()) + " row errors for " + std::to_string(n) + " rows");
        for (const auto& [name, t] : r.outputs) {
          if (bad) break;
          if (!t.dev().is_cpu() || !t.is_contiguous() || t.rank() == 0 || t.size(0) != static_cast<std::int64_t>(n))
            bad = fail(errc::internal, "output '" + name + "' of shape " + t.shape().to_string() + " for " + std::to_string(n) + " rows");
        }
        if (!bad && r.outputs.empty()) bad = fail(errc::internal, "no outputs");
        if (bad) {
          for (auto i : req.rows) chunk.samples[i].errors[req.group] = fail(bad->code, "model '" + g.model + "': " + bad->message);
        } else {
          for (std::size_t k = 0; k < n; ++k) {
            const std::size_t i = req.rows[k];
            if (!r.row_ok(k)) {
              failed_row(i, r.row_errors[k]);
              continue;
            }
            named_rows row;
            row.reserve(r.outputs.size());
            for (const auto& [name, t] : r.outputs) {
              jitembed::shape s;
              for (std::size_t d = 1; d < t.rank(); ++d) s.push_back(t.size(d));
              const std::size_t row_bytes = t.nbytes() / n;
              auto* p = static_cast<std::byte*>(t.data()) + k * row_bytes;
              tensor_view v(static_cast<void*>(p), t.dtype(), s);
              if (t.owner()) row.emplace_back(name, tensor::wrap(t.owner(), v));
              else row.emplace_back(name, tensor::copy_of(v.bytes(), v.dtype(), v.shape()));  // nothing to share
            }
            if (opts_.cache) fill_cache(chunk.samples[i].keys[req.group], row);
            chunk.samples[i].rows[req.group] = std::move(row);
          }
        }
      }
      if (!again.empty()) {
        loader_request r2;
        r2.chunk = req.chunk;
        r2.group = req.group;
        r2.rows = std::move(again);
        r2.attempt = req.attempt + 1;
        ++resubmits_;
        submit(std::move(r2));
      }
    } catch (...) {
      const auto e = from_exception();
      for (auto i : req.rows)
        if (!chunk.samples[i].errors[req.group]) chunk.samples[i].errors[req.group] = e;
    }
    release(req.chunk);
  }

  void fill_cache(const cache::cache_key& key, const named_rows& row) {
    std::vector<cache::named_tensor> named;
    named.reserve(row.size());
    for (const auto& [n, t] : row) named.emplace_back(n, t.view());
    auto v = cache::encode_value(named, opts_.cache_values);
    if (v && opts_.cache.put(key, *v)) ++cache_puts_;
    else ++cache_put_failures_;
  }

  // Drops one hold on the chunk; the last one publishes its samples.
  void release(const std::shared_ptr<loader_chunk>& chunk) {
    {
      std::lock_guard lock(mu_);
      if (--chunk->pending != 0) return;
    }
    for (auto& s : chunk->samples) finish_sample(s);
    std::lock_guard lock(mu_);
    for (auto& s : chunk->samples) {
      if (s.epoch == epoch_) ++ready_current_;
      ready_.emplace(std::pair{s.epoch, s.pos}, std::move(s.out));
    }
    --chunks_in_flight_;
    cv_.notify_all();
  }

  void finish_sample(chunk_sample& s) {
    if (!s.out.error) {
      for (std::size_t g = 0; g < groups_.size() && !s.out.error; ++g) {
        if (!s.has[g]) continue;
        if (s.errors[g]) {
          s.out.error = fail(s.errors[g]->code, "sample '" + s.out.id + "': " + s.errors[g]->message);
          break;
        }
        for (auto i : groups_[g].specs) {
          const auto& spec = opts_.embeddings[i];
          const tensor* t = nullptr;
          if (spec.output.empty()) {
            if (!s.rows[g].empty()) t = &s.rows[g].front().second;
          } else {
            for (const auto& [n, v] : s.rows[g])
              if (n == spec.output) t = &v;
          }
          if (!t) {
            s.out.error = fail(errc::not_found, "sample '" + s.out.id + "': model '" + groups_[g].model + "' gave no output '" +
                                                    (spec.output.empty() ? std::string("(first)") : spec.output) + "'");
            break;
          }
          s.out.embeddings.emplace_back(spec.name, *t);
        }
      }
    }
    if (s.out.error) s.out.embeddings.clear();
    s.src = {};
    s.texts.clear();
    s.rows.clear();
  }

  format::dataset ds_;
  std::optional<jit_client> owned_;
  jit_client* client_;
  loader_options opts_;
  std::vector<loader_group> groups_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;
  std::uint64_t epoch_ = 0;
  epoch_plan plan_;
  std::vector<bool> delivered_;
  std::uint64_t steps_done_ = 0, head_ = 0, next_admit_ = 0;
  std::map<std::pair<std::uint64_t, std::uint64_t>, loaded_sample> ready_;  // by (epoch, position)
  std::uint64_t ready_current_ = 0;                // entries of ready_ in epoch_
  std::optional<epoch_plan> next_plan_;            // the next epoch's, once admission reached it
  std::uint64_t next_epoch_ = 0, next_epoch_admit_ = 0;
  std::uint64_t buffered_ = 0, max_buffered_seen_ = 0, chunks_in_flight_ = 0, outstanding_ = 0;
  std::uint64_t next_token_ = 1;
  std::unordered_map<std::uint64_t, loader_request> live_;
  std::deque<finished_request> finished_;
  std::uint64_t batches_ = 0, delivered_total_ = 0, failed_total_ = 0;
  double wait_s_ = 0, max_wait_s_ = 0;
  std::vector<std::thread> workers_;

  std::atomic<std::uint64_t> requests_{0}, rows_requested_{0}, resubmits_{0}, cache_hits_{0}, cache_misses_{0}, cache_puts_{0},
      cache_put_failures_{0};
};

}  // namespace jitembed::client::detail
