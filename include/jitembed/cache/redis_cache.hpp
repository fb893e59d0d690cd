// redis_cache: the shared cache store on a Redis server (hiredis): pooled connections, pipelined
// multi-get / put_many, TTL, a key prefix per namespace, socket timeouts and a back-off while the server is down.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/cache/detail/redis_store.hpp"
#include "jitembed/cache/redis_options.hpp"
#include "jitembed/cache/store.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/detail/capture.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::cache {

// A cache_store on Redis.
//
// open() checks the options and that the server answers (PING, with AUTH / SELECT when set): a server
// that cannot be reached is an io_error there, not a miss on the first call. The result is a handle shared
// on purpose (docs/api.md rule 2.4): copies use the same connection pool and counters; the pool closes
// with the last copy. A moved-from handle may only be destroyed or assigned to.
//
// Keys: prefix + key.to_hex() (32 lowercase hex digits), readable in redis-cli. Values: a 16-byte header
// ("JERV", u32 version 1, XXH3-64 over the 16 key bytes and the value) followed by the value; a value that
// fails the check is a miss, is deleted, and counts an error.
//
// Reads: hiredis parses replies through our reply-object functions, which place each value 64-byte aligned
// in a chunk recycled through a per-cache pool (so steady-state gets neither malloc per value nor fault in
// pages); a cached_value's bytes point into its chunk and its keep_alive shares the chunk (no further
// copy). Holding a value keeps its chunk (at most twice the batch's bytes, 4 MiB per chunk) from reuse.
//
// Failures never throw out of get / multi_get / put / put_many / contains / erase: they count an error
// (and a miss for lookups) and return nullopt / false. A transport failure (refused, reset, timed out)
// drops the connection and marks the server down for retry_after: meanwhile every call fails at once,
// without touching the network; afterwards connections are reopened lazily (a server that went away after open() degrades to misses). A pooled connection that the
// peer closed (server restart, idle timeout) is retried once on a fresh connection first.
class redis_cache {
 public:
  // invalid_argument for a pool_size of 0 or a negative ttl; io_error (with what the server or the socket
  // said) when the server does not answer PING within connect_timeout / io_timeout.
  static result<redis_cache> open(redis_options opts = {}) {
    return jitembed::core_detail::capture("redis: open", [&]() -> result<redis_cache> {
      JITEMBED_TRY(detail::redis_store::check_options(opts));
      auto s = std::make_shared<detail::redis_store>(std::move(opts));
      if (!s->ping()) {
        const auto& o = s->options();
        const std::string where = o.unix_socket.empty() ? o.host + ":" + std::to_string(o.port) : o.unix_socket;
        return fail(errc::io_error, "redis: open " + where + ": " + s->last_error());
      }
      return redis_cache(std::move(s));
    });
  }

  const redis_options& options() const noexcept { return s_->options(); }
  // The Redis key that holds k's value.
  std::string redis_key(const cache_key& k) const { return s_->redis_key(k); }

  std::optional<cached_value> get(const cache_key& k) noexcept { return s_->get(k); }
  // One pipelined round trip per kMaxPipeline keys; results in key order.
  std::vector<std::optional<cached_value>> multi_get(std::span<const cache_key> keys) noexcept { return s_->multi_get(keys); }
  bool put(const cache_key& k, bytes_view value) noexcept { return s_->put(k, value); }
  // Stores values[i] under keys[i], pipelined; returns how many were stored. Values larger than
  // max_value_bytes are skipped (not an error). Sizes must match (else nothing is stored, one error).
  std::size_t put_many(std::span<const cache_key> keys, std::span<const bytes_view> values) noexcept {
    return s_->put_many(keys, values);
  }
  // EXISTS: true when a value is stored under k (its integrity is checked on get, not here).
  bool contains(const cache_key& k) noexcept { return s_->contains(k); }
  // DEL: true when a value was removed.
  bool erase(const cache_key& k) noexcept { return s_->erase(k); }
  // True when the server answers PING now (does not count hits or misses; a failure counts an error).
  bool ping() noexcept { return s_->ping(); }
  // Lookups count one hit or one miss each; failures (transport, corrupt value, error reply) also count
  // an error. entries / bytes_held are not known cheaply for a namespace and stay 0. Shared by the copies.
  cache_stats stats() const noexcept { return s_->stats(); }
  // The message of the most recent failure ("" if none), for logs.
  std::string last_error() const { return s_->last_error(); }

  static constexpr std::size_t kMaxPipeline = detail::redis_store::kMaxPipeline;
  // Reply memory kept for reuse once the values in it are released (per store).
  static constexpr std::size_t kRecycledBytes = detail::redis_store::kRecycledBytes;

 private:
  explicit redis_cache(std::shared_ptr<detail::redis_store> s) noexcept : s_(std::move(s)) {}
  std::shared_ptr<detail::redis_store> s_;
};

static_assert(cache_store<redis_cache>);

}  // namespace jitembed::cache
