// The call engine's state machine: launches attempts and decides from each transport's report whether to
// retry, eject, hedge, split the rows or finish, exactly once. Its lock guards calls, endpoints, shm and stats.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/client/detail/call_table.hpp"
#include "jitembed/client/detail/client_policy.hpp"
#include "jitembed/client/detail/endpoint_set.hpp"
#include "jitembed/client/detail/executor.hpp"
#include "jitembed/client/detail/hedger.hpp"
#include "jitembed/client/detail/shm_manager.hpp"
#include "jitembed/client/detail/transport.hpp"
#include "jitembed/client/stats.hpp"

namespace jitembed::client::detail {

// The engine's slice of client_options.
struct engine_options {
  retry_options retry;
  hedge_options hedge;
  breaker_options breaker;
  double ewma_alpha = 0.2;
  std::size_t max_in_flight = 4096;
  std::chrono::milliseconds request_timeout{30000};
  shared_memory_options shared_memory;
  static engine_options of(const client_options& o) {
    return {o.retry, o.hedge, o.breaker, o.ewma_alpha, o.max_in_flight, o.request_timeout, o.shared_memory};
  }
};

// Handlers hold `this`: the owning client state stops the executor (joining every thread that runs handlers)
// before the engine goes.
class call_flow : public attempt_events {
 public:
  call_flow(const engine_options& o, client_executor& exec)
      : opts_(o),
        exec_(exec),
        budget_(o.retry),
        hedger_(o.hedge),
        rng_(std::random_device{}()),
        endpoints_(o.breaker, o.ewma_alpha),
        shm_(o.shared_memory) {}

  // --- attempt_events: what the transports report (lock held) ----------------------------------------

  std::mutex& mutex() override { return mu_; }
  bool closed() const override { return closed_; }

  void on_busy(const attempt_ptr& a, deferred&) override {
    // Every connection of this endpoint is busy: wait for one (resume_waiting) unless the deadline passes.
    if (a->shm) a->shm->answered = true;  // never sent
    end_attempt(a);
    --a->call->attempts;
    calls_.wait(a->call);
  }

  void on_unsendable(const attempt_ptr& a, error_info e, deferred& d) override {
    if (a->shm) a->shm->answered = true;  // never sent
    end_attempt(a);
    finish(a->call, std::move(e), d);
  }

