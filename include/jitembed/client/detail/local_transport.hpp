// The client's local transport (client_options.local_models): its one endpoint, "local", runs each attempt
// on the in-process models of local_backend's worker pool and reports the answer on the client's executor.
// Calls to it go through the same call table, deadlines, cancellation and coalescing as remote ones. A local
// model's answer is final: its error (a bad row, a model that throws, an unknown model) is the call's
// error, never retried and never held against the endpoint.
#pragma once

#include <atomic>
#include <cstring>
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
        if (!a->finished) self->events_.on_answer(a, {attempt_fault::none, std::move(r)}, dd);
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

  // Typed rows as the model's items, as the server takes them (server/detail/pipeline.hpp, check_rows): its
  // declared input (name, datatype, dims), or "input_ids" INT64 / INT32 [L] for a text model whose input is
  // token ids (i64 [2, L]: ids and an all-ones mask, or i64 [L]). Anything else fails the whole call.
  static result<std::vector<tensor>> typed_items(const models::any_model& m, const remote_call& c) {
    namespace ks = net::kserve;
    const auto& d = m.inputs().front();
    const auto dims = [](const std::vector<std::int64_t>& s) {
      std::string o = "[";
      for (std::size_t k = 0; k < s.size(); ++k) o += (k ? "," : "") + std::to_string(s[k]);
      return o + "]";
    };
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
    std::vector<bytes_view> rows;
    rows.reserve(c.n_rows);
    for (std::size_t i = 0; i < c.n_rows; ++i) rows.push_back(c.row(i));
    std::vector<models::named_tensors> outs;
    std::vector<bool> present;
    std::vector<error_info> errors;
    if (c.typed()) {
      auto items = typed_items(*m, c);
      if (!items) return items.error();
      local_backend::run_items(*m, *items, outs, present, errors);
    } else {
      local_backend::run_rows(*m, rows, c.input == "sample", decode_limits{}, outs, present, errors);
    }
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
