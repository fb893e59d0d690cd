// client_state's shared memory for same-host endpoints (client_options.shared_memory; the object and its
// spans: client_shm.hpp): registering a region per endpoint (the watcher, off the state lock), planning an
// attempt's span, learning a model's output sizes from its answers, and falling back to the socket when a
// server refuses a shared-memory request.
// Included at the end of jitembed/client/detail/client_state.hpp (users include that header).
#pragma once

#include <ifaddrs.h>
#include <netinet/in.h>

#include "jitembed/client/detail/client_state.hpp"

namespace jitembed::client::detail {

// Whether every resolved address of the endpoint is this host's: loopback, or an address of one of its
// interfaces (getifaddrs).
inline bool is_same_host(const endpoint_address& a, const std::vector<asio::ip::tcp::endpoint>& resolved) {
  if (is_loopback(a)) return true;
  if (resolved.empty()) return false;
  std::vector<asio::ip::address> local;
  if (::ifaddrs* list = nullptr; ::getifaddrs(&list) == 0) {
    for (auto* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr) continue;
      if (i->ifa_addr->sa_family == AF_INET) {
        const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
        local.push_back(asio::ip::address_v4(ntohl(sin->sin_addr.s_addr)));
      } else if (i->ifa_addr->sa_family == AF_INET6) {
        const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
        asio::ip::address_v6::bytes_type b;
        std::memcpy(b.data(), sin6->sin6_addr.s6_addr, b.size());
        local.push_back(asio::ip::address_v6(b, sin6->sin6_scope_id));
      }
    }
    ::freeifaddrs(list);
  }
  return std::all_of(resolved.begin(), resolved.end(), [&](const asio::ip::tcp::endpoint& e) {
    const auto ad = e.address();
    return ad.is_loopback() || std::any_of(local.begin(), local.end(), [&](const auto& l) { return l == ad; });
  });
}

inline std::string client_state::layout_key(const remote_call& c) { return c.model + '\n' + c.version; }

inline void client_state::plan_shm(remote_call& c, remote_attempt& a) {
  auto& ep = *a.ep;
  if (c.no_shm || ep.shm != shm_status::ready || !ep.arena) return;
  const auto it = shm_layouts_.find(layout_key(c));
  if (it == shm_layouts_.end() || it->second.variable) return;
  const auto& layout = it->second.outputs;
  std::vector<const shm_output_layout*> outs;
  if (c.outputs.empty()) {
    for (const auto& o : layout) outs.push_back(&o);
  } else {
    for (const auto& name : c.outputs) {
      const auto o = std::find_if(layout.begin(), layout.end(), [&](const auto& l) { return l.name == name; });
      if (o == layout.end()) return;  // not seen yet: this time over the socket
      outs.push_back(&*o);
    }
  }
  if (outs.empty()) return;
  const auto align = [](std::size_t n) { return shm_spans::round(n); };
  const std::size_t in = c.rows->size();
  std::size_t total = align(in);
  for (const auto* o : outs) total += align(o->row_bytes * c.n_rows);
  if (total < opts_.shared_memory.min_bytes) return;
  auto& arena = *ep.arena;
  const auto off = arena.spans.allocate(total, clock::now());
  if (!off) return;  // the pool is full: the socket
  shm_use u;
  u.arena = ep.arena;
  u.offset = *off;
  u.size = total;
  u.input_bytes = in;
  std::size_t pos = *off + align(in);
  for (const auto* o : outs) {
    const std::size_t bytes = o->row_bytes * c.n_rows;
    u.outputs.push_back({o->name, {pos, bytes}});
    pos += align(bytes);
  }
  if (!arena.object->write(*off, std::span<const std::byte>(c.rows->data(), in))) {  // /dev/shm full: the socket
    arena.spans.release(*off, total);
    return;
  }
  a.shm = std::move(u);
  ++stats_.shared_memory_attempts;
}

inline void client_state::end_shm(remote_attempt& a) {
  if (!a.shm) return;
  auto& u = *a.shm;
  if (u.answered) {
    u.arena->spans.release(u.offset, u.size);
  } else {  // the server may still write into it: not before the deadline it was given, plus a margin
    u.arena->spans.quarantine(u.offset, u.size,
                              std::max(a.call->deadline, clock::now()) + opts_.shared_memory.quarantine);
  }
  a.shm.reset();
}

