// client_state's endpoint set: reading the endpoint source, applying changes, draining removed endpoints,
// the watcher and prober threads, and choosing an endpoint (power of two choices).
// Included at the end of jitembed/client/detail/client_state.hpp (users include that header).
#pragma once

#include "jitembed/client/detail/client_state.hpp"

namespace jitembed::client::detail {

inline auto client_state::read_source() -> result<std::vector<endpoint_address>> {
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
  if (!r) return r.error();
  if (r->status != 200) return http_error(r->status, r->body, "endpoints URL " + src.url);
  return parse_endpoint_list(r->body);
}

// Resolves the endpoints the client does not know yet without holding the state lock (a DNS lookup may
// block), then applies the list under it.
inline void client_state::update_endpoints(const std::vector<endpoint_address>& list) {
  std::vector<endpoint_address> fresh;
  {
    std::lock_guard g(mu_);
    for (const auto& a : list)
      if (std::none_of(endpoints_.begin(), endpoints_.end(), [&](const auto& e) { return e->addr.url == a.url; }))
        fresh.push_back(a);
  }
  std::map<std::string, std::vector<tcp::endpoint>> resolved;
  for (const auto& a : fresh) {
    auto& out = resolved[a.url];
    boost::system::error_code ec;
    const auto ip = asio::ip::make_address(a.host, ec);
    if (!ec) {
      out.emplace_back(ip, a.port);
      continue;
    }
    tcp::resolver res(ioc_);
    auto rs = res.resolve(a.host, std::to_string(a.port), ec);
    if (!ec)
      for (const auto& r : rs) out.push_back(r.endpoint());
  }
  deferred d;
  std::lock_guard g(mu_);
  apply_endpoints(list, resolved, d);
}

// Adds new endpoints, drains removed ones (no new attempts; dropped once their attempts finish).
inline void client_state::apply_endpoints(const std::vector<endpoint_address>& list,
                                          std::map<std::string, std::vector<tcp::endpoint>>& resolved, deferred& d) {
  bool changed = false;
  for (auto& e : endpoints_) {
    const bool keep =
        std::any_of(list.begin(), list.end(), [&](const endpoint_address& a) { return a.url == e->addr.url; });
    if (!keep && !e->draining) {
      e->draining = true;
      changed = true;
      for (auto& conn : e->idle) close_conn(*conn);
      e->idle.clear();
    }
    if (keep && e->draining) {  // re-added before it drained
      e->draining = false;
      changed = true;
    }
  }
  for (const auto& a : list) {
    const bool have =
        std::any_of(endpoints_.begin(), endpoints_.end(), [&](const auto& e) { return e->addr.url == a.url; });
    if (have) continue;
    auto e = std::make_shared<endpoint_state>();
    e->addr = a;
    if (opts_.shared_memory.enabled) e->shm = shm_status::pending;  // the watcher registers a region if same-host
    if (auto it = resolved.find(a.url); it != resolved.end()) e->resolved = std::move(it->second);
    endpoints_.push_back(std::move(e));  // unresolved (a name that did not resolve): never eligible
    changed = true;
  }
  if (changed) ++stats_.endpoint_updates;
  reap_drained();
  if (changed) resume_waiting(d);
}

inline void client_state::reap_drained() {
  for (auto it = endpoints_.begin(); it != endpoints_.end();) {
    if ((*it)->draining && (*it)->outstanding == 0) {
      endpoint_stats es;
      es.url = (*it)->addr.url;
      es.requests = (*it)->requests;
      es.successes = (*it)->successes;
      es.failures = (*it)->failures;
      es.draining = true;
      es.connections_opened = (*it)->conns_opened;
      retired_.push_back(std::move(es));
      if ((*it)->arena) shm_retired_.emplace_back((*it)->addr, (*it)->arena->region);
      if (retired_.size() > 64) retired_.erase(retired_.begin());
      it = endpoints_.erase(it);
    } else {
      ++it;
    }
  }
}

inline void client_state::start_threads() {
  io_threads_ = worker_group(static_cast<std::size_t>(opts_.io_threads), [this](std::stop_token stop, std::size_t) {
    std::stop_callback wake(stop, [this] { ioc_.stop(); });  // only a failed start asks: close() stops ioc_ itself
    ioc_.run();
  });
  // List changes and re-admission probes. A watcher that cannot start throws here; create()'s result
  // says so and ~client_state (close()) stops the I/O threads above.
  watcher_ = worker_group(1, [this](std::stop_token stop, std::size_t) { watch(stop); });
}

inline void client_state::watch(std::stop_token stop) {
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
    probe_ejected();
    setup_shared_memory();
    lk.lock();
  }
}

