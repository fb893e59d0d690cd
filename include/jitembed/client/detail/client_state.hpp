// The state behind a jit_client handle: local mode (worker pool over in-process models) or remote mode
// (Asio event loop, endpoints, balancing, retries, hedging), and the endpoint watcher thread.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <sstream>
#include <stop_token>

#include "jitembed/client/detail/client_common.hpp"
#include "jitembed/client/detail/client_identity.hpp"
#include "jitembed/client/detail/client_local.hpp"
#include "jitembed/client/detail/client_remote.hpp"
#include "jitembed/core/detail/capture.hpp"
#include "jitembed/core/worker_group.hpp"
#include "jitembed/net/http/client.hpp"

namespace jitembed::client::detail {

// grpc:// endpoints' metadata calls (client_grpc.hpp).
inline result<std::optional<model_identity>> grpc_fetch_identity(const endpoint_address& a, const std::string& model,
                                                                 const client_options& opts);
inline result<model_metadata> grpc_fetch_metadata(const endpoint_address& a, const std::string& model,
                                                  const client_options& opts);
inline bool grpc_model_ready(const endpoint_address& a, const std::string& model, const client_options& opts);
// grpc:// endpoints' SystemSharedMemoryRegister (`key` set) / SystemSharedMemoryUnregister.
inline shm_call_result grpc_shm_call(const endpoint_address& a, const std::string& region, const std::string& key,
                                     std::size_t bytes, const client_options& opts);

// Handlers hold `this`, not a shared_ptr: the owning jit_client closes the state (joining every thread
// that runs handlers) before it is destroyed, so no handler outlives it and no handler can be the one that
// destroys it on its own thread.
class client_state {
 public:
  using call_ptr = std::shared_ptr<remote_call>;
  using attempt_ptr = std::shared_ptr<remote_attempt>;

  // Every failure is in the result: a thread that cannot start (the local workers, the I/O threads or the
  // watcher) is resource_exhausted, after the threads already started are stopped and joined.
  static result<std::shared_ptr<client_state>> create(client_options opts) {
    return core_detail::capture("client", [&]() -> result<std::shared_ptr<client_state>> {
      const auto& src = opts.endpoints;
      const int sources = int(!src.list.empty()) + int(!src.file.empty()) + int(!src.url.empty());
      if (sources > 1)
        return fail(errc::invalid_argument, "client: give one endpoint source (list, file or url), not several");
      if (sources == 0 && opts.local_models.empty()) {
        return fail(errc::invalid_argument, "client: no endpoint source and no local model");
      }
      if (sources == 1 && !opts.local_models.empty()) {
        return fail(errc::invalid_argument, "client: endpoints and local models are exclusive");
      }
      for (const auto& m : opts.local_models)
        if (!m) return fail(errc::invalid_argument, "client: an empty local model");
      if (opts.request_timeout.count() <= 0 || opts.retry.max_attempts < 1 || opts.io_threads < 1) {
        return fail(errc::invalid_argument,
                    "client: request_timeout, retry.max_attempts and io_threads must be positive");
      }
      std::shared_ptr<client_state> s(new client_state(std::move(opts)));
      if (s->local_) return s;
      // https:// endpoints may join the list later: the verifying context is made now, so a bad CA file fails here.
      auto tls = net::http::detail::make_client_tls_context(s->opts_.tls_ca_file, "client");
      if (!tls) return tls.error();
      s->tls_ctx_.emplace(std::move(*tls));
      // The first list must be readable now: a typo in a path fails here, not as timeouts later.
      auto first = s->read_source();
      if (!first) return first.error();
      s->update_endpoints(*first);
      s->start_threads();
      return s;
    });
  }

  ~client_state() { close(); }

  bool local() const noexcept { return local_ != nullptr; }

  // --- embed -------------------------------------------------------------------------------------------

  std::uint64_t embed(embed_request req, embed_callback done) {
    const std::uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
    if (local_) return embed_local(id, std::move(req), std::move(done));
    deferred d;
    std::lock_guard lk(mu_);
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
    if (req.coalesce_key) {
      if (auto it = coalesce_.find(*req.coalesce_key); it != coalesce_.end() && !it->second->done) {
        ++stats_.requests;
        ++stats_.coalesced;
        it->second->callbacks.push_back(std::move(done));
        return id;
      }
    }
    auto c = std::make_shared<remote_call>();
    c->id = id;
    c->model = std::move(req.model);
    c->version = std::move(req.version);
    c->input = std::move(req.input);
    c->outputs = std::move(req.outputs);
    c->n_rows = req.rows.size();
    std::vector<std::string_view> views;
    views.reserve(req.rows.size());
    for (auto r : req.rows) views.emplace_back(reinterpret_cast<const char*>(r.data()), r.size());
    auto rows = kserve::encode_bytes_elements(views);
    if (!rows) return fail_now(rows.error());
    c->rows = std::make_shared<byte_buffer>(std::move(*rows));
    std::size_t off = 0;
    for (auto r : req.rows) {
      c->row_spans.emplace_back(off + 4, r.size());
      off += 4 + r.size();
    }
    c->start = clock::now();
    c->deadline = c->start + req.timeout.value_or(opts_.request_timeout);
    c->callbacks.push_back(std::move(done));
    c->coalesce_key = req.coalesce_key;
    ++stats_.requests;
    budget_.on_request();
    calls_.emplace(id, c);
    if (c->coalesce_key) coalesce_[*c->coalesce_key] = c;
    launch(c, false, d);
    return id;
  }

