// client_state's side of the endpoint set: reading the endpoint source, resolving and applying changes, the
// watcher and the readiness prober, and the failures held against an endpoint.
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

inline void client_state::update_endpoints(const std::vector<endpoint_address>& list) {
  std::vector<endpoint_address> fresh;
  {
    std::lock_guard g(mu_);
    fresh = endpoints_.unknown(list);
  }
  std::map<std::string, std::vector<asio::ip::tcp::endpoint>> resolved;  // a DNS lookup may block: no lock
  for (const auto& a : fresh)
    if (transport_for(a).needs_address()) resolved[a.url] = resolve(a);
  deferred d;
  std::lock_guard g(mu_);
  auto ch = endpoints_.apply(list, [&](const endpoint_address& a) {
    auto e = std::make_shared<endpoint_state>();
    e->addr = a;
    e->via = &transport_for(a);
    if (auto it = resolved.find(a.url); it != resolved.end()) e->resolved = std::move(it->second);
    e->reachable = !e->via->needs_address() || !e->resolved.empty();  // a name that did not resolve: never eligible
    // the watcher registers a region if the endpoint is on this host
    if (opts_.shared_memory.enabled && e->via->needs_address()) e->shm = shm_status::pending;
    return e;
  });
  for (const auto& e : ch.drained) e->via->close_idle(*e);
  if (ch.changed) ++stats_.endpoint_updates;
  reap_drained();
  if (ch.changed) resume_waiting(d);
}

inline void client_state::reap_drained() {
  for (const auto& e : endpoints_.reap()) {
    if (e->arena) shm_retired_.emplace_back(e->addr, e->arena->region);
    e->via->forget(*e);
  }
}

inline void client_state::endpoint_failure(endpoint_state& e, bool fatal) {
  const auto now = clock::now();
  if (fatal ? endpoints_.note_fatal(e, now) : endpoints_.note_failure(e, now)) e.via->close_idle(e);
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
  std::vector<std::pair<endpoint_ptr, std::string>> due;
  {
    std::lock_guard g(mu_);
    due = endpoints_.due_probes(clock::now());
  }
  for (auto& [e, m] : due) {
    const bool ready = e->via->ready(e->addr, m);
    deferred d;
    std::lock_guard g(mu_);
    if (endpoints_.probed(*e, m, ready, clock::now())) resume_waiting(d);
  }
}

}  // namespace jitembed::client::detail
