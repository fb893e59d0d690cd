// The state behind a jit_client handle: it puts together the pieces of client/detail/ and owns the lock that
// guards them.
// - call_table.hpp: ids, calls in flight, coalescing, waiting calls, deadlines;
// - endpoint_set.hpp: the endpoints (source, drain, ejection, circuit breaker), no I/O;
// - client_policy.hpp, hedger.hpp: the balancer, retry and hedge policies, pure;
// - transport.hpp and its three: http_transport.hpp (Beast, a connection pool per endpoint), client_grpc.hpp
//   (gRPC, a channel per endpoint), local_transport.hpp (in-process models: local mode is its one endpoint);
// - executor.hpp: the I/O threads every completion, timer and user callback runs on;
// - client_state_shm.hpp: shared memory with same-host endpoints.
// The watcher thread re-reads the endpoint source, re-probes ejected models and registers shared memory.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <stop_token>
#include <thread>

#include "jitembed/client/detail/call_table.hpp"
#include "jitembed/client/detail/client_identity.hpp"
#include "jitembed/client/detail/client_policy.hpp"
#include "jitembed/client/detail/endpoint_set.hpp"
#include "jitembed/client/detail/executor.hpp"
#include "jitembed/client/detail/hedger.hpp"
#include "jitembed/client/detail/http_transport.hpp"
#include "jitembed/client/detail/local_transport.hpp"
#include "jitembed/client/detail/transport.hpp"
#include "jitembed/core/detail/capture.hpp"
#include "jitembed/core/worker_group.hpp"
#include "jitembed/net/http/client.hpp"

namespace jitembed::client::detail {

// The gRPC transport (client_grpc.hpp with jitembed::grpc; else one that answers every call not_found).
inline std::unique_ptr<transport> make_grpc_transport(const client_options& opts, client_executor& exec,
                                                      attempt_events& events);

// Handlers hold `this`, not a shared_ptr: the owning jit_client closes the state (joining every thread
// that runs handlers) before it is destroyed, so no handler outlives it and no handler can be the one that
// destroys it on its own thread.
class client_state final : public attempt_events {
 public:
  // Every failure is in the result: a thread that cannot start (the local workers, the I/O threads or the
  // watcher) is resource_exhausted, after the threads already started are stopped and joined.
  static result<std::shared_ptr<client_state>> create(client_options opts) {
    return core_detail::capture("client", [&]() -> result<std::shared_ptr<client_state>> {
      const auto& src = opts.endpoints;
      const int sources = int(!src.list.empty()) + int(!src.file.empty()) + int(!src.url.empty());
      if (sources > 1)
        return fail(errc::invalid_argument, "client: give one endpoint source (list, file or url), not several");
      if (sources == 0 && opts.local_models.empty())
        return fail(errc::invalid_argument, "client: no endpoint source and no local model");
      if (sources == 1 && !opts.local_models.empty())
        return fail(errc::invalid_argument, "client: endpoints and local models are exclusive");
      for (const auto& m : opts.local_models)
        if (!m) return fail(errc::invalid_argument, "client: an empty local model");
      if (opts.request_timeout.count() <= 0 || opts.retry.max_attempts < 1 || opts.io_threads < 1)
        return fail(errc::invalid_argument,
                    "client: request_timeout, retry.max_attempts and io_threads must be positive");
      std::shared_ptr<client_state> s(new client_state(std::move(opts)));
      std::vector<endpoint_address> first;
      if (s->local_mode_) {
        s->local_ = std::make_unique<local_transport>(s->opts_, s->exec_, *s);
        first.push_back(local_endpoint());
      } else {
        // https:// endpoints may join the list later: the verifying context is made now, so a bad CA file fails here.
        auto tls = net::http::detail::make_client_tls_context(s->opts_.tls_ca_file, "client");
        if (!tls) return tls.error();
        s->tls_ctx_.emplace(std::move(*tls));
        s->http_ = std::make_unique<http_transport>(s->opts_, s->exec_.context(), *s->tls_ctx_, *s);
        s->grpc_ = make_grpc_transport(s->opts_, s->exec_, *s);
        // The first list must be readable now: a typo in a path fails here, not as timeouts later.
        auto read = s->read_source();
        if (!read) return read.error();
        first = std::move(*read);
      }
      s->update_endpoints(first);
      s->exec_.start(static_cast<std::size_t>(s->opts_.io_threads));
      // List changes, re-admission probes, shared memory. A watcher that cannot start throws here; create()'s
      // result says so and ~client_state (close()) stops the I/O threads above.
      if (!s->local_mode_)
        s->watcher_ = worker_group(1, [p = s.get()](std::stop_token stop, std::size_t) { p->watch(stop); });
      return s;
    });
  }

