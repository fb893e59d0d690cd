// The client's control plane: the endpoint source and its watcher thread, model identity (cached), metadata
// and readiness. Its blocking calls go through the transports without the call engine's lock.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "jitembed/client/detail/call_engine.hpp"
#include "jitembed/client/detail/client_identity.hpp"
#include "jitembed/client/detail/transport.hpp"
#include "jitembed/core/worker_group.hpp"
#include "jitembed/net/http/client.hpp"

namespace jitembed::client::detail {

// The control plane's slice of client_options.
struct control_options {
  endpoint_source endpoints;
  std::map<std::string, model_identity> identities;  // given: never asked for
  std::chrono::milliseconds connect_timeout{2000};
  std::string tls_ca_file;
  bool shared_memory = true;
  bool local = false;  // local mode: one endpoint, nothing to watch, nothing becomes ready later
  static control_options of(const client_options& o) {
    return {
        o.endpoints, o.identities, o.connect_timeout, o.tls_ca_file, o.shared_memory.enabled, !o.local_models.empty()};
  }
};

class control_plane {
 public:
  control_plane(control_options o, call_engine& engine, const transport_set& via)
      : opts_(std::move(o)), engine_(engine), via_(via) {}

  // The watcher: list changes, re-admission probes, shared memory (throws worker_group's std::system_error).
  void start() {
    if (!opts_.local) watcher_ = worker_group(1, [this](std::stop_token stop, std::size_t) { watch(stop); });
  }
  void stop() { watcher_.stop(); }  // its stop_token wakes it

