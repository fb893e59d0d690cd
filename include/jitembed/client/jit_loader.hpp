// jit_loader: the prefetching data loader of JIT embedding. Worker threads read samples of a
// format::dataset, look their embeddings up in a cache and ask a jit_client for the rest, far enough
// ahead (bounded) that next() rarely waits; every sample of this rank's share of the epoch is delivered
// exactly once, with its embeddings or the errc that failed it. Usage and guarantees: docs/loader.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "jitembed/client/detail/loader_state.hpp"
#include "jitembed/client/jit_client.hpp"
#include "jitembed/client/loader_batch.hpp"
#include "jitembed/client/loader_options.hpp"
#include "jitembed/client/loader_stats.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/format/dataset.hpp"

namespace jitembed::client {

class jit_loader {
 public:
  // Validates the options (invalid_argument: no embeddings, a zero size, rank >= world_size,
  // max_buffered < batch_size or samples_per_request, duplicate names, a kind other than image / video /
  // text), asks the client for each model's identity when a cache is given (its error otherwise), checks
  // a resume state (its errc), then starts prefetching the first step.
  //
  // Borrows `client`: it must outlive the loader and stay where it is (not moved) meanwhile.
  static result<jit_loader> create(format::dataset data, jit_client& client, loader_options opts) {
    JITEMBED_ASSIGN_OR_RETURN(auto s, detail::loader_state::create(std::move(data), &client, std::nullopt, std::move(opts)));
    return jit_loader(std::move(s));
  }
  // The same, owning the client (closed with the loader).
  static result<jit_loader> create(format::dataset data, jit_client&& client, loader_options opts) {
    JITEMBED_ASSIGN_OR_RETURN(auto s, detail::loader_state::create(std::move(data), nullptr, std::optional<jit_client>(std::move(client)), std::move(opts)));
    return jit_loader(std::move(s));
  }

  jit_loader(jit_loader&&) noexcept = default;
  jit_loader& operator=(jit_loader&&) noexcept = default;
  ~jit_loader() = default;  // the state's destructor closes: joins workers, cancels and waits for requests

  // The next step's samples, blocking until they are ready (in dataset order, or the first ready ones with
  // delivery_order::completion). nullopt once at the end of each epoch; the call after it starts the next
  // epoch (a new permutation). Failed samples are in the batch with their error. errc::cancelled after
  // close().
  result<std::optional<batch>> next() { return state_->next(); }

  // The checkpoint of what has been delivered: give it as loader_options::resume to a new loader over the
  // same data set (and rank, world size, seed, shuffle, batch size) to deliver exactly the rest.
  byte_buffer state() const { return state_->state(); }

  loader_stats stats() const { return state_->stats(); }
  std::uint64_t epoch() const { return state_->epoch(); }
  std::uint64_t steps_per_epoch() const { return state_->steps_per_epoch(); }    // equal on every rank
  std::uint64_t samples_per_epoch() const { return state_->samples_per_epoch(); }  // this rank's share

  // Stops prefetching, cancels the requests in flight and waits for their callbacks. Idempotent; next()
  // then fails with errc::cancelled.
  void close() {
    if (state_) state_->close();
  }

 private:
  explicit jit_loader(std::unique_ptr<detail::loader_state> s) : state_(std::move(s)) {}
  std::unique_ptr<detail::loader_state> state_;
};

}  // namespace jitembed::client
