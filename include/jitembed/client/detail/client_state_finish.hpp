// client_state's completion of remote calls: deadlines, retries with backoff, hedges, per-row splitting and
// assembly of split calls, finishing a call and resuming waiting ones.
// Included at the end of jitembed/client/detail/client_state.hpp (users include that header).
#pragma once

#include "jitembed/client/detail/client_state.hpp"

namespace jitembed::client::detail {

inline auto client_state::deadline_error(const remote_call& c) const -> error_info {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - c.start).count();
  std::string m =
      "deadline of " + std::to_string(ms) + " ms passed after " + std::to_string(c.attempts) + " attempt(s)";
  if (c.last_error.code != errc::ok && c.attempts > 0) m += "; last: " + c.last_error.message;
  return fail(errc::timeout, std::move(m));
}

inline void client_state::schedule_retry(const call_ptr& c, error_info e, deferred& d, bool counts_attempt) {
  c->last_error = e;
  if (c->done || !c->active.empty()) return;
  if (counts_attempt && c->attempts >= opts_.retry.max_attempts) return finish(c, std::move(e), d);
  const auto now = clock::now();
  if (now >= c->deadline) return finish(c, deadline_error(*c), d);
  if (counts_attempt) {
    if (!budget_.try_spend(now)) {
      ++stats_.budget_exhausted;
      return finish(c, fail(e.code, e.message + " (retry budget exhausted)"), d);
    }
    ++stats_.retries;
    ++c->retries;
  }
  auto delay = backoff_delay(opts_.retry, std::max(1, c->retries), rng_);
  if (!counts_attempt) delay = std::max<std::chrono::microseconds>(delay, std::chrono::milliseconds(10));
  const auto at = std::min(c->deadline, now + delay);
  c->retry_timer = std::make_unique<asio::steady_timer>(ioc_, at);
  client_state* const self = this;  // close() joins the I/O threads before the state goes
  c->retry_timer->async_wait([self, c](boost::system::error_code ec) {
    if (ec) return;
    deferred dd;
    std::lock_guard lk(self->mu_);
    if (c->done || !c->active.empty()) return;
    self->launch(c, false, dd);
  });
}

inline void client_state::arm_hedge(const call_ptr& c) {
  if (!opts_.hedge.enabled || c->hedged || latencies_.size() < opts_.hedge.min_samples) return;
  const auto delay = std::chrono::duration<double, std::milli>(
      std::max<double>(hedge_after_ms_, static_cast<double>(opts_.hedge.min_delay.count())));
  // Re-armed from its own handler while no endpoint qualifies yet: the same timer, nothing pending on it.
  if (!c->hedge_timer) c->hedge_timer = std::make_unique<asio::steady_timer>(ioc_);
  c->hedge_timer->expires_after(std::chrono::duration_cast<clock::duration>(delay));
  client_state* const self = this;  // close() joins the I/O threads before the state goes
  c->hedge_timer->async_wait([self, c](boost::system::error_code ec) {
    if (ec) return;
    deferred d;
    std::lock_guard lk(self->mu_);
    if (c->done || c->hedged || c->active.empty() || self->closed_) return;
    // Only toward an endpoint with fewer requests in flight than the primary's: when every endpoint is
    // as busy, the delay is queueing, and a hedge would only add load to a saturated fleet.
    const auto now = clock::now();
    const std::uint64_t primary = c->active.front()->ep->outstanding;
    const bool other = std::any_of(self->endpoints_.begin(), self->endpoints_.end(), [&](const auto& e) {
      return !c->tried.count(e.get()) && self->eligible(*e, *c, now) && e->outstanding < primary;
    });
    if (!other) return self->arm_hedge(c);  // look again later: the fleet's load changes
    if (!self->budget_.try_spend(now)) {
      ++self->stats_.budget_exhausted;
      return self->arm_hedge(c);
    }
    c->hedged = true;
    ++self->stats_.hedges;
    self->launch(c, true, d);
  });
}