  // The endpoint list from its source. `tries`: how often a URL answering 5xx is asked (100, 200, ... ms apart):
  // create() asks 3 times, since a list served by a proxy (Ray Serve's) answers 500 while a replica restarts; a
  // 4xx answer or an unreachable URL fails at once. The watcher asks once a period (it keeps the last list).
  result<std::vector<endpoint_address>> read_source(int tries = 1) const {
    const auto& src = opts_.endpoints;
    if (!src.list.empty()) {
      std::string text;
      for (const auto& u : src.list) text += u + "\n";
      return parse_endpoint_list(text);
    }
    if (!src.file.empty()) {
      std::ifstream f(src.file, std::ios::binary);
      if (!f) return fail(errc::io_error, "endpoints file '" + src.file + "' cannot be read");
      std::stringstream ss;
      ss << f.rdbuf();
      return parse_endpoint_list(ss.str());
    }
    auto u = parse_endpoint_url(src.url);
    if (!u) return u.error();
    net::http::client_options ho;
    ho.connect_timeout = opts_.connect_timeout;
    ho.io_timeout = std::chrono::milliseconds(5000);
    ho.max_response_bytes = 1 << 20;
    ho.tls = u->tls;
    ho.tls_ca_file = opts_.tls_ca_file;
    net::http::client hc(u->host, u->port, ho);
    auto r = hc.get(u->path.empty() ? "/" : u->path);
    for (int k = 1; k < tries && r && r->status >= 500; ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100 * k));
      r = hc.get(u->path.empty() ? "/" : u->path);
    }
    if (!r) return r.error();
    if (r->status != 200) return http_error(r->status, r->body, "endpoints URL " + src.url);
    return parse_endpoint_list(r->body);
  }

  // Resolves the endpoints the picker does not know yet (a DNS lookup may block: off the engine's lock; the
  // watcher is the set's one writer), then applies the list.
  void update_endpoints(const std::vector<endpoint_address>& list) {
    std::map<std::string, std::vector<asio::ip::tcp::endpoint>> resolved;
    for (const auto& a : engine_.endpoints().unknown(list))
      if (via_(a).needs_address()) resolved[a.url] = resolve(a);
    engine_.apply(list, [&](const endpoint_address& a) {
      auto e = std::make_shared<endpoint_state>();
      e->addr = a;
      e->via = &via_(a);
      if (auto it = resolved.find(a.url); it != resolved.end()) e->resolved = std::move(it->second);
      e->reachable = !e->via->needs_address() || !e->resolved.empty();  // a name that did not resolve: never eligible
      // the watcher registers a region if the endpoint is on this host
      if (opts_.shared_memory && e->via->needs_address()) e->shm = shm_status::pending;
      return e;
    });
  }

  // The endpoints not draining, from the picker (no lock).
  std::vector<endpoint_address> live_endpoints() const { return engine_.endpoints().snapshot()->live; }

  result<model_identity> identity(const std::string& model) {
    if (auto it = opts_.identities.find(model); it != opts_.identities.end()) return it->second;
    {
      std::lock_guard lk(mu_);
      if (auto it = identities_.find(model); it != identities_.end()) return it->second;
    }
    error_info last = no_endpoint_error(model);
    for (const auto& a : live_endpoints()) {
      auto id = via_(a).identity(a, model);
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
      auto md = via_(a).metadata(a, model);
      if (md) return md;
      if (last.code != errc::not_found) last = md.error();  // "not served" outranks a transport error elsewhere
    }
    return last;
  }

  // Probes every live endpoint for each model until one answers ready for it (docs/client.md, Timeouts and
  // readiness): after `timeout` no probe starts once every model was probed once; local mode does not wait.
  result<void> wait_ready(const std::vector<std::string>& models, std::chrono::milliseconds timeout) {
    if (timeout.count() <= 0) return fail(errc::invalid_argument, "client: wait_ready timeout must be positive");
    if (models.empty()) return fail(errc::invalid_argument, "client: wait_ready names no model");
    const auto deadline = clock::now() + timeout;
    std::vector<std::string> waiting = models;
    auto pause = std::chrono::milliseconds(20);
    error_info last = fail(errc::unavailable, "no endpoint");
    bool reached = false;  // some endpoint answered (its model not ready, or not served)
    std::vector<endpoint_address> eps;
    for (bool first_round = true;; first_round = false) {
      eps = live_endpoints();
      for (auto it = waiting.begin(); it != waiting.end();) {
        bool ready = false;
        for (const auto& a : eps) {
          if (!first_round && clock::now() > deadline) break;
          if (via_(a).ready(a, *it)) {
            ready = true;
            break;
          }
          // Why not: the metadata GET's error (connection refused, 404), or an answer without readiness.
          auto md = via_(a).metadata(a, *it);
          if (md) {
            reached = true;
            last = fail(errc::unavailable, a.url + ": model '" + *it + "' is not ready");
          } else {
            const auto code = md.error().code;
            if (code != errc::unavailable && code != errc::timeout && code != errc::io_error) reached = true;
            last = fail(code, a.url + ": " + md.error().message);
          }
        }
        it = ready ? waiting.erase(it) : std::next(it);
      }
      if (waiting.empty()) return {};
      if (opts_.local || clock::now() + pause > deadline) break;
      if (engine_.closed()) return fail(errc::cancelled, "client: closed while waiting for readiness");
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::milliseconds(500));
    }
    std::string names, where;
    for (const auto& m : waiting) names += (names.empty() ? "'" : ", '") + m + "'";
    for (const auto& a : eps) where += (where.empty() ? "" : ", ") + a.url;
    if (opts_.local) return fail(last.code, "client: local models do not serve " + names + ": " + last.message);
    const auto ms = std::to_string(timeout.count());
    const std::string what = "client: no endpoint ready for model " + names + " within " + ms +
                             " ms (endpoints: " + (where.empty() ? std::string("none") : where) +
                             "); last error: " + last.message;
    return fail(reached ? errc::timeout : errc::unavailable, what);
  }

  // The regions registered with endpoints: unregistered (the servers then close their descriptors).
  void unregister_regions() {
    for (const auto& [addr, region] : engine_.regions()) shm_manager::unregister(via_(addr), addr, region);
  }

 private:
  static error_info no_endpoint_error(const std::string& model) {
    return fail(errc::unavailable, "client: no endpoint to ask for model '" + model + "' metadata");
  }

  // Re-reads the file (when its mtime/size changes) or the URL, re-probes ejected models and registers
  // shared memory, until its stop_token is set (close()).
  void watch(std::stop_token stop) {
    struct ::stat last {};
    bool have_last = false;
    std::unique_lock lk(watch_mu_);
    for (;;) {
      if (watcher_cv_.wait_for(lk, stop, opts_.endpoints.refresh, [&] { return stop.stop_requested(); })) return;
      lk.unlock();
      if (!opts_.endpoints.file.empty()) {
        struct ::stat st {};
        if (::stat(opts_.endpoints.file.c_str(), &st) == 0) {
          const bool same = have_last && st.st_mtim.tv_sec == last.st_mtim.tv_sec &&
                            st.st_mtim.tv_nsec == last.st_mtim.tv_nsec && st.st_size == last.st_size &&
                            st.st_ino == last.st_ino;
          if (!same) {
            last = st;
            have_last = true;
            if (auto l = read_source(); l) update_endpoints(*l);
          }
        }
      } else if (!opts_.endpoints.url.empty()) {
        if (auto l = read_source(); l) update_endpoints(*l);
      }
      // A readiness probe for every (endpoint, model) whose ejection expired: ready re-admits it.
      for (auto& [e, m] : engine_.due_probes()) engine_.probed(*e, m, e->via->ready(e->addr, m));
      engine_.shared_memory().setup(engine_, engine_.endpoints(), via_);
      lk.lock();
    }
  }

  const control_options opts_;
  call_engine& engine_;
  const transport_set& via_;
  std::mutex mu_;                                     // identities_
  std::map<std::string, model_identity> identities_;  // asked and answered
  std::mutex watch_mu_;
  std::condition_variable_any watcher_cv_;  // only its stop_token wakes the watcher early
  worker_group watcher_;                    // last: its thread uses the members above
};

}  // namespace jitembed::client::detail