  ~client_state() { close(); }

  bool local() const noexcept { return local_mode_; }

  // --- embed -------------------------------------------------------------------------------------------

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

  // --- identity ----------------------------------------------------------------------------------------

  result<model_identity> identity(const std::string& model) {
    if (auto it = opts_.identities.find(model); it != opts_.identities.end()) return it->second;
    {
      std::lock_guard lk(mu_);
      if (auto it = identities_.find(model); it != identities_.end()) return it->second;
    }
    error_info last = no_endpoint_error(model);
    for (const auto& a : live_endpoints()) {
      auto id = transport_for(a).identity(a, model);
      if (!id) {
        last = id.error();
        continue;
      }
      if (!*id) return no_identity_error(model, a.url);  // the endpoint answered: it publishes no identity
      std::lock_guard lk(mu_);
      identities_[model] = **id;
      return **id;
    }
    return last;
  }

  result<model_metadata> metadata(const std::string& model) {
    error_info last = no_endpoint_error(model);
    for (const auto& a : live_endpoints()) {
      auto md = transport_for(a).metadata(a, model);
      if (md) return md;
      if (last.code != errc::not_found) last = md.error();  // "not served" outranks a transport error elsewhere
    }
    return last;
  }

  // Probes every live endpoint for each model until one answers ready for it (docs/client.md, Timeouts and
  // readiness). The wait is bounded: it ends after `timeout` plus at most one probe (no probe starts past the
  // deadline once every model was probed once; a probe's connect and read timeouts are short), and at once in
  // local mode, where nothing becomes ready later.
  result<void> wait_ready(const std::vector<std::string>& models, std::chrono::milliseconds timeout) {
    if (timeout.count() <= 0) return fail(errc::invalid_argument, "client: wait_ready timeout must be positive");
    if (models.empty()) return fail(errc::invalid_argument, "client: wait_ready names no model");
    const auto deadline = clock::now() + timeout;
    std::vector<std::string> waiting = models;
    auto pause = std::chrono::milliseconds(20);
    error_info last = fail(errc::unavailable, "no endpoint");
    bool reached = false;  // some endpoint answered (its model not ready, or not served)
    std::vector<std::string> urls;
    for (bool first_round = true;; first_round = false) {
      const auto eps = live_endpoints();
      urls.clear();
      for (const auto& a : eps) urls.push_back(a.url);
      for (auto it = waiting.begin(); it != waiting.end();) {
        bool ready = false;
        for (const auto& a : eps) {
          if (!first_round && clock::now() > deadline) break;
          if (transport_for(a).ready(a, *it)) {
            ready = true;
            break;
          }
          // Why not: the metadata GET's error (connection refused, 404), or an answer without readiness.
          auto md = transport_for(a).metadata(a, *it);
          if (md) {
            reached = true;
            last = fail(errc::unavailable, a.url + ": model '" + *it + "' is not ready");
          } else {
            if (md.error().code != errc::unavailable && md.error().code != errc::timeout && md.error().code != errc::io_error)
              reached = true;
            last = fail(md.error().code, a.url + ": " + md.error().message);
          }
        }
        it = ready ? waiting.erase(it) : std::next(it);
      }
      if (waiting.empty()) return {};
      if (local_mode_ || clock::now() + pause > deadline) break;
      {
        std::lock_guard lk(mu_);
        if (closed_) return fail(errc::cancelled, "client: closed while waiting for readiness");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::milliseconds(500));
    }
    std::string names, where;
    for (const auto& m : waiting) names += (names.empty() ? "'" : ", '") + m + "'";
    for (const auto& u : urls) where += (where.empty() ? "" : ", ") + u;
    if (local_mode_) return fail(last.code, "client: local models do not serve " + names + ": " + last.message);
    const auto ms = std::to_string(timeout.count());
    const std::string what = "client: no endpoint ready for model " + names + " within " + ms + " ms (endpoints: " +
                             (where.empty() ? std::string("none") : where) + "); last error: " + last.message;
    return fail(reached ? errc::timeout : errc::unavailable, what);
  }

