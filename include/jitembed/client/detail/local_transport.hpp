// The client's local transport (client_options.local_models): its one endpoint, "local", runs each attempt
// on the in-process models of local_backend's worker pool and reports the answer on the client's executor.
// Calls to it go through the same call table, deadlines, cancellation and coalescing as remote ones. A local
// model's answer is final: its error (a bad row, a model that throws, an unknown model) is the call's
// error, never retried and never held against the endpoint.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "jitembed/client/detail/client_common.hpp"
#include "jitembed/client/detail/client_local.hpp"
#include "jitembed/client/detail/transport.hpp"
#include "jitembed/models/model.hpp"

namespace jitembed::client::detail {

inline const endpoint_address& local_endpoint() {
  static const endpoint_address a = [] {
    endpoint_address e;
    e.url = "local";
    e.host = "local";
    return e;
  }();
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
        deferred dd;
        std::lock_guard lk(self->events_.mutex());
        if (!a->finished) self->events_.on_answer(a, 200, std::move(r), dd);
      });
    });
    if (!queued) events_.on_answer(a, 200, fail(errc::cancelled, "client: closed"), d);
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

  // Runs the call's rows through its model: the stacked outputs, row errors for the rows that failed alone.
  result<embed_result> run(const remote_call& c) {
    const auto* m = backend_.find(c.model);
    if (!m) return no_model(c.model);
    if (clock::now() > c.deadline) return fail(errc::timeout, "embed: deadline passed before the local model ran");
    std::vector<bytes_view> rows;
    rows.reserve(c.n_rows);
    for (std::size_t i = 0; i < c.n_rows; ++i) rows.push_back(c.row(i));
    std::vector<models::named_tensors> outs;
    std::vector<bool> present;
    std::vector<error_info> errors;
    local_backend::run_rows(*m, rows, c.input == "sample", decode_limits{}, outs, present, errors);
    if (rows.size() == 1 && !present[0]) return errors[0];
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
