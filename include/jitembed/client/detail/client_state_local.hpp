// client_state's local mode: calls run on in-process models instead of remote endpoints.
// Included at the end of jitembed/client/detail/client_state.hpp (users include that header).
#pragma once

#include "jitembed/client/detail/client_state.hpp"

namespace jitembed::client::detail {

inline auto client_state::embed_local(std::uint64_t id, embed_request req, embed_callback done) -> std::uint64_t {
  auto lc = std::make_shared<local_call>();
  lc->callback = std::move(done);
  const auto* m = local_->find(req.model);
  auto finish_local = [this, lc, id](result<embed_result> r) {
    {
      std::lock_guard lk(mu_);
      local_calls_.erase(id);
    }
    if (lc->done.exchange(true)) return;
    {
      std::lock_guard lk(mu_);
      if (r)
        ++stats_.completed;
      else
        ++stats_.failed;
    }
    lc->callback(std::move(r));
  };
  {
    std::lock_guard lk(mu_);
    ++stats_.requests;
    local_calls_.emplace(id, lc);
  }
  if (!m) {
    finish_local(fail(errc::not_found, "client: no local model '" + req.model + "'"));
    return id;
  }
  if (req.rows.empty()) {
    finish_local(fail(errc::invalid_argument, "embed: no rows"));
    return id;
  }
  auto rows = std::make_shared<std::vector<byte_buffer>>();
  rows->reserve(req.rows.size());
  for (auto r : req.rows) rows->emplace_back(r.begin(), r.end());
  const auto deadline = clock::now() + req.timeout.value_or(opts_.request_timeout);
  auto task = [this, m, rows, deadline, finish_local, lc, input = req.input, wanted = req.outputs,
               model = req.model]() {
    if (lc->done.load()) return;
    if (clock::now() > deadline)
      return finish_local(fail(errc::timeout, "embed: deadline passed before the local model ran"));
    std::vector<models::named_tensors> outs;
    std::vector<bool> present;
    std::vector<error_info> errors;
    local_backend::run_rows(*m, *rows, input == "sample", decode_limits{}, outs, present, errors);
    if (rows->size() == 1 && !present[0]) return finish_local(errors[0]);
    if (!wanted.empty()) {
      for (auto& o : outs) {
        models::named_tensors kept;
        for (const auto& w : wanted)
          for (auto& nt : o)
            if (nt.first == w) kept.push_back(nt);
        o = std::move(kept);
      }
    }
    auto stacked = stack_rows(outs, present);
    if (!stacked) return finish_local(stacked.error());
    embed_result r;
    r.model_name = model;
    r.model_version = std::string(m->version());
    r.outputs = std::move(*stacked);
    r.endpoint = "local";
    if (std::find(present.begin(), present.end(), false) != present.end()) r.row_errors = std::move(errors);
    finish_local(std::move(r));
  };
  if (!local_->post(std::move(task))) finish_local(fail(errc::cancelled, "client: closed"));
  return id;
}

}  // namespace jitembed::client::detail
