// jit_loader: the prefetching data loader of JIT embedding. Worker threads read samples of a
// format::dataset, look their embeddings up in a cache and ask a client::jit_client for the rest, far enough
// ahead (bounded) that next() rarely waits; every sample of this rank's share of the epoch is delivered
// exactly once, with its embeddings or the errc that failed it. Usage and guarantees: docs/loader.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>

#include "jitembed/client/jit_client.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/config.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/format/dataset.hpp"
#include "jitembed/loader/options.hpp"
#include "jitembed/loader/stats.hpp"
#include "jitembed/loader/step.hpp"

namespace jitembed::loader {

namespace detail {
class loader_state;
}

class jit_loader {
 public:
  // Validates the options (invalid_argument: no embeddings, a zero size, rank >= world_size,
  // max_buffered < batch_size or samples_per_request, duplicate names, a kind other than image / video /
  // text), with ready_timeout / fail_fast waits for an endpoint ready for each model (wait_ready's error),
  // asks the client for each model's identity when a cache is given (its error otherwise), checks a resume
  // state (its errc), then starts prefetching the first step (resource_exhausted when a worker cannot start: those
  // already started are stopped, and what they sent is cancelled).
  //
  // `client` is a handle: the loader keeps a copy (sharing the caller's client, its connections and
  // stats); closing the loader does not close the client. The options are copied here, as jit_client::create's.
  static result<jit_loader> create(format::dataset data, client::jit_client client, const loader_options& opts);

  jit_loader(jit_loader&&) noexcept;
  jit_loader& operator=(jit_loader&&) noexcept;
  ~jit_loader();  // the state's destructor closes: joins workers, cancels and waits for requests

  // The next step's samples, blocking until they are ready (in dataset order, or the first ready ones with
  // delivery_order::completion). nullopt once at the end of each epoch; the call after it starts the next
  // epoch (a new permutation). Failed samples are in the batch with their error, unless fail_fast or
  // max_failed_fraction fails the step (loader_options: the first failed sample's errc, naming the
  // endpoints; the step counts as delivered). errc::cancelled after close(). steps() is the same as a range.
  result<std::optional<step>> next();

  class step_range;
  // The rest of the current epoch as an input range of steps:
  //   for (int e = 0; e < epochs; ++e) {
  //     for (loader::step& step : loader.steps()) train(step);
  //     if (auto st = loader.status(); !st) return st;  // why the epoch stopped early (close(): cancelled)
  //   }
  // The range ends at the end of the epoch (the next steps() starts the next one) or at the first error
  // of next(), which status() then holds; a loop left by break resumes the same epoch at the next steps().
  step_range steps();
  // The error that ended the last steps() range early; success when it ended with its epoch.
  const result<void>& status() const noexcept { return status_; }

  // The checkpoint of what has been delivered: give it as loader_options::resume to a new loader over the
  // same data set (and rank, world size, seed, shuffle, batch size) to deliver exactly the rest.
  byte_buffer state() const;

  loader_stats stats() const;
  std::uint64_t epoch() const;
  std::uint64_t steps_per_epoch() const;    // equal on every rank
  std::uint64_t samples_per_epoch() const;  // this rank's share

  // Stops prefetching, cancels the requests in flight and waits for their callbacks. Idempotent; next()
  // then fails with errc::cancelled.
  void close();

 private:
  explicit jit_loader(std::unique_ptr<detail::loader_state> s);
  std::unique_ptr<detail::loader_state> state_;
  result<void> status_{};
};

// What jit_loader::steps() returns; it refers to the loader, which must outlive it (and not move).
class jit_loader::step_range {
 public:
  class iterator {
   public:
    using value_type = step;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    step& operator*() const noexcept { return *range_->current_; }
    step* operator->() const noexcept { return &*range_->current_; }
    iterator& operator++() {
      range_->advance();
      return *this;
    }
    void operator++(int) { ++*this; }
    bool at_end() const noexcept { return !range_ || !range_->current_; }
    friend bool operator==(const iterator& it, std::default_sentinel_t) noexcept { return it.at_end(); }

   private:
    friend class step_range;
    explicit iterator(step_range* r) : range_(r) {}
    step_range* range_ = nullptr;
  };

  explicit step_range(jit_loader& l) : loader_(&l) {}
  step_range(const step_range&) = delete;
  step_range& operator=(const step_range&) = delete;
  step_range(step_range&&) noexcept = default;
  step_range& operator=(step_range&&) noexcept = default;

  // The first call fetches the first step; a range is traversed once.
  iterator begin() {
    if (!started_) {
      started_ = true;
      advance();
    }
    return iterator(this);
  }
  std::default_sentinel_t end() const noexcept { return {}; }

 private:
  void advance() {
    current_.reset();
    auto r = loader_->next();
    if (!r) {
      loader_->status_ = std::move(r).error();
      return;
    }
    loader_->status_ = {};
    if (*r) current_.emplace(std::move(**r));
  }
  jit_loader* loader_;
  std::optional<step> current_;
  bool started_ = false;
};

inline jit_loader::step_range jit_loader::steps() { return step_range(*this); }

}  // namespace jitembed::loader

#if defined(JITEMBED_HEADER_ONLY)
#include "jitembed/loader/detail/jit_loader_impl.hpp"
#endif
