// The Redis store behind the redis_cache handle (cache/redis_cache.hpp): the connection pool, pipelining
// and back-off of one open(), shared by the handle's copies.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/cache/detail/redis_connection.hpp"
#include "jitembed/cache/redis_options.hpp"
#include "jitembed/cache/store.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::cache::detail {

class redis_store {
 public:
  // The options are checked by redis_cache::open (check_options) before a store is made.
  explicit redis_store(redis_options opts) : opts_(std::move(opts)) {
    conn_opts_ = {opts_.host, opts_.port, opts_.unix_socket, opts_.connect_timeout, opts_.io_timeout, opts_.password, opts_.db};
    idle_.reserve(opts_.pool_size);  // so release() never allocates
  }
  redis_store(const redis_store&) = delete;
  redis_store& operator=(const redis_store&) = delete;

  static result<void> check_options(const redis_options& o) {
    if (o.pool_size == 0) return fail(errc::invalid_argument, "redis_options.pool_size: must be at least 1");
    if (o.ttl.count() < 0) return fail(errc::invalid_argument, "redis_options.ttl: must not be negative");
    return {};
  }

  const redis_options& options() const noexcept { return opts_; }

  // The Redis key that holds k's value.
  std::string redis_key(const cache_key& k) const {
    std::string s;
    append_key_name(s, opts_.prefix, k);
    return s;
  }

  std::optional<cached_value> get(const cache_key& k) noexcept {
    auto v = multi_get(std::span<const cache_key>(&k, 1));
    if (v.empty()) return std::nullopt;
    return std::move(v[0]);
  }

  // One pipelined round trip per kMaxPipeline keys; results in key order.
  std::vector<std::optional<cached_value>> multi_get(std::span<const cache_key> keys) noexcept {
    std::vector<std::optional<cached_value>> out;
    try {
      out.resize(keys.size());
    } catch (...) {
      return {};  // cannot even say "miss" per key; a caller asking for a span it cannot hold
    }
    for (std::size_t first = 0; first < keys.size(); first += kMaxPipeline) {
      const auto chunk = keys.subspan(first, std::min(kMaxPipeline, keys.size() - first));
      try {
        get_chunk(chunk, std::span(out).subspan(first, chunk.size()));
      } catch (...) {
        note_failure("redis: multi_get: out of memory");
        for (std::size_t i = first; i < first + chunk.size(); ++i) out[i].reset();
        count_lookup_failures(chunk.size());
      }
    }
    return out;
  }

  bool put(const cache_key& k, bytes_view value) noexcept {
    return put_many(std::span<const cache_key>(&k, 1), std::span<const bytes_view>(&value, 1)) == 1;
  }

  // Stores values[i] under keys[i], pipelined; returns how many were stored. Values larger than
  // max_value_bytes are skipped (not an error). Sizes must match (else nothing is stored, one error).
  std::size_t put_many(std::span<const cache_key> keys, std::span<const bytes_view> values) noexcept {
    if (keys.size() != values.size()) {
      note_failure("redis: put_many: " + std::to_string(keys.size()) + " keys but " + std::to_string(values.size()) + " values");
      counters_.errors.fetch_add(1, std::memory_order_relaxed);
      return 0;
    }
    std::size_t stored = 0;
    for (std::size_t first = 0; first < keys.size(); first += kMaxPipeline) {
      const std::size_t n = std::min(kMaxPipeline, keys.size() - first);
      try {
        stored += put_chunk(keys.subspan(first, n), values.subspan(first, n));
      } catch (...) {
        note_failure("redis: put_many: out of memory");
        counters_.errors.fetch_add(1, std::memory_order_relaxed);
      }
    }
    return stored;
  }

  // EXISTS: true when a value is stored under k (its integrity is checked on get, not here).
  bool contains(const cache_key& k) noexcept { return integer_command("EXISTS", k) > 0; }

  // DEL: true when a value was removed.
  bool erase(const cache_key& k) noexcept { return integer_command("DEL", k) > 0; }

  // True when the server answers PING now (does not count hits or misses; a failure counts an error).
  bool ping() noexcept {
    try {
      resp_batch b;
      b.command({"PING"});
      std::unique_ptr<redis_connection> c;
      std::vector<reply> r;
      if (exchange(b, c, r)) {
        release(std::move(c));
        if (r[0].type == REDIS_REPLY_STATUS) return true;
      }
    } catch (...) {
    }
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return false;
  }

  // Lookups count one hit or one miss each; failures (transport, corrupt value, error reply) also count
  // an error. entries / bytes_held are not known cheaply for a namespace and stay 0.
  cache_stats stats() const noexcept { return counters_.snapshot(); }