  void on_no_answer(const attempt_ptr& a, std::string what, bool timed_out, deferred& d) override {
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
  // an endpoint it has not tried yet, or fails now with io_error (a retry on the same one would not help).
  void on_tls_failure(const attempt_ptr& a, std::string reason, deferred& d) override {
    const auto c = a->call;
    end_attempt(a);
    ++stats_.tls_failures;
    endpoint_failure(*a->ep, /*fatal=*/true);
    if (c->done) return resume_waiting(d);
    c->last_error = fail(errc::io_error, "TLS handshake with " + a->ep->addr.url + " failed: " + reason);
    try_elsewhere(c, c->last_error, /*untried_only=*/true, d);
    resume_waiting(d);
  }

  void on_answer(const attempt_ptr& a, attempt_outcome o, deferred& d) override {
    const auto c = a->call;
    auto& r = o.answer;
    if (a->shm) a->shm->answered = true;  // the server writes nothing more into its span
    if (shm_.refused(*a, o)) {            // not the request's fault: the same attempt over the socket
      end_attempt(a);
      ++stats_.shared_memory_fallbacks;
      c->no_shm = true;
      --c->attempts;
      if (c->active.empty()) launch(c, false, d);
      return resume_waiting(d);
    }
    if (o.fault == attempt_fault::none && r && !c->done) shm_.learn(*c, *r);
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

 protected:
  ~call_flow() = default;

  void launch(const call_ptr& c, bool hedge, deferred& d) {
    if (c->done || closed_) return;
    const auto now = clock::now();
    if (now >= c->deadline) return finish(c, call_table::deadline_error(*c), d);
    endpoint_state* pick = power_of_two(endpoints_.candidates(c->model, c->tried, now), rng_, now);
    if (!pick) {
      // Every endpoint answered that it does not serve the model: not_found now, not after the deadline as if
      // overloaded (a probe that re-admits the model on one endpoint makes later calls go out again).
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
    if (shm_.plan(*c, *a)) ++stats_.shared_memory_attempts;
    pick->via->send(a, d);
    if (!hedge) arm_hedge(c);
  }

  // Removes the attempt from its call and its endpoint's count (idempotent).
  void end_attempt(const attempt_ptr& a) {
    if (a->finished) return;
    a->finished = true;
    endpoints_.on_attempt_end(*a->ep, a->probe);
    shm_.end(*a);
    auto& act = a->call->active;
    act.erase(std::remove(act.begin(), act.end(), a), act.end());
  }

  // A failure held against the endpoint: its idle connections close when its circuit opens.
  void endpoint_failure(endpoint_state& e, bool fatal = false) {
    const auto now = clock::now();
    if (fatal ? endpoints_.note_fatal(e, now) : endpoints_.note_failure(e, now)) e.via->close_idle(e);
  }

  // Drained endpoints with no attempt left leave the set (and their transports; their regions to unregister).
  void reap_drained() {
    for (const auto& e : endpoints_.reap()) {
      if (e->arena) shm_.retire(e->addr, e->arena->region);
      e->via->forget(*e);
    }
  }

  // Another endpoint for a call that one refused (not served, a TLS failure), or the call fails with `e`.
  void try_elsewhere(const call_ptr& c, const error_info& e, bool untried_only, deferred& d) {
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

  // After a retryable failure: another attempt after a jittered backoff, while attempts, the deadline and
  // the retry budget allow; otherwise the call fails with `e`. A hedge still running makes this a no-op.
  void schedule_retry(const call_ptr& c, error_info e, deferred& d, bool counts_attempt) {
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
    c->retry_timer = exec_.at(std::min(c->deadline, now + delay), [this, c] {
      deferred dd;
      std::lock_guard lk(mu_);
      if (c->done || !c->active.empty()) return;
      launch(c, false, dd);
    });
  }

  // A hedge: a second attempt on another endpoint when the first is still running after the latency
  // percentile; first answer wins. Costs retry budget. Re-armed from its own handler while no endpoint
  // qualifies yet: the same timer, nothing pending on it.
  void arm_hedge(const call_ptr& c) {
    if (c->hedged || !hedger_.armed()) return;
    c->hedge_timer = exec_.at(
        clock::now() + hedger_.delay(),
        [this, c] {
          deferred d;
          std::lock_guard lk(mu_);
          if (c->done || c->hedged || c->active.empty() || closed_) return;
          const auto now = clock::now();
          const std::uint64_t primary = c->active.front()->ep->outstanding;
          const bool other = endpoints_.any_eligible(c->model, now, [&](const endpoint_state& e) {
            return !c->tried.count(&e) && hedger::worth_it(primary, e.outstanding);
          });
          if (!other) return arm_hedge(c);  // look again later: the fleet's load changes
          if (!budget_.try_spend(now)) {
            ++stats_.budget_exhausted;
            return arm_hedge(c);
          }
          c->hedged = true;
          ++stats_.hedges;
          launch(c, true, d);
        },
        c->hedge_timer);
  }

  // A 4xx on a multi-row request: each row goes out alone; rows that fail alone are reported failed.
  void split_rows(const call_ptr& c, deferred& d) {
    ++stats_.row_splits;
    auto results = std::make_shared<std::vector<std::optional<result<embed_result>>>>(c->n_rows);
    auto left = std::make_shared<std::atomic<std::size_t>>(c->n_rows);
    for (std::size_t i = 0; i < c->n_rows; ++i) {
      auto child = call_table::make_row(*c, i);
      child->callbacks.push_back([this, c, results, left, i](result<embed_result> r) {
        // Runs after the lock is released (deferred): a row fills its own slot without the lock; the last
        // row's callback (it sees every slot) takes the lock to assemble the parent.
        (*results)[i] = std::move(r);
        if (left->fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        deferred dd;
        std::lock_guard lk(mu_);
        if (!c->done) finish(c, call_table::assemble(*c, *results), dd);
      });
      c->children.push_back(child);
      launch(child, false, d);
    }
  }

  // Completes a call once: cancels its timers and other attempts, hands the result to every callback
  // (coalesced ones included) after the lock is released.
  void finish(const call_ptr& c, result<embed_result> r, deferred& d) {
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
      (r ? stats_.completed : stats_.failed) += c->callbacks.size();
    }
    if (r) r->attempts = std::max(r->attempts, c->attempts);
    auto cbs = std::move(c->callbacks);
    c->callbacks.clear();
    if (cbs.size() == 1) {
      d.fns.push_back([cb = std::move(cbs[0]), r = std::move(r)]() mutable { cb(std::move(r)); });
    } else {
      for (auto& cb : cbs) d.fns.push_back([cb = std::move(cb), r]() mutable { cb(std::move(r)); });
    }
    reap_drained();
  }

  // Calls that waited for a free connection or an endpoint get another chance.
  void resume_waiting(deferred& d) {
    reap_drained();
    for (auto& c : calls_.take_waiting())
      if (!c->done && c->active.empty()) launch(c, false, d);
  }

  const engine_options opts_;
  client_executor& exec_;
  mutable std::mutex mu_;
  std::atomic<bool> closed_{false};  // also read without the lock (closed())
  client_stats stats_;
  retry_budget budget_;
  hedger hedger_;
  std::mt19937_64 rng_;
  endpoint_set endpoints_;
  call_table calls_;
  shm_manager shm_;
};

}  // namespace jitembed::client::detail
