// The cache-store concept shared by every store (memory, LMDB, Redis, tiered): content-addressed keys to
// immutable value bytes, plus the counters every store keeps. A store failure never fails the caller:
// get() degrades to a miss and put() to a no-op, and both are counted in stats().errors.
#pragma once

#include <array>
#include <atomic>
#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/byte_order.hpp"
#include "jitembed/core/hash.hpp"

namespace jitembed::cache {

// A content address: XXH3-128 of (model, version, preprocessing, content); see cache/key.hpp.
struct cache_key {
  hash128 hash;

  friend constexpr bool operator==(const cache_key&, const cache_key&) noexcept = default;
  std::string to_hex() const { return hash.to_hex(); }
  // 16 bytes, little-endian low word first: the on-disk / on-wire key.
  std::array<std::byte, 16> bytes() const noexcept {
    std::array<std::byte, 16> b{};
    store_le(b.data(), hash.low);
    store_le(b.data() + 8, hash.high);
    return b;
  }
};

struct cache_key_hasher {
  std::size_t operator()(const cache_key& k) const noexcept { return std::hash<hash128>{}(k.hash); }
};

// Value bytes handed out by a store. `bytes` stays valid while `keep_alive` (or a copy) lives: for the
// memory store it shares the stored buffer, for LMDB it holds the read transaction whose mapping the
// bytes point into (zero-copy), for Redis it owns the reply.
struct cached_value {
  bytes_view bytes;
  std::shared_ptr<const void> keep_alive;
};

// Counters of one store; values are snapshots.
struct cache_stats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t puts = 0;
  std::uint64_t evictions = 0;
  std::uint64_t errors = 0;        // failures degraded to a miss / a dropped put
  std::uint64_t bytes_read = 0;    // value bytes returned by hits
  std::uint64_t bytes_written = 0; // value bytes stored by puts
  std::uint64_t entries = 0;       // values held now (where the store knows cheaply; else 0)
  std::uint64_t bytes_held = 0;    // bytes held now (same)
};

// Thread-safe counters a store embeds; snapshot() gives cache_stats.
struct stats_counters {
  std::atomic<std::uint64_t> hits{0}, misses{0}, puts{0}, evictions{0}, errors{0}, bytes_read{0}, bytes_written{0};

  cache_stats snapshot() const noexcept {
    cache_stats s;
    s.hits = hits.load(std::memory_order_relaxed);
    s.misses = misses.load(std::memory_order_relaxed);
    s.puts = puts.load(std::memory_order_relaxed);
    s.evictions = evictions.load(std::memory_order_relaxed);
    s.errors = errors.load(std::memory_order_relaxed);
    s.bytes_read = bytes_read.load(std::memory_order_relaxed);
    s.bytes_written = bytes_written.load(std::memory_order_relaxed);
    return s;
  }
};

// A cache store.
//
// Requirements on S (all members thread-safe):
// - `s.get(k)`: the value for k, or nullopt on a miss or on any store failure (counted as an error).
//   A value whose integrity check fails is a miss and is removed, never returned.
// - `s.multi_get(keys)`: one optional per key, in order (pipelined / batched where the store can).
// - `s.put(k, value)`: stores a copy of value; returns false when it could not (counted as an error or,
//   for a value larger than the store's budget, simply not stored). Values for a key never change
//   (content addressing), so a put of an existing key may be skipped.
// - `s.contains(k)`, `s.erase(k)` (true when something was removed), `s.stats()`.
template <class S>
concept cache_store = requires(S& s, const cache_key& k, bytes_view v, std::span<const cache_key> keys) {
  { s.get(k) } -> std::same_as<std::optional<cached_value>>;
  { s.multi_get(keys) } -> std::same_as<std::vector<std::optional<cached_value>>>;
  { s.put(k, v) } -> std::same_as<bool>;
  { s.contains(k) } -> std::same_as<bool>;
  { s.erase(k) } -> std::same_as<bool>;
  { s.stats() } -> std::same_as<cache_stats>;
};

}  // namespace jitembed::cache
