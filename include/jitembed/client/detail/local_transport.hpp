// The client's local transport (client_options.local_models): in-process models on a worker pool, its one
// endpoint "local". A local model's answer is final: its error is the call's, never retried (docs/client.md).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jitembed/client/detail/transport.hpp"
#include "jitembed/client/options.hpp"
#include "jitembed/client/stats.hpp"
#include "jitembed/core/detail/capture.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/thread_pool.hpp"
#include "jitembed/models/model.hpp"
#include "jitembed/models/preprocess_input.hpp"

namespace jitembed::client::detail {

// The local models and the pool that runs them. Starting its threads is all or none: the constructor throws
// worker_group's std::system_error after stopping those that started (create() says resource_exhausted).
class local_backend {
 public:
  explicit local_backend(const client_options& opts)
      : models_(opts.local_models),
        pool_(std::in_place,
              opts.local_threads ? opts.local_threads : std::max(1u, std::thread::hardware_concurrency())) {}

  const models::any_model* find(const std::string& name) const {
    for (const auto& m : models_)
      if (m.name() == name) return &m;
    return nullptr;
  }

  // Queues a task; false after close().
  bool post(std::function<void()> task) {
    std::lock_guard lk(mu_);
    if (pool_) pool_->submit(std::move(task));
    return pool_.has_value();
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

  // The workers drain the queue and stop (outside the lock: their tasks may post).
  void close() {
    std::optional<thread_pool> gone;
    std::lock_guard lk(mu_);
    gone.swap(pool_);
  }

 private:
  std::vector<models::any_model> models_;
  std::mutex mu_;                    // pool_
  std::optional<thread_pool> pool_;  // last: its workers run the models above
};

// Stacks one item's outputs per row into [N, ...] tensors; rows without outputs (failed) stay zeros.
// Every present row must agree on names, dtypes and shapes (a model's outputs do).
inline result<named_tensors> stack_rows(const std::vector<models::named_tensors>& rows,
                                        const std::vector<bool>& present) {
  named_tensors out;
  const auto it = std::find(present.begin(), present.end(), true);
  if (it == present.end()) return out;
  const models::named_tensors* first = &rows[static_cast<std::size_t>(it - present.begin())];
  for (std::size_t k = 0; k < first->size(); ++k) {
    const auto& [name, t0] = (*first)[k];
    shape s;
    s.push_back(static_cast<std::int64_t>(rows.size()));
    for (auto d : t0.shape()) s.push_back(d);
    tensor stacked = tensor::zeros(s, t0.dtype());
    const std::size_t row_bytes = t0.nbytes();
    auto* dst = static_cast<std::byte*>(stacked.data());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (!present[i]) continue;
      if (rows[i].size() != first->size() || rows[i][k].first != name || rows[i][k].second.dtype() != t0.dtype() ||
          rows[i][k].second.nbytes() != row_bytes) {
        return fail(errc::internal, "output '" + name + "' differs between rows of one request");
      }
      const tensor src = rows[i][k].second.is_contiguous() ? rows[i][k].second : rows[i][k].second.clone();
      if (row_bytes) std::memcpy(dst + i * row_bytes, src.data(), row_bytes);
    }
    out.emplace_back(name, std::move(stacked));
  }
  return out;
}

inline const endpoint_address& local_endpoint() {
  static const endpoint_address a{"local", "local"};
  return a;
}

class local_transport final : public transport {
 public:
  // Starts the worker pool (throws worker_group's std::system_error).
  local_transport(const client_options& opts, client_executor& exec, attempt_events& events)
      : backend_(opts), exec_(exec), events_(events) {}

  const local_backend& backend() const noexcept { return backend_; }

  void send(const attempt_ptr& a, deferred& d) override {
    auto task = std::make_shared<std::atomic<bool>>(false);  // abandoned
    a->io = task;
    local_transport* const self = this;  // close() drains the workers before the transport goes
    const bool queued = backend_.post([self, a, task] {
      if (task->load()) return;
      auto r = self->run(*a->call);
      self->exec_.post([self, a, r = std::move(r)]() mutable {
        self->events_.complete(a, [&](deferred& d) {
          self->events_.on_answer(a, {attempt_fault::none, std::move(r)}, d);
        });
      });
    });
    if (!queued) events_.on_answer(a, {attempt_fault::none, fail(errc::cancelled, "client: closed")}, d);
  }

  void abandon(remote_attempt& a) override {
    if (a.io) std::static_pointer_cast<std::atomic<bool>>(a.io)->store(true);
  }

  result<std::optional<model_identity>> identity(const endpoint_address&, const std::string& model) override {
    const auto* m = backend_.find(model);
    if (!m) return no_model(model);
    return std::optional<model_identity>(model_identity{std::string(m->version()), std::string(m->preprocess_key()),
                                                        std::string(models::to_string(m->input_modality()))});
  }

  result<model_metadata> metadata(const endpoint_address&, const std::string& model) override {
    const auto* m = backend_.find(model);
    if (!m) return no_model(model);
    model_metadata md;
    md.name = model;
    md.platform = "jitembed";
    md.versions = {std::string(m->version())};
    md.inputs.push_back({std::string(models::to_string(m->input_modality())), "BYTES", {-1, 1}});
    for (const auto& o : m->outputs()) {
      served_tensor t{o.name, std::string(net::kserve::to_string(net::kserve::from_dtype(o.type))), {-1}};
      t.shape.insert(t.shape.end(), o.shape.begin(), o.shape.end());
      md.outputs.push_back(std::move(t));
    }
    return md;
  }

  bool ready(const endpoint_address&, const std::string& model) override { return backend_.find(model) != nullptr; }

