// Options of jit_loader: which embeddings each sample gets, batch and request sizes, prefetch depth and
// memory bound, distribution over ranks, shuffle, delivery order, cache and resume state.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "jitembed/cache/any_store.hpp"
#include "jitembed/cache/value_options.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/models/model.hpp"

namespace jitembed::loader {

// One embedding a sample gets: the model `model` run on the sample's first field of kind `kind` (image, video
// or text), delivered as `name`; a sample without such a field does not get it (not an error). Specs with the
// same model and kind share one request and one cache entry per sample. With `field` set, the field of that
// name instead: a tensor field travels as a typed row of its dtype and shape to `input` (default "input_ids"
// for an integer dtype), a text or json field as its UTF-8, other kinds as stored (docs/loader.md).
struct embedding_spec {
  std::string name;                                // key in embedded_sample::embeddings ("latent", "caption")
  std::string model;                               // model name on the service ("image-latent", "text-embed")
  models::modality kind = models::modality::image;
  std::string output;                              // the model output to deliver; empty: the model's first output
  std::string input;                               // request input name; empty: "image" / "video" / "text" by kind
  std::string field;                               // a sample field by name instead of the first of `kind`
};

// In what order next() hands out samples.
enum class delivery_order : std::uint8_t {
  dataset,     // this rank's sequence order (the dataset order when not shuffled): reproducible batches
  completion,  // whatever is ready first (each step still has the same size as in dataset order)
};

struct loader_options {
  std::vector<embedding_spec> embeddings;
  std::size_t batch_size = 32;          // samples per training step (the last step of an epoch may be smaller)
  std::size_t samples_per_request = 16; // B: rows per embed request
  std::size_t requests_in_flight = 8;   // D: chunks of B samples being read, looked up or embedded at once
  std::size_t workers = 2;              // threads that read samples, encode rows, fill the cache
  std::size_t max_buffered = 256;       // samples admitted and not yet returned by next() (the memory bound)

  std::size_t rank = 0;                 // this rank, in [0, world_size)
  std::size_t world_size = 1;
  std::uint64_t seed = 0;               // shuffle seed: the same on every rank
  bool shuffle = true;                  // permute the data set each epoch (seed, epoch)
  delivery_order order = delivery_order::dataset;
  std::uint64_t epoch = 0;              // first epoch (ignored when resuming)

  // Consulted before a request and filled after (memory -> LMDB -> Redis: pass a tiered_cache as an
  // any_store). Empty: no cache.
  cache::any_store cache;
  cache::value_options cache_values{};  // how filled values are encoded

  std::optional<std::chrono::milliseconds> request_timeout;  // per request; default: the client's
  // Whole-request or row failures with a retryable errc (after the client's own retries) are sent again
  // this many times before their samples are reported failed.
  int resubmits = 2;

  // When next() fails a step instead of handing it out (docs/loader.md, Failed samples): with fail_fast when
  // any sample failed; else when the samples that failed for the service (an errc other than a fix_input one)
  // are at least max_failed_fraction of the step (1.0: only when all did; above 1: never).
  bool fail_fast = false;
  double max_failed_fraction = 1.0;
  // When set, create() first waits this long for an endpoint ready for each model (client::jit_client::wait_ready)
  // and fails with its error. fail_fast without it waits kDefaultFailFastReadyTimeout.
  std::optional<std::chrono::milliseconds> ready_timeout;
  static constexpr std::chrono::milliseconds kDefaultFailFastReadyTimeout{5000};

  decode_limits limits{};               // for text fields stored compressed and for cached values

  // A state() from an earlier loader: resume mid-epoch (every sample not delivered yet, and only those).
  // Must come from the same data set size, world size, rank, seed, shuffle and batch size.
  byte_buffer resume;
};

}  // namespace jitembed::loader
