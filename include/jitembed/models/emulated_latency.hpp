// emulated_latency: wraps a model so that run() also sleeps a fixed time per batch (plus an optional time
// per item), standing in for a remote GPU encoder's latency without using a CPU: loaders and trainers can
// then be measured against a realistic service on a small machine.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "jitembed/models/any_model.hpp"
#include "jitembed/models/model.hpp"

namespace jitembed::models {

struct latency_options {
  std::chrono::microseconds per_batch{0};  // slept once per run() call
  std::chrono::microseconds per_item{0};   // slept once per item of the batch, on top
};

// Models models::model by forwarding to `inner`; run() sleeps per_batch + per_item x items, then runs.
// Sleeping does not change any output, so version() (the fingerprint in every cache key) and
// preprocess_key() are the inner model's: a cache filled with or without the latency is the same cache.
class emulated_latency {
 public:
  emulated_latency(any_model inner, latency_options o) : inner_(std::move(inner)), opts_(o) {}

  std::string_view name() const { return inner_.name(); }
  std::string_view version() const { return inner_.version(); }
  std::string_view preprocess_key() const { return inner_.preprocess_key(); }
  modality input_modality() const { return inner_.input_modality(); }
  std::span<const tensor_meta> inputs() const { return inner_.inputs(); }
  std::span<const tensor_meta> outputs() const { return inner_.outputs(); }
  std::size_t max_batch_size() const { return inner_.max_batch_size(); }
  jitembed::device device() const { return inner_.device(); }
  result<tensor> preprocess(bytes_view raw, const decode_limits& limits) const { return inner_.preprocess(raw, limits); }
  bool has_preprocess() const { return models::has_preprocess(inner_); }
  result<std::vector<named_tensors>> run(std::span<const tensor> batch) const {
    const auto pause = opts_.per_batch + opts_.per_item * static_cast<std::int64_t>(batch.size());
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
    return inner_.run(batch);
  }

  const latency_options& options() const noexcept { return opts_; }
  const any_model& inner() const noexcept { return inner_; }

 private:
  any_model inner_;
  latency_options opts_;
};

static_assert(model<emulated_latency>);

}  // namespace jitembed::models