  // The message of the most recent failure ("" if none), for logs.
  std::string last_error() const {
    std::lock_guard lk(mu_);
    return last_error_;
  }

  static constexpr std::size_t kMaxPipeline = 512;
  // Reply memory kept for reuse once the values in it are released (per cache).
  static constexpr std::size_t kRecycledBytes = std::size_t{32} << 20;

 private:
  using conn_ptr = std::unique_ptr<redis_connection>;
  using clock = std::chrono::steady_clock;

  // ---- pool ----
  // A connection from the pool (reused = it was idle in the pool), or nullopt with `why` set when the
  // server is marked down, a connect failed, or no connection came free within io_timeout.
  std::optional<std::pair<conn_ptr, bool>> acquire(std::string& why) {
    std::unique_lock lk(mu_);
    const auto deadline = clock::now() + opts_.io_timeout;
    for (;;) {
      const auto now = clock::now();
      if (now < down_until_) {
        why = "redis: " + endpoint_name(conn_opts_) + " marked down for " +
              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(down_until_ - now).count()) +
              " ms more after: " + last_error_;
        return std::nullopt;
      }
      while (!idle_.empty()) {
        conn_ptr c = std::move(idle_.back());
        idle_.pop_back();
        if (c->generation == generation_) return std::pair{std::move(c), true};
        --live_;  // opened before the last failure: drop it
      }
      if (live_ < opts_.pool_size) {
        ++live_;
        const std::uint64_t gen = generation_;
        lk.unlock();
        auto c = redis_connection::open(conn_opts_, *pool_);
        if (!c) {
          why = c.error().message;
          lk.lock();
          --live_;
          mark_down_locked(why);
          cv_.notify_all();
          return std::nullopt;
        }
        (*c)->generation = gen;
        return std::pair{std::move(*c), false};
      }
      if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && idle_.empty() && live_ >= opts_.pool_size) {
        why = "redis: no pooled connection came free within io_timeout (pool_size " + std::to_string(opts_.pool_size) + ")";
        return std::nullopt;
      }
    }
  }

  void release(conn_ptr c) noexcept {
    {
      std::lock_guard lk(mu_);
      if (!c->broken() && c->generation == generation_) {
        idle_.push_back(std::move(c));  // capacity pool_size reserved: does not allocate
      } else {
        --live_;
      }
      cv_.notify_one();
    }
    c.reset();  // outside the lock: closes the socket
  }

  void discard(conn_ptr c, const std::string& why, bool mark_down) noexcept {
    {
      std::lock_guard lk(mu_);
      --live_;
      if (mark_down) mark_down_locked(why);
      else set_last_error_locked(why);
      cv_.notify_all();
    }
    c.reset();
  }

  void mark_down_locked(const std::string& why) noexcept {
    ++generation_;
    down_until_ = clock::now() + opts_.retry_after;
    set_last_error_locked(why);
  }
  void set_last_error_locked(const std::string& why) noexcept {
    try {
      last_error_ = why;
    } catch (...) {
    }
  }
  void note_failure(const std::string& why) noexcept {
    std::lock_guard lk(mu_);
    set_last_error_locked(why);
  }

  // Runs batch b on a pooled connection; on success `conn` holds the connection (the caller releases
  // it) and `replies` one reply per command. A reused connection the peer closed is retried once.
  bool exchange(const resp_batch& b, conn_ptr& conn, std::vector<reply>& replies) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::string why;
      auto got = acquire(why);
      if (!got) {
        note_failure(why);
        return false;
      }
      auto [c, reused] = std::move(*got);
      auto r = c->exchange(b, *pool_);
      if (r) {
        conn = std::move(c);
        replies = std::move(*r);
        return true;
      }
      const bool retry = attempt == 0 && reused && c->peer_closed();
      discard(std::move(c), r.error().message, !retry);
      if (!retry) return false;
    }
    return false;
  }

  static std::string unexpected(const reply& r) {
    return r.type == REDIS_REPLY_ERROR ? r.text : "unexpected reply type " + std::to_string(r.type);
  }

  void count_lookup_failures(std::size_t n) noexcept {
    counters_.misses.fetch_add(n, std::memory_order_relaxed);
    counters_.errors.fetch_add(n, std::memory_order_relaxed);
  }

  // ---- operations ----
  void get_chunk(std::span<const cache_key> keys, std::span<std::optional<cached_value>> out) {
    resp_batch b;
    for (const auto& k : keys) b.key_command("GET", opts_.prefix, k);
    conn_ptr c;
    std::vector<reply> replies;
    if (!exchange(b, c, replies)) {
      count_lookup_failures(keys.size());
      return;
    }
    resp_batch dels;  // corrupt values, removed in one more round trip
    std::string why;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      reply& r = replies[i];
      if (r.type == REDIS_REPLY_NIL) {
        counters_.misses.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (r.type != REDIS_REPLY_STRING) {
        why = "redis: GET " + redis_key(keys[i]) + ": " + unexpected(r);
        count_lookup_failures(1);
        continue;
      }
      auto v = check_value(c->hasher(), keys[i], r.data, opts_.max_value_bytes);
      if (!v) {
        why = "redis: GET " + redis_key(keys[i]) + ": " + v.error().message;
        count_lookup_failures(1);
        if (v.code() != errc::limit_exceeded) dels.key_command("DEL", opts_.prefix, keys[i]);  // too big is not corrupt
        continue;
      }
      counters_.hits.fetch_add(1, std::memory_order_relaxed);
      counters_.bytes_read.fetch_add(v->size(), std::memory_order_relaxed);
      const bytes_view value = *v;
      out[i] = cached_value{value, std::move(r.owner)};
    }
    if (!why.empty()) note_failure(why);
    if (!dels.empty()) {
      if (auto r = c->exchange(dels, *pool_); !r) {
        discard(std::move(c), r.error().message, true);
        return;
      }
    }
    release(std::move(c));
  }

  std::size_t put_chunk(std::span<const cache_key> keys, std::span<const bytes_view> values) {
    resp_batch b;
    std::vector<std::size_t> sent;  // indices of values sent (small enough)
    std::vector<std::array<std::byte, kRedisHeaderSize>> headers;
    headers.reserve(keys.size());
    sent.reserve(keys.size());
    conn_ptr c;
    std::vector<reply> replies;
    // Hash before taking a connection, so none is held while hashing large values.
    thread_local value_hasher h;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (values[i].size() > opts_.max_value_bytes) continue;
      headers.push_back(make_value_header(h, keys[i], values[i]));
      sent.push_back(i);
    }
    if (sent.empty()) return 0;
    const std::int64_t ttl = opts_.ttl.count();
    for (std::size_t j = 0; j < sent.size(); ++j) b.set(opts_.prefix, keys[sent[j]], headers[j], values[sent[j]], ttl);
    if (!exchange(b, c, replies)) {
      counters_.errors.fetch_add(sent.size(), std::memory_order_relaxed);
      return 0;
    }
    release(std::move(c));
    std::size_t stored = 0;
    std::string why;
    for (std::size_t j = 0; j < sent.size(); ++j) {
      const auto& r = replies[j];
      if (r.type == REDIS_REPLY_STATUS) {
        ++stored;
        counters_.puts.fetch_add(1, std::memory_order_relaxed);
        counters_.bytes_written.fetch_add(values[sent[j]].size(), std::memory_order_relaxed);
      } else {
        why = "redis: SET " + redis_key(keys[sent[j]]) + ": " + unexpected(r);
        counters_.errors.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (!why.empty()) note_failure(why);
    return stored;
  }

  // EXISTS / DEL: the integer reply, or -1 on failure (counted).
  long long integer_command(std::string_view verb, const cache_key& k) noexcept {
    try {
      resp_batch b;
      b.key_command(verb, opts_.prefix, k);
      conn_ptr c;
      std::vector<reply> r;
      if (!exchange(b, c, r)) {
        counters_.errors.fetch_add(1, std::memory_order_relaxed);
        return -1;
      }
      release(std::move(c));
      if (r[0].type != REDIS_REPLY_INTEGER) {
        note_failure("redis: " + std::string(verb) + " " + redis_key(k) + ": " + unexpected(r[0]));
        counters_.errors.fetch_add(1, std::memory_order_relaxed);
        return -1;
      }
      return r[0].integer;
    } catch (...) {
      counters_.errors.fetch_add(1, std::memory_order_relaxed);
      return -1;
    }
  }

  redis_options opts_;
  connect_options conn_opts_;
  std::shared_ptr<chunk_pool> pool_ = std::make_shared<chunk_pool>(kRecycledBytes);
  stats_counters counters_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<conn_ptr> idle_;    // open, unused connections
  std::size_t live_ = 0;          // connections open or being opened (idle + checked out)
  std::uint64_t generation_ = 0;  // bumped when the server is marked down: older connections are dropped
  clock::time_point down_until_{};
  std::string last_error_;
};

static_assert(cache_store<redis_store>);

}  // namespace jitembed::cache::detail
