// The runner contract of dynamic_batcher: what a runner receives (batch_context) and the concept it models.
#pragma once

#include <concepts>
#include <cstddef>
#include <span>

#include "jitembed/core/error.hpp"

namespace jitembed::batching {

// What a runner learns about the batch besides its requests.
template <class BucketKey>
struct batch_context {
  const BucketKey& bucket;  // every request of the batch was submitted with a bucket equal to this one
  std::size_t instance;     // the runner thread, in [0, runner_threads)
};

// A runner computes one batch: it writes out[i] for requests[i] (a value or an error). It may also take
// the context first: void(const batch_context<BucketKey>&, span<Request>, span<result<Response>>).
// Requests may be moved from. If it throws, every request of the batch fails with errc::internal
// (errc::resource_exhausted for std::bad_alloc).
template <class F, class Request, class Response, class BucketKey>
concept batch_runner =
    std::invocable<F&, std::span<Request>, std::span<result<Response>>> ||
    std::invocable<F&, const batch_context<BucketKey>&, std::span<Request>, std::span<result<Response>>>;

}  // namespace jitembed::batching