  // The endpoints not draining (a copy: they are asked without the lock).
  std::vector<endpoint_address> live_endpoints() const {
    std::lock_guard lk(mu_);
    return endpoints_.live();
  }

  static error_info no_endpoint_error(const std::string& model) {
    return fail(errc::unavailable, "client: no endpoint to ask for model '" + model + "' metadata");
  }

  // --- stats, endpoints, close -------------------------------------------------------------------------

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

  std::vector<std::string> endpoint_urls() const {
    std::lock_guard lk(mu_);
    std::vector<std::string> out;
    for (const auto& a : endpoints_.live()) out.push_back(a.url);
    return out;
  }

  // Every call still open fails with `cancelled` (its callbacks run here, on the closing thread); the
  // regions registered with endpoints are unregistered; the transports, the watcher and the I/O threads stop.
  void close() {
    {
      deferred d;
      std::lock_guard lk(mu_);
      if (closed_) return;
      closed_ = true;
      for (auto& c : calls_.open()) finish(c, fail(errc::cancelled, "client: closed with the request in flight"), d);
      for (const auto& e : endpoints_.all()) e->via->close_idle(*e);
    }
    watcher_.stop();  // its stop_token wakes it
    {                 // the regions registered with endpoints: unregistered (the servers then close their descriptors)
      std::vector<std::pair<endpoint_address, std::string>> regions;
      {
        std::lock_guard lk(mu_);
        regions.swap(shm_retired_);
        for (const auto& e : endpoints_.all())
          if (e->arena) regions.emplace_back(e->addr, e->arena->region);
      }
      for (const auto& [addr, region] : regions) unregister_region(addr, region);
    }
    for (auto* t : {local_.get(), grpc_.get(), http_.get()})
      if (t) t->close();  // their completions post to the executor, which still runs
    exec_.stop();
  }

  // --- attempt_events: what the transports report (lock held) ----------------------------------------

  std::mutex& mutex() override { return mu_; }
  bool closed() const override { return closed_; }
  void on_answer(const attempt_ptr& a, attempt_outcome o, deferred& d) override;
  void on_no_answer(const attempt_ptr& a, std::string what, bool timed_out, deferred& d) override;
  void on_tls_failure(const attempt_ptr& a, std::string reason, deferred& d) override;
  void on_unsendable(const attempt_ptr& a, error_info e, deferred& d) override;
  void on_busy(const attempt_ptr& a, deferred& d) override;

 private:
  explicit client_state(client_options opts)
      : opts_(std::move(opts)),
        local_mode_(!opts_.local_models.empty()),
        budget_(opts_.retry),
        hedger_(opts_.hedge),
        rng_(std::random_device{}()),
        endpoints_(opts_.breaker, opts_.ewma_alpha) {}

  transport& transport_for(const endpoint_address& a) const {
    if (local_) return *local_;
    return is_grpc(a) ? *grpc_ : *http_;
  }

  // --- endpoints (client_state_endpoints.hpp) ----------------------------------------------------------

  result<std::vector<endpoint_address>> read_source();
  // Resolves the endpoints the set does not know yet without the lock, then applies the list under it.
  void update_endpoints(const std::vector<endpoint_address>& list);
  // Drained endpoints with no attempt left leave the set (and their transports).
  void reap_drained();
  // The watcher: re-reads the file (when its mtime/size changes) or the URL, re-probes ejected models and
  // registers shared memory, until its stop_token is set (close()).
  void watch(std::stop_token stop);
  // A readiness probe for every (endpoint, model) whose ejection expired: ready re-admits it.
  void probe_ejected();
  // A failure held against the endpoint: its idle connections close when its circuit opens.
  void endpoint_failure(endpoint_state& e, bool fatal = false);

  // --- calls (client_state_calls.hpp) -----------------------------------------------------------------

  void launch(const call_ptr& c, bool hedge, deferred& d);
  // Removes the attempt from its call and its endpoint's count (idempotent).
  void end_attempt(const attempt_ptr& a);
  // After a retryable failure: another attempt after a jittered backoff, while attempts, the deadline and
  // the retry budget allow; otherwise the call fails with `e`. A hedge still running makes this a no-op.
  void schedule_retry(const call_ptr& c, error_info e, deferred& d, bool counts_attempt);
  // A hedge: a second attempt on another endpoint when the first is still running after the latency
  // percentile; first answer wins. Costs retry budget.
  void arm_hedge(const call_ptr& c);
  // A 4xx on a multi-row request: each row goes out alone; rows that fail alone are reported failed.
  void split_rows(const call_ptr& c, deferred& d);
  result<embed_result> assemble(const remote_call& c, std::vector<std::optional<result<embed_result>>>& rows);
  // Another endpoint for a call that one refused (not served, a TLS failure), or the call fails with `e`.
  void try_elsewhere(const call_ptr& c, const error_info& e, bool untried_only, deferred& d);
  // Completes a call once: cancels its timers and other attempts, hands the result to every callback
  // (coalesced ones included) after the lock is released.
  void finish(const call_ptr& c, result<embed_result> r, deferred& d);
  // Calls that waited for a free connection or an endpoint get another chance.
  void resume_waiting(deferred& d);

