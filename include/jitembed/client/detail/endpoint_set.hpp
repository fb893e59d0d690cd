// The client's endpoint set, without I/O: members, draining, per-model ejection, circuit breakers, latency.
// Called with the engine's lock held, except snapshot(): the immutable picker published on every change.
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/client/detail/client_policy.hpp"
#include "jitembed/client/detail/client_shm.hpp"
#include "jitembed/client/endpoints.hpp"
#include "jitembed/client/options.hpp"
#include "jitembed/client/stats.hpp"

namespace jitembed::client::detail {

class transport;

struct endpoint_state {
  endpoint_address addr;
  transport* via = nullptr;                              // the transport of its scheme (set by the control plane)
  std::vector<boost::asio::ip::tcp::endpoint> resolved;  // addresses (a name that did not resolve: none)
  bool reachable = false;                                // resolved, or a transport that needs no address (local)
  std::uint64_t outstanding = 0, requests = 0, successes = 0, failures = 0;
  std::atomic<std::uint64_t> conns_opened{0};  // the HTTP transport counts without the engine's lock
  double ewma_ms = 0;
  bool has_ewma = false;
  clock::time_point ewma_at{};  // its last latency sample
  bool draining = false;
  int consecutive_failures = 0;
  clock::time_point open_until{};  // circuit open until; then half-open (one probe)
  bool probe_in_flight = false;
  std::map<std::string, clock::time_point> ejected;  // model -> re-probe time
  shm_status shm = shm_status::off;                  // client_options.shared_memory
  std::shared_ptr<shm_arena> arena;                  // shm == ready: the registered object
  clock::time_point shm_retry{};                     // pending: the next registration try

  bool circuit_open(clock::time_point now) const { return open_until > now; }
  bool half_open(clock::time_point now) const { return open_until != clock::time_point{} && open_until <= now; }
};

using endpoint_ptr = std::shared_ptr<endpoint_state>;

// An immutable snapshot of the set's members: calls pick from it, the control plane lists the live endpoints
// from it without the engine's lock.
struct picker {
  std::vector<endpoint_ptr> endpoints;  // every member, draining ones too
  std::vector<endpoint_address> live;   // those not draining
};

class endpoint_set {
 public:
  endpoint_set(breaker_options breaker, double ewma_alpha) : breaker_(breaker), alpha_(ewma_alpha) {}

  const std::vector<endpoint_ptr>& all() const noexcept { return eps_; }
  std::shared_ptr<const picker> snapshot() const {
    std::lock_guard lk(picker_mu_);
    return picker_;
  }

  // The addresses of `list` not in the picker (to resolve before apply(); no lock: the picker is immutable).
  std::vector<endpoint_address> unknown(const std::vector<endpoint_address>& list) const {
    const auto p = snapshot();
    std::vector<endpoint_address> out;
    for (const auto& a : list)
      if (std::none_of(p->endpoints.begin(), p->endpoints.end(), [&](auto& e) { return e->addr.url == a.url; }))
        out.push_back(a);
    return out;
  }

  struct change {
    bool changed = false;
    std::vector<endpoint_ptr> added, drained;  // drained: newly draining (their idle connections close)
  };

  // Makes the set `list`: new endpoints join (made by make(address)), removed ones drain (no new attempts;
  // dropped by reap() once their attempts finish), re-added ones stop draining.
  template <class Make>
  change apply(const std::vector<endpoint_address>& list, Make&& make) {
    change ch;
    for (auto& e : eps_) {
      const bool keep = std::any_of(list.begin(), list.end(), [&](const auto& a) { return a.url == e->addr.url; });
      if (!keep && !e->draining) {
        e->draining = true;
        ch.drained.push_back(e);
        ch.changed = true;
      } else if (keep && e->draining) {  // re-added before it drained
        e->draining = false;
        ch.changed = true;
      }
    }
    for (const auto& a : list) {
      if (find(a.url)) continue;
      endpoint_ptr e = make(a);
      eps_.push_back(e);
      ch.added.push_back(std::move(e));
      ch.changed = true;
    }
    if (ch.changed) publish();
    return ch;
  }

  // Removes the drained endpoints that have no attempt left (their counters kept for stats); returns them.
  std::vector<endpoint_ptr> reap() {
    std::vector<endpoint_ptr> gone;
    for (auto it = eps_.begin(); it != eps_.end();) {
      if ((*it)->draining && (*it)->outstanding == 0) {
        endpoint_stats es = stats_of(**it, clock::time_point{});
        es.circuit_open = false;  // gone: neither open nor holding shared memory
        es.shared_memory = false;
        retired_.push_back(std::move(es));
        if (retired_.size() > 64) retired_.erase(retired_.begin());
        gone.push_back(std::move(*it));
        it = eps_.erase(it);
      } else {
        ++it;
      }
    }
    if (!gone.empty()) publish();
    return gone;
  }

  bool eligible(const endpoint_state& e, const std::string& model, clock::time_point now) const {
    if (e.draining || !e.reachable) return false;
    if (e.circuit_open(now)) return false;
    if (e.half_open(now) && e.probe_in_flight) return false;
    return !e.ejected.count(model);
  }

  // The eligible endpoints for `model`: those not in `tried` while any is, else all of them.
  std::vector<endpoint_state*> candidates(const std::string& model, const std::set<const endpoint_state*>& tried,
                                          clock::time_point now) const {
    std::vector<endpoint_state*> fresh, all;
    for (const auto& e : snapshot()->endpoints) {
      if (!eligible(*e, model, now)) continue;
      all.push_back(e.get());
      if (!tried.count(e.get())) fresh.push_back(e.get());
    }
    return fresh.empty() ? all : fresh;
  }

