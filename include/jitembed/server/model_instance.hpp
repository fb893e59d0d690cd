// One loaded model version: the model, its dynamic batcher (bucketed by the preprocessed tensor's shape),
// request counters.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/batching/dynamic_batcher.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/any_model.hpp"
#include "jitembed/models/factory.hpp"
#include "jitembed/server/config.hpp"

namespace jitembed::server {

// Model construction lives in models/factory.hpp (apart from the serving instance); its names stay here too
// (the reference factory's: server/service.hpp).
using models::model_factory;
using models::parse_latency_params;
using models::with_latency_params;
namespace detail {
using models::detail::int_param;
}  // namespace detail

// One preprocessed row waiting for a batch, with its request's deadline (none: no KServe "timeout").
struct row_item {
  tensor input;
  std::optional<std::chrono::steady_clock::time_point> deadline{};
};

// Requests are batched only with rows of equal dtype and shape: the dims followed by the dtype code.
using shape_bucket = std::vector<std::int64_t>;

inline shape_bucket bucket_of(const tensor& t) {
  shape_bucket b(t.shape().begin(), t.shape().end());
  b.push_back(static_cast<std::int64_t>(t.dtype()));
  return b;
}

using row_batcher = batching::dynamic_batcher<row_item, models::named_tensors, shape_bucket>;

// Counters of one model version (with the batcher's stats: Triton's statistics and the metrics).
struct model_counters {
  std::atomic<std::uint64_t> success{0}, failure{0}, inferences{0};
  std::atomic<std::uint64_t> rejected_admission{0};  // answered 503 at once: max_inflight_rows reached
  std::atomic<std::uint64_t> success_ns{0}, failure_ns{0};
  std::atomic<std::uint64_t> last_inference_ms{0};
};

// One loaded model version. A movable value: its state (the model the batcher's runners call, the counters)
// lives behind one pointer, so a move leaves the runners' view of the model valid.
class model_instance {
 public:
  // Builds the batcher around `m` (one runner thread per instance). Errors: invalid_argument for batcher
  // settings the batcher refuses (instances 0, ...).
  static result<model_instance> create(models::any_model m, model_config cfg) {
    auto s = std::make_unique<state>();
    s->model = std::move(m);
    s->config = std::move(cfg);
    const auto& c = s->config;
    batching::batcher_options o;
    const std::size_t model_max = std::max<std::size_t>(s->model.max_batch_size(), 1);
    o.max_batch_size = c.max_batch_size ? std::min(c.max_batch_size, model_max) : model_max;
    o.max_queue_delay = std::chrono::microseconds(c.max_queue_delay_us);
    o.idle_dispatch = c.idle_dispatch;
    o.max_queue_size = c.queue_size;
    o.runner_threads = c.instances;
    o.default_timeout = std::chrono::microseconds(c.timeout_us);
    for (auto p : c.preferred_batch_sizes) o.preferred_batch_sizes.push_back(std::min(p, o.max_batch_size));
    s->batch_options = o;
    s->max_inflight_rows = c.max_inflight_rows ? c.max_inflight_rows : default_inflight_rows(c.queue_size);
    const models::any_model* model = &s->model;  // stays put: `s` moves as a pointer
    overrun_tracker* overrun = &s->overrun;
    JITEMBED_ASSIGN_OR_RETURN(auto b, row_batcher::create(o, [model, overrun](std::span<row_item> in, std::span<result<models::named_tensors>> out) {
      std::vector<tensor> batch;
      batch.reserve(in.size());
      std::optional<std::chrono::steady_clock::time_point> deadline;  // the earliest of the batch's rows
      for (auto& r : in) {
        batch.push_back(std::move(r.input));
        if (r.deadline && (!deadline || *r.deadline < *deadline)) deadline = r.deadline;
      }
      const auto running = overrun->begin(deadline);
      auto res = model->run(batch);
      overrun->end(running);
      if (!res) {
        for (auto& o2 : out) o2 = res.error();
        return;
      }
      if (res->size() != in.size()) {
        for (auto& o2 : out) o2 = fail(errc::internal, "model returned " + std::to_string(res->size()) + " results for a batch of " + std::to_string(in.size()));
        return;
      }
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = std::move((*res)[i]);
    }));
    s->batcher.emplace(std::move(b));
    return model_instance(std::move(s));
  }
  model_instance(model_instance&&) noexcept = default;
  model_instance& operator=(model_instance&&) noexcept = default;
  model_instance(const model_instance&) = delete;
  model_instance& operator=(const model_instance&) = delete;

