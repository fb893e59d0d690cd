// The client's call engine (call_flow.hpp is its state machine): the calls' entry points (embed, cancel,
// close), its stats, and the endpoint set's changes that the control plane makes.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/client/detail/call_flow.hpp"
#include "jitembed/net/http/detail/wire.hpp"

namespace jitembed::client::detail {

class call_engine final : public call_flow {
 public:
  using call_flow::call_flow;

  std::uint64_t embed(embed_request req, embed_callback done) {
    const std::uint64_t id = calls_.next_id();
    deferred d;  // before the lock: what it runs here (after close()) runs once the lock is released
    std::lock_guard lk(mu_);
    // Callbacks go to the executor, never run inside embed(); once closed there is none: they run on this
    // thread, after the lock.
    if (!closed_) d.post_to = &exec_;
    auto fail_now = [&](error_info e) {
      ++stats_.requests;
      ++stats_.failed;
      d.fns.push_back([done = std::move(done), e = std::move(e)]() mutable { done(std::move(e)); });
      return id;
    };
    if (closed_) return fail_now(fail(errc::cancelled, "client: closed"));
    if (req.rows.empty()) return fail_now(fail(errc::invalid_argument, "embed: no rows"));
    if (req.model.empty() || !net::http::detail::is_safe_target(req.model) ||
        req.model.find('/') != std::string::npos || req.version.find('/') != std::string::npos ||
        !net::http::detail::is_safe_target("/" + req.version)) {
      return fail_now(fail(errc::invalid_argument, "embed: bad model name or version '" + req.model + "'"));
    }
    if (calls_.size() >= opts_.max_in_flight) {
      return fail_now(fail(errc::unavailable,
                           "client: " + std::to_string(opts_.max_in_flight) + " requests in flight (max_in_flight)"));
    }
    const auto row_bytes = call_table::check_rows(req);
    if (!row_bytes) return fail_now(row_bytes.error());
    if (req.coalesce_key) {
      if (auto joined = calls_.joinable(*req.coalesce_key)) {
        ++stats_.requests;
        ++stats_.coalesced;
        joined->callbacks.push_back(std::move(done));
        return id;
      }
    }
    auto c = call_table::make(id, req, opts_.request_timeout, *row_bytes);
    if (!c) return fail_now(c.error());
    (*c)->callbacks.push_back(std::move(done));
    ++stats_.requests;
    budget_.on_request();
    calls_.add(*c);
    launch(*c, false, d);
    return id;
  }

  bool cancel(std::uint64_t id) {
    deferred d(&exec_);  // not closed when a call is found: close() finished every call
    std::lock_guard lk(mu_);
    const call_ptr c = calls_.find(id);
    if (!c || c->done) return false;
    ++stats_.cancelled;
    finish(c, fail(errc::cancelled, "embed: cancelled"), d);
    return true;
  }

  // Every call still open fails with `cancelled` (its callbacks run here); the endpoints' idle connections
  // close. False when it was closed already.
  bool close() {
    deferred d;
    std::lock_guard lk(mu_);
    if (closed_) return false;
    closed_ = true;
    for (auto& c : calls_.open()) finish(c, fail(errc::cancelled, "client: closed with the request in flight"), d);
    for (const auto& e : endpoints_.all()) e->via->close_idle(*e);
    return true;
  }
  // After close() and the watcher's end: every region registered with an endpoint, to unregister.
  std::vector<shm_manager::region> regions() {
    std::lock_guard lk(mu_);
    auto out = shm_.take_retired();
    for (const auto& e : endpoints_.all())
      if (e->arena) out.emplace_back(e->addr, e->arena->region);
    return out;
  }

  client_stats stats() const {
    std::lock_guard lk(mu_);
    client_stats s = stats_;
    s.in_flight = calls_.size();
    s.latency_p50_ms = hedger_.percentile(0.50);
    s.latency_p95_ms = hedger_.percentile(0.95);
    s.latency_p99_ms = hedger_.percentile(0.99);
    endpoints_.report(s.endpoints, clock::now());
    return s;
  }

  // --- the endpoint set: read from the picker without the lock; changed by the control plane ------------

  const endpoint_set& endpoints() const noexcept { return endpoints_; }
  shm_manager& shared_memory() noexcept { return shm_; }

  // Makes the set `list` (new endpoints made by make(address)); calls waiting for an endpoint get a chance.
  template <class Make>
  void apply(const std::vector<endpoint_address>& list, Make&& make) {
    deferred d;
    std::lock_guard lk(mu_);
    auto ch = endpoints_.apply(list, std::forward<Make>(make));
    for (const auto& e : ch.drained) e->via->close_idle(*e);
    if (ch.changed) ++stats_.endpoint_updates;
    reap_drained();
    if (ch.changed) resume_waiting(d);
  }

  // The (endpoint, model) pairs whose ejection expired, and a readiness probe's answer for one.
  std::vector<std::pair<endpoint_ptr, std::string>> due_probes() const {
    std::lock_guard lk(mu_);
    return endpoints_.due_probes(clock::now());
  }
  void probed(endpoint_state& e, const std::string& model, bool ready) {
    deferred d;
    std::lock_guard lk(mu_);
    if (endpoints_.probed(e, model, ready, clock::now())) resume_waiting(d);
  }
};

}  // namespace jitembed::client::detail