inline void client_state::split_rows(const call_ptr& c, deferred& d) {
  ++stats_.row_splits;
  auto results = std::make_shared<std::vector<std::optional<result<embed_result>>>>(c->n_rows);
  auto left = std::make_shared<std::size_t>(c->n_rows);
  client_state* const self = this;  // close() joins the I/O threads before the state goes
  for (std::size_t i = 0; i < c->n_rows; ++i) {
    auto child = std::make_shared<remote_call>();
    child->internal = true;
    child->model = c->model;
    child->version = c->version;
    child->input = c->input;
    child->outputs = c->outputs;
    child->n_rows = 1;
    const auto [off, len] = c->row_spans[i];
    auto one = kserve::encode_bytes_elements(
        std::vector<std::string_view>{std::string_view(reinterpret_cast<const char*>(c->rows->data() + off), len)});
    child->rows = std::make_shared<byte_buffer>(std::move(one).value());
    child->row_spans.emplace_back(4, len);
    child->start = clock::now();
    child->deadline = c->deadline;
    child->callbacks.push_back([self, c, results, left, i](result<embed_result> r) {
      // Runs after the lock is released (deferred): retake it to assemble the parent.
      deferred dd;
      std::lock_guard lk(self->mu_);
      (*results)[i] = std::move(r);
      if (--*left == 0 && !c->done) self->finish(c, self->assemble(*c, *results), dd);
    });
    c->children.push_back(child);
    launch(child, false, d);
  }
}

inline auto client_state::assemble(const remote_call& c, std::vector<std::optional<result<embed_result>>>& rows)
    -> result<embed_result> {
  embed_result out;
  out.model_name = c.model;
  out.row_errors.resize(c.n_rows);
  const embed_result* first = nullptr;
  for (auto& r : rows)
    if (r && *r) {
      first = &**r;
      break;
    }
  if (first) {
    out.model_name = first->model_name;
    out.model_version = first->model_version;
    out.endpoint = first->endpoint;
    for (const auto& [name, t] : first->outputs) {
      shape s = t.shape();
      s[0] = static_cast<std::int64_t>(c.n_rows);
      out.outputs.emplace_back(name, tensor::zeros(s, t.dtype()));
    }
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto& r = *rows[i];
    if (!r) {
      out.row_errors[i] = r.error();
      continue;
    }
    out.attempts += r->attempts;
    for (auto& [name, dst] : out.outputs) {
      const tensor* src = r->find(name);
      if (!src || src->nbytes() * c.n_rows != dst.nbytes()) {
        out.row_errors[i] = fail(errc::corrupt_data, "row " + std::to_string(i) + ": output '" + name + "' differs");
        continue;
      }
      std::memcpy(static_cast<std::byte*>(dst.data()) + i * src->nbytes(), src->data(), src->nbytes());
    }
  }
  return out;
}

inline void client_state::finish(const call_ptr& c, result<embed_result> r, deferred& d) {
  if (c->done) return;
  c->done = true;
  if (c->retry_timer) c->retry_timer->cancel();
  if (c->hedge_timer) c->hedge_timer->cancel();
  for (auto& a : std::vector<attempt_ptr>(c->active)) {
    drop_conn(a);  // a hedge loser or a cancelled attempt: its connection cannot be reused mid-response
    grpc_cancel(*a);
    end_attempt(a);
  }
  for (auto& child : c->children)
    if (!child->done) finish(child, fail(errc::cancelled, "row of a finished request"), d);
  if (!c->internal) {
    calls_.erase(c->id);
    if (c->coalesce_key) {
      if (auto it = coalesce_.find(*c->coalesce_key); it != coalesce_.end() && it->second == c) coalesce_.erase(it);
    }
    if (r)
      stats_.completed += c->callbacks.size();
    else
      stats_.failed += c->callbacks.size();
  }
  if (r && !c->internal) r->attempts = std::max(r->attempts, c->attempts);
  auto cbs = std::move(c->callbacks);
  c->callbacks.clear();
  if (cbs.size() == 1) {
    d.fns.push_back([cb = std::move(cbs[0]), r = std::move(r)]() mutable { cb(std::move(r)); });
  } else {
    for (auto& cb : cbs) d.fns.push_back([cb = std::move(cb), r]() mutable { cb(std::move(r)); });
  }
  reap_drained();
}

inline void client_state::resume_waiting(deferred& d) {
  reap_drained();
  if (waiting_.empty()) return;
  auto w = std::move(waiting_);
  waiting_.clear();
  for (auto& c : w)
    if (!c->done && c->active.empty()) launch(c, false, d);
}

}  // namespace jitembed::client::detail