  // Runs one dummy batch (zeros shaped like inputs(), variable extents = 1) before the version serves.
  result<void> warm() const {
    const auto ins = model().inputs();
    if (ins.empty()) return {};
    std::vector<std::int64_t> dims;
    for (auto d : ins[0].shape) dims.push_back(d < 0 ? 1 : d);
    tensor t = tensor::zeros(jitembed::shape(std::span<const std::int64_t>(dims)), ins[0].type);
    auto r = model().run(std::span<const tensor>(&t, 1));
    if (!r) return fail(r.error().code, "warm-up of '" + name() + "' version " + version() + " failed: " + r.error().message);
    return {};
  }

  const models::any_model& model() const noexcept { return s_->model; }
  const model_config& config() const noexcept { return s_->config; }
  const std::string& name() const noexcept { return s_->config.name; }
  const std::string& version() const noexcept { return s_->config.version; }
  const batching::batcher_options& batch_options() const noexcept { return s_->batch_options; }
  row_batcher& batcher() noexcept { return *s_->batcher; }
  const row_batcher& batcher() const noexcept { return *s_->batcher; }
  model_counters& counters() noexcept { return s_->counters; }
  const model_counters& counters() const noexcept { return s_->counters; }

  // Admission, from before decoding until the response: try_admit() takes one row while fewer than
  // max_inflight_rows() are admitted; admit_more() adds the request's other rows; release_rows() ends it.
  bool try_admit() noexcept {
    std::size_t cur = s_->admitted.load(std::memory_order_relaxed);
    do {
      if (cur >= s_->max_inflight_rows) return false;
    } while (!s_->admitted.compare_exchange_weak(cur, cur + 1, std::memory_order_relaxed));
    return true;
  }
  void admit_more(std::size_t rows) noexcept { s_->admitted.fetch_add(rows, std::memory_order_relaxed); }
  void release_rows(std::size_t rows) noexcept { s_->admitted.fetch_sub(rows, std::memory_order_relaxed); }
  std::size_t admitted_rows() const noexcept { return s_->admitted.load(std::memory_order_relaxed); }
  std::size_t max_inflight_rows() const noexcept { return s_->max_inflight_rows; }

  // Requests routed to this version and not yet answered (guarded by the registry's drain mutex).
  std::size_t& active() noexcept { return s_->active; }

  // False while a batch runs past the deadline of one of its rows: those requests were answered timeout,
  // but a model cannot be interrupted, so its instance stays busy until run() returns.
  bool ready() const { return !s_->overrun.overrunning(std::chrono::steady_clock::now()); }

 private:
  // The deadlines of the batches being run (one entry per runner thread at most).
  class overrun_tracker {
   public:
    using clock = std::chrono::steady_clock;
    using entry = std::multiset<clock::time_point>::iterator;
    std::optional<entry> begin(std::optional<clock::time_point> deadline) {
      if (!deadline) return std::nullopt;
      std::lock_guard lock(mu_);
      return running_.insert(*deadline);
    }
    void end(std::optional<entry> e) {
      if (!e) return;
      std::lock_guard lock(mu_);
      running_.erase(*e);
    }
    bool overrunning(clock::time_point now) const {
      std::lock_guard lock(mu_);
      return !running_.empty() && *running_.begin() <= now;
    }

   private:
    mutable std::mutex mu_;
    std::multiset<clock::time_point> running_;
  };

  struct state {
    models::any_model model;
    model_config config;
    batching::batcher_options batch_options;
    std::size_t max_inflight_rows = 0;
    std::atomic<std::size_t> admitted{0};
    std::size_t active = 0;
    model_counters counters;
    overrun_tracker overrun;
    std::optional<row_batcher> batcher;  // last: destroyed (drained) first
  };
  explicit model_instance(std::unique_ptr<state> s) noexcept : s_(std::move(s)) {}

  std::unique_ptr<state> s_;
};

}  // namespace jitembed::server
