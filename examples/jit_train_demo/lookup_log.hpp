// jit_train_demo: per-epoch cache hit rates. The loader prefetches across the epoch boundary, so its
// cumulative counters read when an epoch ends already hold some of the next epoch's lookups. This store
// wraps the real one and logs every lookup's outcome in order; the trainer knows how many lookups each
// epoch made (one per embedding it received), and splits the log by those counts.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "jitembed/cache/tiered_cache.hpp"

namespace jit_train_demo {

using namespace jitembed;

// A cache_store that forwards to `inner` and records hit (1) / miss (0) per lookup. Copies share the log.
class lookup_log {
 public:
  explicit lookup_log(cache::any_store inner) : s_(std::make_shared<state>(std::move(inner))) {}

  std::optional<cache::cached_value> get(const cache::cache_key& k) {
    auto v = s_->inner.get(k);
    std::lock_guard lock(s_->mu);
    s_->log.push_back(v.has_value() ? 1 : 0);
    return v;
  }
  std::vector<std::optional<cache::cached_value>> multi_get(std::span<const cache::cache_key> keys) {
    auto v = s_->inner.multi_get(keys);
    std::lock_guard lock(s_->mu);
    for (const auto& x : v) s_->log.push_back(x.has_value() ? 1 : 0);
    return v;
  }
  bool put(const cache::cache_key& k, bytes_view v) { return s_->inner.put(k, v); }
  bool contains(const cache::cache_key& k) { return s_->inner.contains(k); }
  bool erase(const cache::cache_key& k) { return s_->inner.erase(k); }
  cache::cache_stats stats() const { return s_->inner.stats(); }

  // Hits and lookups of consecutive slices of the log, `counts[e]` lookups each (the last slice takes
  // whatever is left over).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> split(std::span<const std::uint64_t> counts) const {
    std::lock_guard lock(s_->mu);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
    std::size_t at = 0;
    for (std::size_t e = 0; e < counts.size(); ++e) {
      const std::size_t end = e + 1 == counts.size() ? s_->log.size() : std::min(s_->log.size(), at + counts[e]);
      std::uint64_t hits = 0;
      for (std::size_t i = at; i < end; ++i) hits += s_->log[i];
      out.push_back({hits, end - at});
      at = end;
    }
    return out;
  }

 private:
  struct state {
    explicit state(cache::any_store s) : inner(std::move(s)) {}
    cache::any_store inner;
    mutable std::mutex mu;
    std::vector<std::uint8_t> log;
  };
  std::shared_ptr<state> s_;
};

static_assert(cache::cache_store<lookup_log>);

}  // namespace jit_train_demo