inline void client_state::probe_ejected() {
  std::vector<std::pair<std::shared_ptr<endpoint_state>, std::string>> due;
  const auto now = clock::now();
  {
    std::lock_guard g(mu_);
    for (auto& e : endpoints_)
      for (auto& [m, until] : e->ejected)
        if (until <= now && !e->draining) due.emplace_back(e, m);
  }
  for (auto& [e, m] : due) {
    if (is_grpc(e->addr)) {
      const bool ready = grpc_model_ready(e->addr, m, opts_);
      deferred d;
      std::lock_guard g(mu_);
      if (ready) {
        e->ejected.erase(m);
        resume_waiting(d);
      } else {
        e->ejected[m] = clock::now() + opts_.breaker.eject_for;
      }
      continue;
    }
    net::http::client_options ho;
    ho.connect_timeout = std::chrono::milliseconds(500);
    ho.io_timeout = std::chrono::milliseconds(1000);
    ho.tls = e->addr.tls;
    ho.tls_ca_file = opts_.tls_ca_file;
    net::http::client hc(e->addr.host, e->addr.port, ho);
    net::http::header_list h;
    if (!opts_.auth_token.empty()) h.emplace_back("Authorization", "Bearer " + opts_.auth_token);
    auto r = hc.get("/v2/models/" + m + "/ready", h);
    deferred d;
    std::lock_guard g(mu_);
    if (r && r->status == 200) {
      e->ejected.erase(m);
      resume_waiting(d);
    } else {
      e->ejected[m] = clock::now() + opts_.breaker.eject_for;
    }
  }
}

inline auto client_state::eligible(const endpoint_state& e, const remote_call& c, clock::time_point now) const -> bool {
  if (e.draining || e.resolved.empty()) return false;
  if (e.circuit_open(now)) return false;
  if (e.half_open(now) && e.probe_in_flight) return false;
  if (auto it = e.ejected.find(c.model); it != e.ejected.end()) return false;
  return true;
}

inline auto client_state::choose(const remote_call& c) -> std::shared_ptr<endpoint_state> {
  const auto now = clock::now();
  std::vector<endpoint_state*> fresh, all;
  for (auto& e : endpoints_) {
    if (!eligible(*e, c, now)) continue;
    all.push_back(e.get());
    if (!c.tried.count(e.get())) fresh.push_back(e.get());
  }
  auto& pool = fresh.empty() ? all : fresh;
  if (pool.empty()) return nullptr;
  endpoint_state* pick = pool[0];
  if (pool.size() > 1) {
    std::uniform_int_distribution<std::size_t> u(0, pool.size() - 1);
    const std::size_t i = u(rng_);
    std::size_t j = u(rng_);
    while (j == i) j = u(rng_);
    endpoint_state* a = pool[i];
    endpoint_state* b = pool[j];
    // Ties on outstanding go to the clearly faster one (EWMA more than 20% lower); otherwise a and b
    // are already a random pair, so equal servers share a sequential client's load too.
    const double la = a->has_ewma ? a->ewma_ms : 0, lb = b->has_ewma ? b->ewma_ms : 0;
    if (a->outstanding != b->outstanding)
      pick = a->outstanding < b->outstanding ? a : b;
    else if (lb < 0.8 * la)
      pick = b;
    else
      pick = a;
  }
  for (auto& e : endpoints_)
    if (e.get() == pick) return e;
  return nullptr;
}

}  // namespace jitembed::client::detail