  // --- shared memory (client_state_shm.hpp) --------------------------------------------------------------

  static std::string layout_key(const remote_call& c);
  // The attempt's span of its endpoint's region, its rows written there, when the endpoint has one and the
  // model's output sizes are known; otherwise the attempt uses the socket.
  void plan_shm(remote_call& c, remote_attempt& a);
  // Frees the attempt's span (answered), or quarantines it until the server cannot write into it any more.
  void end_shm(remote_attempt& a);
  // Remembers the bytes per row of each output of a model's answer.
  void learn_outputs(const remote_call& c, const embed_result& r);
  // A shared-memory attempt the server refused for its shared memory: resent over the socket (true).
  bool shm_fallback(const attempt_ptr& a, const attempt_outcome& o, deferred& d);
  // The watcher: registers a region with each same-host endpoint that has none yet (off the lock), and
  // unregisters the regions of endpoints gone.
  void setup_shared_memory();
  void unregister_region(const endpoint_address& a, const std::string& region);

  client_options opts_;
  const bool local_mode_;
  mutable std::mutex mu_;
  bool closed_ = false;
  client_stats stats_;
  retry_budget budget_;
  hedger hedger_;
  std::mt19937_64 rng_;
  std::map<std::string, model_identity> identities_;
  std::map<std::string, shm_model_layout> shm_layouts_;                // layout_key -> outputs' sizes
  std::vector<std::pair<endpoint_address, std::string>> shm_retired_;  // regions to unregister (watcher)

  std::optional<asio::ssl::context> tls_ctx_;  // before the executor: outlives every connection and handler
  client_executor exec_;
  // after the executor, which runs their handlers; before what their handlers hold
  std::unique_ptr<transport> local_, http_, grpc_;
  endpoint_set endpoints_;
  call_table calls_;

  std::mutex watch_mu_;
  std::condition_variable_any watcher_cv_;  // only its stop_token wakes the watcher early
  worker_group watcher_;
};

}  // namespace jitembed::client::detail

// The private member functions declared above, defined out of line.
#include "jitembed/client/detail/client_state_calls.hpp"
#include "jitembed/client/detail/client_state_endpoints.hpp"
#include "jitembed/client/detail/client_state_shm.hpp"
#if defined(JITEMBED_HAS_GRPC)  // the program links jitembed::grpc: grpc:// endpoints
#include "jitembed/client/detail/client_grpc.hpp"
#else
namespace jitembed::client::detail {
// Without jitembed::grpc a grpc:// endpoint answers every attempt not_found.
class no_grpc_transport final : public transport {
 public:
  explicit no_grpc_transport(attempt_events& events) : events_(events) {}
  void send(const attempt_ptr& a, deferred& d) override {
    events_.on_answer(a, {attempt_fault::request, fail(errc::not_found, why(a->ep->addr))}, d);
  }
  void abandon(remote_attempt&) override {}
  result<std::optional<model_identity>> identity(const endpoint_address& a, const std::string&) override {
    return fail(errc::not_found, why(a));
  }
  result<model_metadata> metadata(const endpoint_address& a, const std::string&) override {
    return fail(errc::not_found, why(a));
  }
  bool ready(const endpoint_address&, const std::string&) override { return false; }
  shm_call_result shared_memory(const endpoint_address& a, const std::string&, const std::string&,
                                std::size_t) override {
    return {false, true, why(a)};
  }

 private:
  static std::string why(const endpoint_address& a) {
    return a.url + ": this client was built without gRPC (link jitembed::grpc)";
  }
  attempt_events& events_;
};
inline std::unique_ptr<transport> make_grpc_transport(const client_options&, client_executor&, attempt_events& events) {
  return std::make_unique<no_grpc_transport>(events);
}
}  // namespace jitembed::client::detail
#endif