inline void client_state::learn_outputs(const remote_call& c, const embed_result& r) {
  if (!opts_.shared_memory.enabled || c.n_rows == 0) return;
  auto& layout = shm_layouts_[layout_key(c)];
  if (layout.variable) return;
  for (const auto& out : r.outputs) {
    const std::string& name = out.first;  // not a structured binding: clang-14 cannot capture one in a lambda
    const std::size_t row = out.second.nbytes() / c.n_rows;
    const auto it =
        std::find_if(layout.outputs.begin(), layout.outputs.end(), [&](const auto& l) { return l.name == name; });
    if (it == layout.outputs.end())
      layout.outputs.push_back({name, row});
    else if (it->row_bytes != row)
      layout.variable = true;  // sizes that change per request: the socket for this model
  }
}

inline bool client_state::shm_fallback(const attempt_ptr& a, const attempt_outcome& o, deferred& d) {
  const auto c = a->call;
  if (!a->shm || c->done) return false;
  if (o.fault == attempt_fault::none && o.answer) return false;
  const std::string msg = o.answer ? std::string() : o.answer.error().message;
  const auto has = [&](std::string_view s) { return msg.find(s) != std::string::npos; };
  // An answer whose outputs could not be read, or a refusal that names shared memory (jitembed's and Triton's
  // messages); any other answer (overload, an unknown model, bad rows) is the socket's answer too.
  if (o.fault == attempt_fault::none || has("shared memory") || has("shared_memory") || has("Shared memory")) {
    auto& ep = *a->ep;
    if (has("not registered") || has("Unable to find") || has("unable to find")) {
      // The server lost the region (restarted): register a new one.
      if (ep.arena == a->shm->arena) {
        ep.arena.reset();
        ep.shm = shm_status::pending;
        ep.shm_retry = clock::now();
      }
    } else if (has("do not fit") || has("should be at least")) {
      shm_layouts_[layout_key(*c)].variable = true;
    }
    end_attempt(a);
    ++stats_.shared_memory_fallbacks;
    c->no_shm = true;
    --c->attempts;  // not the request's fault: the same attempt over the socket
    if (c->active.empty()) launch(c, false, d);
    resume_waiting(d);
    return true;
  }
  return false;
}

inline void client_state::setup_shared_memory() {
  if (!opts_.shared_memory.enabled) return;
  struct job {
    std::shared_ptr<endpoint_state> ep;
    endpoint_address addr;
    std::vector<asio::ip::tcp::endpoint> resolved;
  };
  std::vector<job> jobs;
  std::vector<std::pair<endpoint_address, std::string>> drop;
  {
    std::lock_guard lk(mu_);
    if (closed_) return;
    const auto now = clock::now();
    for (const auto& e : endpoints_.all())
      if (e->shm == shm_status::pending && !e->draining && e->shm_retry <= now)
        jobs.push_back({e, e->addr, e->resolved});
    drop.swap(shm_retired_);
  }
  for (auto& [addr, region] : drop) unregister_region(addr, region);
  for (auto& j : jobs) {
    shm_status st = shm_status::unavailable;
    std::shared_ptr<shm_arena> arena;
    if (is_same_host(j.addr, j.resolved)) {
      auto obj = shm_object::create(opts_.shared_memory.pool_bytes);
      if (obj) {
        const std::string region = (*obj)->key().substr(1);
        const auto r = transport_for(j.addr).shared_memory(j.addr, region, (*obj)->key(), (*obj)->size());
        if (r.ok) {
          (*obj)->unlink();  // the server holds it now: nothing is left behind if this process dies
          arena = std::make_shared<shm_arena>(std::move(*obj), region);
          st = shm_status::ready;
        } else if (!r.answered) {
          st = shm_status::pending;  // not reached: again later
        }
      }
    }
    std::lock_guard lk(mu_);
    auto& e = *j.ep;
    if (closed_ || e.draining || e.shm != shm_status::pending) {
      if (arena) shm_retired_.emplace_back(e.addr, arena->region);
      continue;
    }
    e.shm = st;
    e.arena = std::move(arena);
    if (st == shm_status::pending) e.shm_retry = clock::now() + std::chrono::seconds(1);
  }
}

inline void client_state::unregister_region(const endpoint_address& a, const std::string& region) {
  (void)transport_for(a).shared_memory(a, region, {}, 0);
}

}  // namespace jitembed::client::detail