  // Whether an eligible endpoint satisfies pred(endpoint_state&).
  template <class Pred>
  bool any_eligible(const std::string& model, clock::time_point now, Pred&& pred) const {
    return std::any_of(eps_.begin(), eps_.end(), [&](const auto& e) { return eligible(*e, model, now) && pred(*e); });
  }

  endpoint_ptr shared(const endpoint_state* e) const {
    for (const auto& p : eps_)
      if (p.get() == e) return p;
    return nullptr;
  }

  // --- health ------------------------------------------------------------------------------------------

  // An attempt starts on `e`: true when it is the half-open circuit's probe.
  bool on_attempt(endpoint_state& e, clock::time_point now) {
    ++e.outstanding;
    ++e.requests;
    if (!e.half_open(now)) return false;
    e.probe_in_flight = true;
    return true;
  }
  void on_attempt_end(endpoint_state& e, bool probe) {
    if (e.outstanding) --e.outstanding;
    if (probe) e.probe_in_flight = false;
  }

  // A failure that counts against the endpoint (no answer, a 5xx): true when its circuit opened now.
  bool note_failure(endpoint_state& e, clock::time_point now) {
    e.failures++;
    e.consecutive_failures++;
    if (e.consecutive_failures >= breaker_.failure_threshold || e.half_open(now)) {
      e.open_until = now + breaker_.open_for;
      return true;
    }
    return false;
  }
  // A failure no retry on this endpoint fixes (TLS): the circuit opens at once.
  bool note_fatal(endpoint_state& e, clock::time_point now) {
    e.consecutive_failures = std::max(e.consecutive_failures, breaker_.failure_threshold - 1);
    return note_failure(e, now);
  }
  void note_success(endpoint_state& e, double ms) {
    e.consecutive_failures = 0;
    e.open_until = clock::time_point{};
    e.successes++;
    e.ewma_ms = e.has_ewma ? (1 - alpha_) * e.ewma_ms + alpha_ * ms : ms;
    e.has_ewma = true;
    e.ewma_at = clock::now();
  }
  // An answer that is not the endpoint's fault (4xx, overload): alive; a probe closes the circuit.
  void note_alive(endpoint_state& e, bool probe) {
    e.consecutive_failures = 0;
    if (probe) e.open_until = clock::time_point{};
  }

  // --- ejection (an endpoint that does not serve a model, until a readiness probe says it does) -------

  void eject(endpoint_state& e, const std::string& model, clock::time_point now) {
    e.ejected[model] = now + breaker_.eject_for;
  }
  // Whether every endpoint that is not draining has ejected `model` (each answered not_found for it, and no
  // probe has re-admitted it since): no endpoint may serve it now. False with no such endpoint.
  bool ejected_everywhere(const std::string& model) const {
    bool any = false;
    for (const auto& e : eps_) {
      if (e->draining) continue;
      if (!e->ejected.count(model)) return false;
      any = true;
    }
    return any;
  }
  std::vector<std::pair<endpoint_ptr, std::string>> due_probes(clock::time_point now) const {
    std::vector<std::pair<endpoint_ptr, std::string>> due;
    for (const auto& e : eps_)
      for (const auto& [m, until] : e->ejected)
        if (until <= now && !e->draining) due.emplace_back(e, m);
    return due;
  }
  // A readiness probe's answer: re-admitted (true) or ejected again.
  bool probed(endpoint_state& e, const std::string& model, bool ready, clock::time_point now) {
    if (ready) return e.ejected.erase(model) > 0;
    eject(e, model, now);
    return false;
  }

  // --- reporting ---------------------------------------------------------------------------------------

  void report(std::vector<endpoint_stats>& out, clock::time_point now) const {
    for (const auto& e : eps_) out.push_back(stats_of(*e, now));
    for (const auto& e : retired_) out.push_back(e);
  }

 private:
  void publish() {
    auto p = std::make_shared<picker>();
    p->endpoints = eps_;
    for (const auto& e : eps_)
      if (!e->draining) p->live.push_back(e->addr);
    std::lock_guard lk(picker_mu_);
    picker_ = std::move(p);
  }

  const endpoint_state* find(const std::string& url) const {
    for (const auto& e : eps_)
      if (e->addr.url == url) return e.get();
    return nullptr;
  }

  static endpoint_stats stats_of(const endpoint_state& e, clock::time_point now) {
    return {.url = e.addr.url,
            .requests = e.requests,
            .successes = e.successes,
            .failures = e.failures,
            .outstanding = e.outstanding,
            .ewma_latency_ms = e.ewma_ms,
            .draining = e.draining,
            .circuit_open = e.circuit_open(now),
            .connections_opened = e.conns_opened,
            .shared_memory = e.shm == shm_status::ready};
  }

  breaker_options breaker_;
  double alpha_;
  std::vector<endpoint_ptr> eps_;
  std::vector<endpoint_stats> retired_;
  // A mutex, not std::atomic<std::shared_ptr>: libstdc++ 12's locks a bit ThreadSanitizer does not see.
  mutable std::mutex picker_mu_;
  std::shared_ptr<const picker> picker_ = std::make_shared<const picker>();
};

}  // namespace jitembed::client::detail
