// The client's shared-memory manager (the object and its spans: client_shm.hpp): a region per same-host
// endpoint, each attempt's span, the models' output sizes. Called with the engine's lock held, but setup().
#pragma once

#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/client/detail/call_table.hpp"
#include "jitembed/client/detail/client_shm.hpp"
#include "jitembed/client/detail/endpoint_set.hpp"
#include "jitembed/client/detail/transport.hpp"

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

class shm_manager {
 public:
  using region = std::pair<endpoint_address, std::string>;  // a region registered with an endpoint

  explicit shm_manager(const shared_memory_options& o) : opts_(o) {}

  // The attempt's span of its endpoint's region, its rows written there (true), when the endpoint has one and
  // the model's output sizes are known; otherwise the attempt uses the socket.
  bool plan(remote_call& c, remote_attempt& a) {
    auto& ep = *a.ep;
    if (c.no_shm || ep.shm != shm_status::ready || !ep.arena) return false;
    const auto it = layouts_.find(layout_key(c));
    if (it == layouts_.end() || it->second.variable) return false;
    const auto& layout = it->second.outputs;
    std::vector<const shm_output_layout*> outs;
    if (c.outputs.empty()) {
      for (const auto& o : layout) outs.push_back(&o);
    } else {
      for (const auto& name : c.outputs) {
        const auto o = std::find_if(layout.begin(), layout.end(), [&](const auto& l) { return l.name == name; });
        if (o == layout.end()) return false;  // not seen yet: this time over the socket
        outs.push_back(&*o);
      }
    }
    if (outs.empty()) return false;
    const auto align = [](std::size_t n) { return shm_spans::round(n); };
    const std::size_t in = c.rows->size();
    std::size_t total = align(in);
    for (const auto* o : outs) total += align(o->row_bytes * c.n_rows);
    if (total < opts_.min_bytes) return false;
    auto& arena = *ep.arena;
    const auto off = arena.spans.allocate(total, clock::now());
    if (!off) return false;  // the pool is full: the socket
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
      return false;
    }
    a.shm = std::move(u);
    return true;
  }

  // Frees the attempt's span (answered), or quarantines it until the server cannot write into it any more.
  // Once (end_attempt). `a.shm` stays: a transport may be decoding the answer from it without the lock.
  void end(remote_attempt& a) {
    if (!a.shm) return;
    auto& u = *a.shm;
    if (u.answered) {
      u.arena->spans.release(u.offset, u.size);
    } else {  // the server may still write into it: not before the deadline it was given, plus a margin
      u.arena->spans.quarantine(u.offset, u.size, std::max(a.call->deadline, clock::now()) + opts_.quarantine);
    }
  }

  // Remembers the bytes per row of each output of a model's answer.
  void learn(const remote_call& c, const embed_result& r) {
    if (!opts_.enabled || c.n_rows == 0) return;
    auto& layout = layouts_[layout_key(c)];
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

  // Whether a shared-memory attempt's answer is a refusal of its shared memory, to be resent over the socket:
  // an answer whose outputs could not be read, or a refusal that names shared memory (jitembed's and Triton's
  // messages); any other answer (overload, an unknown model, bad rows) is the socket's answer too. A region the
  // server lost (restarted) is registered anew; a model whose outputs do not fit goes over the socket.
  bool refused(const remote_attempt& a, const attempt_outcome& o) {
    if (!a.shm || a.call->done) return false;
    if (o.fault == attempt_fault::none && o.answer) return false;
    const std::string msg = o.answer ? std::string() : o.answer.error().message;
    const auto has = [&](std::string_view s) { return msg.find(s) != std::string::npos; };
    if (o.fault != attempt_fault::none && !has("shared memory") && !has("shared_memory") && !has("Shared memory"))
      return false;
    auto& ep = *a.ep;
    if (has("not registered") || has("Unable to find") || has("unable to find")) {
      if (ep.arena == a.shm->arena) {
        ep.arena.reset();
        ep.shm = shm_status::pending;
        ep.shm_retry = clock::now();
      }
    } else if (has("do not fit") || has("should be at least")) {
      layouts_[layout_key(*a.call)].variable = true;
    }
    return true;
  }

  // The watcher: registers a region with each same-host endpoint that has none yet (off `owner`'s lock), and
  // unregisters the regions of endpoints gone.
  void setup(attempt_events& owner, const endpoint_set& eps, const transport_set& via) {
    if (!opts_.enabled) return;
    std::vector<endpoint_ptr> jobs;  // their addresses do not change: read off the lock
    std::vector<region> drop;
    {
      std::lock_guard lk(owner.mutex());
      if (owner.closed()) return;
      const auto now = clock::now();
      for (const auto& e : eps.all())
        if (e->shm == shm_status::pending && !e->draining && e->shm_retry <= now) jobs.push_back(e);
      drop.swap(retired_);
    }
    for (auto& [addr, region] : drop) unregister(via(addr), addr, region);
    for (auto& j : jobs) {
      shm_status st = shm_status::unavailable;
      std::shared_ptr<shm_arena> arena;
      if (is_same_host(j->addr, j->resolved)) {
        auto obj = shm_object::create(opts_.pool_bytes);
        if (obj) {
          const std::string region = (*obj)->key().substr(1);
          const auto r = via(j->addr).shared_memory(j->addr, region, (*obj)->key(), (*obj)->size());
          if (r.ok) {
            (*obj)->unlink();  // the server holds it now: nothing is left behind if this process dies
            arena = std::make_shared<shm_arena>(std::move(*obj), region);
            st = shm_status::ready;
          } else if (!r.answered) {
            st = shm_status::pending;  // not reached: again later
          }
        }
      }
      std::lock_guard lk(owner.mutex());
      auto& e = *j;
      if (owner.closed() || e.draining || e.shm != shm_status::pending) {
        if (arena) retired_.emplace_back(e.addr, arena->region);
        continue;
      }
      e.shm = st;
      e.arena = std::move(arena);
      if (st == shm_status::pending) e.shm_retry = clock::now() + std::chrono::seconds(1);
    }
  }

  // A region to unregister (its endpoint left the set), and all of them taken (close()).
  void retire(const endpoint_address& a, const std::string& r) { retired_.emplace_back(a, r); }
  std::vector<region> take_retired() { return std::exchange(retired_, {}); }
  static void unregister(transport& via, const endpoint_address& a, const std::string& r) {
    (void)via.shared_memory(a, r, {}, 0);
  }

 private:
  static std::string layout_key(const remote_call& c) { return c.model + '\n' + c.version; }

  shared_memory_options opts_;
  std::map<std::string, shm_model_layout> layouts_;  // layout_key -> outputs' sizes
  std::vector<region> retired_;                      // regions to unregister (watcher)
};

}  // namespace jitembed::client::detail
