// client_state's calls: launching attempts on the endpoint the balancer picks, what each transport's report
// leads to (client_policy.hpp decides), retries with backoff, hedges, the per-row split and its assembly,
// finishing a call exactly once and resuming waiting ones.
// Included at the end of jitembed/client/detail/client_state.hpp (users include that header).
#pragma once

#include "jitembed/client/detail/client_state.hpp"

namespace jitembed::client::detail {

inline void client_state::launch(const call_ptr& c, bool hedge, deferred& d) {
  if (c->done || closed_) return;
  const auto now = clock::now();
  if (now >= c->deadline) return finish(c, call_table::deadline_error(*c), d);
  endpoint_state* pick = power_of_two(endpoints_.candidates(c->model, c->tried, now), rng_, now);
  if (!pick) {
    // Every endpoint answered that it does not serve the model: a wrong name (or a model unloaded
    // everywhere) fails now with not_found, instead of waiting out the deadline as if overloaded. A probe
    // that re-admits the model on one endpoint makes later calls go out again.
    if (!hedge && endpoints_.ejected_everywhere(c->model))
      return finish(
          c,
          fail(errc::not_found,
               "no endpoint serves model '" + c->model + "': each answered not_found for it (re-probed every " +
                   std::to_string(opts_.breaker.eject_for.count()) + " ms)" +
                   (c->last_error.code == errc::not_found ? "; last: " + c->last_error.message : std::string())),
          d);
    c->last_error = fail(errc::unavailable, "no ready endpoint for model '" + c->model + "'");
    if (hedge) return;
    // Endpoints may come back (list change, re-admission, circuit half-open): wait for a change or a backoff.
    return schedule_retry(c, c->last_error, d, /*counts_attempt=*/false);
  }
  auto a = std::make_shared<remote_attempt>();
  a->call = c;
  a->ep = endpoints_.shared(pick);
  a->hedge = hedge;
  a->start = now;
  a->probe = endpoints_.on_attempt(*pick, now);
  c->tried.insert(pick);
  c->active.push_back(a);
  ++c->attempts;
  ++stats_.attempts;
  plan_shm(*c, *a);
  pick->via->send(a, d);
  if (!hedge) arm_hedge(c);
}

inline void client_state::end_attempt(const attempt_ptr& a) {
  if (a->finished) return;
  a->finished = true;
  endpoints_.on_attempt_end(*a->ep, a->probe);
  end_shm(*a);
  auto& act = a->call->active;
  act.erase(std::remove(act.begin(), act.end(), a), act.end());
}

inline void client_state::on_busy(const attempt_ptr& a, deferred&) {
  // Every connection of this endpoint is busy: wait for one (resume_waiting) unless the deadline passes.
  if (a->shm) a->shm->answered = true;  // never sent
  end_attempt(a);
  --a->call->attempts;
  calls_.wait(a->call);
}

inline void client_state::on_unsendable(const attempt_ptr& a, error_info e, deferred& d) {
  if (a->shm) a->shm->answered = true;  // never sent
  end_attempt(a);
  finish(a->call, std::move(e), d);
}

inline void client_state::on_no_answer(const attempt_ptr& a, std::string what, bool timed_out, deferred& d) {
  const auto c = a->call;
  end_attempt(a);
  if (c->done) return resume_waiting(d);
  endpoint_failure(*a->ep);
  error_info e = clock::now() >= c->deadline ? call_table::deadline_error(*c)
                 : timed_out                 ? fail(errc::timeout, std::move(what))
                                             : fail(errc::io_error, std::move(what));
  schedule_retry(c, std::move(e), d, true);
  resume_waiting(d);
}

// The TLS handshake failed on TLS's own terms: the endpoint's circuit opens at once, and the request goes to
// an endpoint it has not tried yet, or fails now with io_error (not after backoffs until the deadline, as an
// overloaded service would).
inline void client_state::on_tls_failure(const attempt_ptr& a, std::string reason, deferred& d) {
  const auto c = a->call;
  end_attempt(a);
  ++stats_.tls_failures;
  endpoint_failure(*a->ep, /*fatal=*/true);
  if (c->done) return resume_waiting(d);
  c->last_error = fail(errc::io_error, "TLS handshake with " + a->ep->addr.url + " failed: " + reason);
  try_elsewhere(c, c->last_error, /*untried_only=*/true, d);
  resume_waiting(d);
}

inline void client_state::try_elsewhere(const call_ptr& c, const error_info& e, bool untried_only, deferred& d) {
  const auto now = clock::now();
  const bool other = endpoints_.any_eligible(
      c->model, now, [&](const endpoint_state& ep) { return !untried_only || !c->tried.count(&ep); });
  if (other && c->attempts < opts_.retry.max_attempts && now < c->deadline) {
    ++stats_.retries;
    if (untried_only) ++c->retries;
    if (c->active.empty()) launch(c, false, d);
  } else if (c->active.empty()) {
    finish(c, e, d);
  }
}

inline void client_state::on_answer(const attempt_ptr& a, attempt_outcome o, deferred& d) {
  const auto c = a->call;
  auto& r = o.answer;
  if (a->shm) a->shm->answered = true;  // the server writes nothing more into its span
  if (shm_fallback(a, o, d)) return;
  if (o.fault == attempt_fault::none && r && !c->done) learn_outputs(*c, *r);
  const double ms = std::chrono::duration<double, std::milli>(clock::now() - a->start).count();
  end_attempt(a);
  if (o.fault == attempt_fault::none) {
    endpoints_.note_success(*a->ep, ms);
    hedger_.add(ms);
    if (c->done) return resume_waiting(d);
    if (r && a->hedge) ++stats_.hedge_wins;
    finish(c, std::move(r), d);
    return resume_waiting(d);
  }
  const error_info e = r ? fail(errc::internal, "an error answer without an error") : r.error();
  if (o.fault == attempt_fault::endpoint)
    endpoint_failure(*a->ep);
  else
    endpoints_.note_alive(*a->ep, a->probe);
  if (c->done) return resume_waiting(d);
  switch (after_failed_answer(o.fault, e.code, c->n_rows)) {
    case answer_action::eject:  // this endpoint does not serve the model (now): another one may
      endpoints_.eject(*a->ep, c->model, clock::now());
      try_elsewhere(c, e, /*untried_only=*/false, d);
      break;
    case answer_action::retry:
      if (o.fault != attempt_fault::endpoint) a->ep->failures++;
      schedule_retry(c, e, d, true);
      break;
    case answer_action::split_rows:
      split_rows(c, d);
      break;
    case answer_action::fail:
      if (c->active.empty()) finish(c, e, d);
      break;
  }
  resume_waiting(d);
}

inline void client_state::schedule_retry(const call_ptr& c, error_info e, deferred& d, bool counts_attempt) {
  c->last_error = e;
  if (c->done || !c->active.empty()) return;
  if (counts_attempt && c->attempts >= opts_.retry.max_attempts) return finish(c, std::move(e), d);
  const auto now = clock::now();
  if (now >= c->deadline) return finish(c, call_table::deadline_error(*c), d);
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
  client_state* const self = this;  // close() stops the executor before the state goes
  c->retry_timer = exec_.at(std::min(c->deadline, now + delay), [self, c] {
    deferred dd;
    std::lock_guard lk(self->mu_);
    if (c->done || !c->active.empty()) return;
    self->launch(c, false, dd);
  });
}

inline void client_state::arm_hedge(const call_ptr& c) {
  if (c->hedged || !hedger_.armed()) return;
  client_state* const self = this;  // close() stops the executor before the state goes
  // Re-armed from its own handler while no endpoint qualifies yet: the same timer, nothing pending on it.
  c->hedge_timer = exec_.at(
      clock::now() + hedger_.delay(),
      [self, c] {
        deferred d;
        std::lock_guard lk(self->mu_);
        if (c->done || c->hedged || c->active.empty() || self->closed_) return;
        const auto now = clock::now();
        const std::uint64_t primary = c->active.front()->ep->outstanding;
        const bool other = self->endpoints_.any_eligible(c->model, now, [&](const endpoint_state& e) {
          return !c->tried.count(&e) && hedger::worth_it(primary, e.outstanding);
        });
        if (!other) return self->arm_hedge(c);  // look again later: the fleet's load changes
        if (!self->budget_.try_spend(now)) {
          ++self->stats_.budget_exhausted;
          return self->arm_hedge(c);
        }
        c->hedged = true;
        ++self->stats_.hedges;
        self->launch(c, true, d);
      },
      c->hedge_timer);
}

inline void client_state::split_rows(const call_ptr& c, deferred& d) {
  ++stats_.row_splits;
  auto results = std::make_shared<std::vector<std::optional<result<embed_result>>>>(c->n_rows);
  auto left = std::make_shared<std::size_t>(c->n_rows);
  client_state* const self = this;  // close() stops the executor before the state goes
  for (std::size_t i = 0; i < c->n_rows; ++i) {
    auto child = call_table::make_row(*c, i);
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
    a->ep->via->abandon(*a);  // a hedge loser or a cancelled attempt: its connection cannot be reused mid-answer
    end_attempt(a);
  }
  for (auto& child : c->children)
    if (!child->done) finish(child, fail(errc::cancelled, "row of a finished request"), d);
  if (!c->internal) {
    calls_.remove(*c);
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
  for (auto& c : calls_.take_waiting())
    if (!c->done && c->active.empty()) launch(c, false, d);
}

}  // namespace jitembed::client::detail