  shm_call_result shared_memory(const endpoint_address&, const std::string&, const std::string&, std::size_t) override {
    return {false, true, "local models take no shared memory"};
  }

  bool needs_address() const override { return false; }

  // The workers finish the queued tasks (each one abandoned by now) and stop.
  void close() override { backend_.close(); }

 private:
  static error_info no_model(const std::string& model) {
    return fail(errc::not_found, "client: no local model '" + model + "'");
  }

  // Typed rows as the model's items, as the server takes them (server/detail/request_rows.hpp): its
  // declared input (name, datatype, dims), or "input_ids" INT64 / INT32 [L] for a text model whose input is
  // token ids (i64 [2, L]: ids and an all-ones mask, or i64 [L]). Anything else fails the whole call.
  static result<std::vector<tensor>> typed_items(const models::any_model& m, const remote_call& c) {
    namespace ks = net::kserve;
    const auto& d = m.inputs().front();
    const auto dims = [](const std::vector<std::int64_t>& s) { return ks::detail::shape_string(s); };
    const std::string type(ks::to_string(c.type));
    std::vector<tensor> items;
    items.reserve(c.n_rows);
    if (c.input == d.name) {
      if (c.type != ks::from_dtype(d.type))
        return fail(errc::dtype_mismatch, "input '" + c.input + "' has datatype " + type + ", expected " +
                                              std::string(ks::to_string(ks::from_dtype(d.type))));
      bool fits = c.row_shape.size() == d.shape.size();
      for (std::size_t k = 0; fits && k < d.shape.size(); ++k) fits = d.shape[k] < 0 || d.shape[k] == c.row_shape[k];
      if (!fits)
        return fail(errc::invalid_argument, "input '" + c.input + "' has shape " + dims(c.input_shape()) +
                                                ", expected [batch] + " + dims(d.shape));
      for (std::size_t i = 0; i < c.n_rows; ++i)
        items.push_back(tensor::copy_of(c.row(i), d.type, shape(std::span<const std::int64_t>(c.row_shape))));
      return items;
    }
    const bool ids_model = m.input_modality() == models::modality::text && d.type == dtype::i64 &&
                           ((d.shape.size() == 2 && d.shape[0] == 2) || d.shape.size() == 1) && d.shape.back() >= 1;
    if (!ids_model || c.input != "input_ids")
      return fail(errc::invalid_argument, "unexpected input '" + c.input + "' for local model '" + c.model +
                                              "': it takes '" + d.name + "'" + (ids_model ? " or 'input_ids'" : ""));
    const std::int64_t L = d.shape.back();
    if (c.type != ks::datatype::int64 && c.type != ks::datatype::int32)
      return fail(errc::dtype_mismatch, "input 'input_ids' has datatype " + type + ", expected INT64 or INT32");
    if (c.row_shape != std::vector<std::int64_t>{L})
      return fail(errc::invalid_argument, "input 'input_ids' has shape " + dims(c.input_shape()) +
                                              ", expected [batch, " + std::to_string(L) + "]");
    const auto n = static_cast<std::size_t>(L);
    for (std::size_t i = 0; i < c.n_rows; ++i) {
      tensor t = tensor::empty(d.shape.size() == 2 ? shape{2, L} : shape{L}, dtype::i64);
      auto* out = t.data<std::int64_t>();
      const std::byte* in = c.row(i).data();
      for (std::size_t k = 0; k < n; ++k) {
        if (c.type == ks::datatype::int64) {
          std::memcpy(&out[k], in + k * 8, 8);
        } else {
          std::int32_t v;
          std::memcpy(&v, in + k * 4, 4);
          out[k] = v;
        }
        if (d.shape.size() == 2) out[n + k] = 1;
      }
      items.push_back(std::move(t));
    }
    return items;
  }

  // Runs the call's rows through its model: the stacked outputs, row errors for the rows that failed alone.
  result<embed_result> run(const remote_call& c) {
    const auto* m = backend_.find(c.model);
    if (!m) return no_model(c.model);
    if (clock::now() > c.deadline) return fail(errc::timeout, "embed: deadline passed before the local model ran");
    std::vector<tensor> items(c.n_rows);
    std::vector<error_info> errors(c.n_rows);  // a row that fails preprocessing alone is a row error
    if (c.typed()) {
      JITEMBED_ASSIGN_OR_RETURN(items, typed_items(*m, c));
    } else {
      for (std::size_t i = 0; i < c.n_rows; ++i) {
        auto t = models::preprocess_input(*m, c.row(i), c.input == "sample", decode_limits{});
        if (t)
          items[i] = std::move(*t);
        else
          errors[i] = t.error();
      }
    }
    std::vector<models::named_tensors> outs;
    std::vector<bool> present;
    local_backend::run_items(*m, items, outs, present, errors);
    if (c.n_rows == 1 && !present[0]) return errors[0];
    if (!c.outputs.empty()) {
      for (auto& o : outs) {
        models::named_tensors kept;
        for (const auto& w : c.outputs)
          for (auto& nt : o)
            if (nt.first == w) kept.push_back(nt);
        o = std::move(kept);
      }
    }
    auto stacked = stack_rows(outs, present);
    if (!stacked) return stacked.error();
    embed_result r;
    r.model_name = c.model;
    r.model_version = std::string(m->version());
    r.outputs = std::move(*stacked);
    r.endpoint = "local";
    if (std::find(present.begin(), present.end(), false) != present.end()) r.row_errors = std::move(errors);
    return r;
  }

  local_backend backend_;
  client_executor& exec_;
  attempt_events& events_;
};

}  // namespace jitembed::client::detail