  bool cancel(std::uint64_t id) {
    if (local_) {
      std::shared_ptr<local_call> lc;
      {
        std::lock_guard lk(mu_);
        auto it = local_calls_.find(id);
        if (it == local_calls_.end()) return false;
        lc = it->second;
        local_calls_.erase(it);
      }
      if (lc->done.exchange(true)) return false;
      {
        std::lock_guard lk(mu_);
        ++stats_.failed;
        ++stats_.cancelled;
      }
      lc->callback(fail(errc::cancelled, "embed: cancelled"));
      return true;
    }
    deferred d;
    std::lock_guard lk(mu_);
    auto it = calls_.find(id);
    if (it == calls_.end() || it->second->done) return false;
    ++stats_.cancelled;
    const call_ptr c = it->second;  // finish() erases the map entry
    finish(c, fail(errc::cancelled, "embed: cancelled"), d);
    return true;
  }

  // --- identity ----------------------------------------------------------------------------------------

  result<model_identity> identity(const std::string& model) {
    if (auto it = opts_.identities.find(model); it != opts_.identities.end()) return it->second;
    if (local_) {
      const auto* m = local_->find(model);
      if (!m) return fail(errc::not_found, "client: no local model '" + model + "'");
      return model_identity{std::string(m->version()), std::string(m->preprocess_key()),
                            std::string(models::to_string(m->input_modality()))};
    }
    {
      std::lock_guard lk(mu_);
      if (auto it = identities_.find(model); it != identities_.end()) return it->second;
    }
    error_info last = no_endpoint_error(model);
    for (const auto& a : live_endpoints()) {
      auto id = is_grpc(a) ? grpc_fetch_identity(a, model, opts_) : fetch_identity(a, model, opts_);
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
    if (local_) {
      const auto* m = local_->find(model);
      if (!m) return fail(errc::not_found, "client: no local model '" + model + "'");
      model_metadata md;
      md.name = model;
      md.platform = "jitembed";
      md.versions = {std::string(m->version())};
      md.inputs.push_back({std::string(models::to_string(m->input_modality())), "BYTES", {-1, 1}});
      for (const auto& o : m->outputs()) {
        served_tensor t{o.name, std::string(kserve::to_string(kserve::from_dtype(o.type))), {-1}};
        t.shape.insert(t.shape.end(), o.shape.begin(), o.shape.end());
        md.outputs.push_back(std::move(t));
      }
      return md;
    }
    error_info last = no_endpoint_error(model);
    for (const auto& a : live_endpoints()) {
      auto md = is_grpc(a) ? grpc_fetch_metadata(a, model, opts_) : fetch_metadata(a, model, opts_);
      if (md) return md;
      if (last.code != errc::not_found) last = md.error();  // "not served" outranks a transport error elsewhere
    }
    return last;
  }

  // The endpoints not draining (a copy: they are asked without the lock).
  std::vector<endpoint_address> live_endpoints() const {
    std::lock_guard lk(mu_);
    std::vector<endpoint_address> eps;
    for (const auto& e : endpoints_)
      if (!e->draining) eps.push_back(e->addr);
    return eps;
  }

  static error_info no_endpoint_error(const std::string& model) {
    return fail(errc::unavailable, "client: no endpoint to ask for model '" + model + "' metadata");
  }

  // --- stats, endpoints, close -------------------------------------------------------------------------

  client_stats stats() const {
    std::lock_guard lk(mu_);
    client_stats s = stats_;
    s.in_flight = local_ ? local_calls_.size() : calls_.size();
    s.latency_p50_ms = latencies_.percentile(0.50);
    s.latency_p95_ms = latencies_.percentile(0.95);
    s.latency_p99_ms = latencies_.percentile(0.99);
    const auto now = clock::now();
    for (const auto& e : endpoints_) {
      endpoint_stats es;
      es.url = e->addr.url;
      es.requests = e->requests;
      es.successes = e->successes;
      es.failures = e->failures;
      es.outstanding = e->outstanding;
      es.ewma_latency_ms = e->ewma_ms;
      es.draining = e->draining;
      es.circuit_open = e->circuit_open(now);
      es.connections_opened = e->conns_opened;
      es.shared_memory = e->shm == shm_status::ready;
      s.endpoints.push_back(std::move(es));
    }
    for (const auto& e : retired_) s.endpoints.push_back(e);
    return s;
  }

  std::vector<std::string> endpoint_urls() const {
    std::lock_guard lk(mu_);
    std::vector<std::string> out;
    for (const auto& e : endpoints_)
      if (!e->draining) out.push_back(e->addr.url);
    return out;
  }

  void close() {
    {
      deferred d;
      std::lock_guard lk(mu_);
      if (closed_) return;
      closed_ = true;
      std::vector<call_ptr> open;
      for (auto& [id, c] : calls_) open.push_back(c);
      for (auto& c : open) finish(c, fail(errc::cancelled, "client: closed with the request in flight"), d);
      for (auto& e : endpoints_) {
        for (auto& conn : e->idle) close_conn(*conn);
        e->idle.clear();
      }
    }
    watcher_.stop();  // its stop_token wakes it
    {  // the regions registered with endpoints: unregistered (the servers then close their descriptors)
      std::vector<std::pair<endpoint_address, std::string>> regions;
      {
        std::lock_guard lk(mu_);
        regions.swap(shm_retired_);
        for (auto& e : endpoints_)
          if (e->arena) regions.emplace_back(e->addr, e->arena->region);
      }
      for (const auto& [addr, region] : regions) unregister_region(addr, region);
    }
    work_.reset();
    if (local_) {
      local_->close();
      std::vector<std::shared_ptr<local_call>> left;
      {
        std::lock_guard lk(mu_);
        for (auto& [id, lc] : local_calls_) left.push_back(lc);
        local_calls_.clear();
      }
      for (auto& lc : left)
        if (!lc->done.exchange(true)) lc->callback(fail(errc::cancelled, "client: closed with the request in flight"));
    }
    ioc_.stop();
    io_threads_.join();        // an I/O thread closing its own client is detached by worker_group
    std::unique_lock lk(mu_);  // gRPC callbacks hold `this`: wait for the cancelled calls' callbacks
    grpc_idle_.wait(lk, [&] { return grpc_calls_ == 0; });
  }

 private:
  explicit client_state(client_options opts)
      : opts_(std::move(opts)), budget_(opts_.retry), rng_(std::random_device{}()), work_(asio::make_work_guard(ioc_)) {
    if (!opts_.local_models.empty()) local_ = std::make_unique<local_backend>(opts_);
  }

  // --- local mode --------------------------------------------------------------------------------------

  struct local_call {
    std::atomic<bool> done{false};
    embed_callback callback;
  };

  std::uint64_t embed_local(std::uint64_t id, embed_request req, embed_callback done);

  // --- endpoints ---------------------------------------------------------------------------------------

  result<std::vector<endpoint_address>> read_source();

  // Adds new endpoints, drains removed ones (no new attempts; dropped once their attempts finish).
  void update_endpoints(const std::vector<endpoint_address>& list);
  void apply_endpoints(const std::vector<endpoint_address>& list,
                       std::map<std::string, std::vector<tcp::endpoint>>& resolved, deferred& d);

  void reap_drained();

  // The I/O threads and the watcher, all or none (throws worker_group's std::system_error).
  void start_threads();

  // The watcher: re-reads the file (when its mtime/size changes) or the URL, and re-probes ejected models,
  // until its stop_token is set (close()).
  void watch(std::stop_token stop);

  // GET /v2/models/{m}/ready for every (endpoint, model) whose ejection expired: 200 re-admits it.
  void probe_ejected();

  // --- balancing ---------------------------------------------------------------------------------------

  bool eligible(const endpoint_state& e, const remote_call& c, clock::time_point now) const;

  // Power of two choices on outstanding attempts, EWMA latency as the tie break; endpoints this call
  // already tried are avoided while others are eligible.
  std::shared_ptr<endpoint_state> choose(const remote_call& c);

  // --- attempts ----------------------------------------------------------------------------------------

  void launch(const call_ptr& c, bool hedge, deferred& d);

  result<void> build_request(remote_call& c, remote_attempt& a);

  void send(const attempt_ptr& a, deferred& d);

  void write(const attempt_ptr& a);

  void read(const attempt_ptr& a);

  // Removes the attempt from its call and its endpoint's count (idempotent).
  void end_attempt(const attempt_ptr& a);

  void close_conn(http_conn& c);
  void handshake(const attempt_ptr& a, deferred& d);
  void on_tls_failure(const attempt_ptr& a, boost::system::error_code ec, deferred& d);

  void drop_conn(const attempt_ptr& a);

  void release_conn(const attempt_ptr& a, bool keep_alive);

  void on_transport_error(const attempt_ptr& a, boost::system::error_code ec, const char* stage, deferred& d);

  void note_endpoint_failure(endpoint_state& e);
  void note_endpoint_success(endpoint_state& e, double ms);

  void on_response(const attempt_ptr& a, deferred& d);

  // An answer from any transport (on_response: HTTP; grpc_send's callback: gRPC).
  void on_answer(const attempt_ptr& a, int status, result<embed_result> r, deferred& d);

  // The gRPC transport (client_grpc.hpp; compiled in with jitembed::grpc, else every grpc:// attempt
  // answers not_found): one unary ModelInfer per attempt on the endpoint's channel.
  void grpc_send(const attempt_ptr& a, deferred& d);
  void grpc_cancel(remote_attempt& a);  // TryCancel of the attempt's call, when it has one
  void on_grpc_transport_error(const attempt_ptr& a, const std::string& message, deferred& d);

  result<embed_result> decode(const remote_call& c, const remote_attempt& a, std::string_view body,
                              std::optional<std::size_t> hlen);

  bool offers_compression(const endpoint_state& ep) const;

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
  bool shm_fallback(const attempt_ptr& a, int status, const result<embed_result>& r, deferred& d);
  // The watcher: registers a region with each same-host endpoint that has none yet (off the lock), and
  // unregisters the regions of endpoints gone.
  void setup_shared_memory();
  void unregister_region(const endpoint_address& a, const std::string& region);

  // The call's rows compressed once when compress_inputs is set and it pays; nullptr: send them raw.
  const byte_buffer* packed_rows(remote_call& c);

  error_info deadline_error(const remote_call& c) const;

  // After a retryable failure: another attempt after a jittered backoff, while attempts, the deadline and
  // the retry budget allow; otherwise the call fails with `e`. A hedge still running makes this a no-op.
  void schedule_retry(const call_ptr& c, error_info e, deferred& d, bool counts_attempt);

  // A hedge: a second attempt on another endpoint when the first is still running after the latency
  // percentile; first answer wins. Costs retry budget.
  void arm_hedge(const call_ptr& c);

  // A 4xx on a multi-row request: each row goes out alone; rows that fail alone are reported failed.
  void split_rows(const call_ptr& c, deferred& d);

  result<embed_result> assemble(const remote_call& c, std::vector<std::optional<result<embed_result>>>& rows);

  // Completes a call once: cancels its timers and other attempts, hands the result to every callback
  // (coalesced ones included) after the lock is released.
  void finish(const call_ptr& c, result<embed_result> r, deferred& d);

  // Calls that waited for a free connection or an endpoint get another chance.
  void resume_waiting(deferred& d);

  client_options opts_;
  mutable std::mutex mu_;
  bool closed_ = false;
  std::atomic<std::uint64_t> next_id_{1};
  client_stats stats_;
  std::vector<endpoint_stats> retired_;
  retry_budget budget_;
  latency_window latencies_;
  double hedge_after_ms_ = 0;
  std::mt19937_64 rng_;
  std::map<std::string, model_identity> identities_;
  std::map<std::string, shm_model_layout> shm_layouts_;                 // layout_key -> outputs' sizes
  std::vector<std::pair<endpoint_address, std::string>> shm_retired_;  // regions to unregister (watcher)
  std::unique_ptr<local_backend> local_;
  std::unordered_map<std::uint64_t, std::shared_ptr<local_call>> local_calls_;

  std::optional<asio::ssl::context> tls_ctx_;  // before ioc_: outlives every connection and pending handler
  asio::io_context ioc_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  worker_group io_threads_;
  std::vector<std::shared_ptr<endpoint_state>> endpoints_;
  std::unordered_map<std::uint64_t, call_ptr> calls_;
  std::unordered_map<hash128, call_ptr> coalesce_;
  std::vector<call_ptr> waiting_;

  std::size_t grpc_calls_ = 0;         // gRPC calls whose callback has not run (close() waits for them)
  std::condition_variable grpc_idle_;  // grpc_calls_ reached 0

  std::mutex watch_mu_;
  std::condition_variable_any watcher_cv_;  // only its stop_token wakes the watcher early
  worker_group watcher_;
};

}  // namespace jitembed::client::detail

// The private member functions declared above, defined out of line.
#include "jitembed/client/detail/client_state_attempts.hpp"
#include "jitembed/client/detail/client_state_endpoints.hpp"
#include "jitembed/client/detail/client_state_finish.hpp"
#include "jitembed/client/detail/client_state_local.hpp"
#include "jitembed/client/detail/client_state_shm.hpp"
#if defined(JITEMBED_HAS_GRPC)  // the program links jitembed::grpc: grpc:// endpoints
#include "jitembed/client/detail/client_grpc.hpp"
#endif
