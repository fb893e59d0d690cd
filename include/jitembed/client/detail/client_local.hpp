// The client's local models (local_transport.hpp): in-process models ("embed on a local GPU") run on a
// worker pool. Rows are preprocessed one by one (a row that fails alone is a row error), then run in
// batches of consecutive rows with the same preprocessed shape, up to the model's max_batch_size.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jitembed/client/detail/client_common.hpp"
#include "jitembed/client/options.hpp"
#include "jitembed/client/stats.hpp"
#include "jitembed/core/detail/capture.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/worker_group.hpp"
#include "jitembed/models/preprocess_input.hpp"

namespace jitembed::client::detail {

// Starting its threads is all or none: the constructor throws worker_group's std::system_error after
// stopping those that started (client_state::create reports it as resource_exhausted).
class local_backend {
 public:
  explicit local_backend(const client_options& opts)
      : models_(opts.local_models),
        threads_(opts.local_threads ? opts.local_threads : std::max(1u, std::thread::hardware_concurrency()),
                 [this](std::stop_token stop, std::size_t) { work(stop); }) {}
  ~local_backend() { close(); }

  const models::any_model* find(const std::string& name) const {
    for (const auto& m : models_)
      if (m.name() == name) return &m;
    return nullptr;
  }

  // Queues a task; false after close().
  bool post(std::function<void()> task) {
    {
      std::lock_guard lk(mu_);
      if (closed_) return false;
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
    return true;
  }

  // Runs `rows` through `m`: per-row outputs (present[i] false with errors[i] set for a failed row).
  static void run_rows(const models::any_model& m, const std::vector<bytes_view>& rows, bool is_sample,
                       const decode_limits& limits, std::vector<models::named_tensors>& outs,
                       std::vector<bool>& present, std::vector<error_info>& errors) {
    const std::size_t n = rows.size();
    errors.assign(n, error_info{});
    std::vector<tensor> inputs(n);
    for (std::size_t i = 0; i < n; ++i) {
      auto t = models::preprocess_input(m, rows[i], is_sample, limits);
      if (!t) {
        errors[i] = t.error();
        continue;
      }
      inputs[i] = std::move(*t);
    }
    run_items(m, inputs, outs, present, errors);
  }

  // Runs model items (errors[i] already set: row i is skipped) in batches of consecutive rows of one shape.
  static void run_items(const models::any_model& m, const std::vector<tensor>& inputs,
                        std::vector<models::named_tensors>& outs, std::vector<bool>& present,
                        std::vector<error_info>& errors) {
    const std::size_t n = inputs.size();
    outs.assign(n, {});
    present.assign(n, false);
    errors.resize(n);
    const std::size_t max_batch = std::max<std::size_t>(1, m.max_batch_size());
    std::size_t i = 0;
    while (i < n) {
      if (errors[i].code != errc::ok) {
        ++i;
        continue;
      }
      std::vector<tensor> batch{inputs[i]};
      std::vector<std::size_t> idx{i};
      std::size_t j = i + 1;
      while (j < n && batch.size() < max_batch && errors[j].code == errc::ok &&
             inputs[j].shape() == inputs[i].shape() && inputs[j].dtype() == inputs[i].dtype()) {
        batch.push_back(inputs[j]);
        idx.push_back(j);
        ++j;
      }
      i = j;
      const std::string what = "local model '" + std::string(m.name()) + "'";
      auto r = core_detail::capture(what.c_str(), [&] { return m.run(batch); });
      for (std::size_t k = 0; k < idx.size(); ++k) {
        if (!r) {
          errors[idx[k]] = r.error();
        } else {
          outs[idx[k]] = std::move((*r)[k]);
          present[idx[k]] = true;
        }
      }
    }
  }

  void close() {
    {
      std::lock_guard lk(mu_);
      if (closed_) return;
      closed_ = true;
    }
    cv_.notify_all();
    threads_.join();  // the workers drain the queue first
  }

 private:
  // Runs tasks until closed (or stopped: a failed start) and the queue is drained.
  void work(std::stop_token stop) {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, stop, [&] { return closed_ || !queue_.empty(); });
        if (queue_.empty()) return;  // closed (or stopped) and drained
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  std::vector<models::any_model> models_;
  std::mutex mu_;
  std::condition_variable_any cv_;  // waits on the workers' stop_token too
  std::deque<std::function<void()>> queue_;
  bool closed_ = false;
  worker_group threads_;  // last: the workers use the members above
};

}  // namespace jitembed::client::detail
