// jit_train_demo: per-epoch cache hit rates. The loader prefetches across epoch boundaries (even past the
// last epoch of the run), and with --tp the ranks share one cache, so its counters read when an epoch ends
// hold lookups of other epochs. This store wraps the real one and logs every lookup (key, hit) in order.
// Each (sample, model) is looked up once per epoch: a key that m samples share (m > 1 only for identical
// content, e.g. the same caption twice) is looked up m times per epoch, so its lookups n·m .. n·m + m − 1
// belong to epoch n. m is counted in the first epoch's lookups (the first L₁ entries of the log, L₁ = the
// embeddings the trainer received in epoch 1); lookups past the last epoch are left out.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jitembed/cache/tiered_cache.hpp"

namespace jit_train_demo {

using namespace jitembed;

// A cache_store that forwards to `inner` and records (key, hit) per lookup. Copies share the log.
class lookup_log {
 public:
  explicit lookup_log(cache::any_store inner) : s_(std::make_shared<state>(std::move(inner))) {}

  std::optional<cache::cached_value> get(const cache::cache_key& k) {
    auto v = s_->inner.get(k);
    std::lock_guard lock(s_->mu);
    s_->log.push_back({k, v.has_value() ? std::uint8_t{1} : std::uint8_t{0}});
    return v;
  }
  std::vector<std::optional<cache::cached_value>> multi_get(std::span<const cache::cache_key> keys) {
    auto v = s_->inner.multi_get(keys);
    std::lock_guard lock(s_->mu);
    for (std::size_t i = 0; i < v.size() && i < keys.size(); ++i)
      s_->log.push_back({keys[i], v[i].has_value() ? std::uint8_t{1} : std::uint8_t{0}});
    return v;
  }
  bool put(const cache::cache_key& k, bytes_view v) { return s_->inner.put(k, v); }
  bool contains(const cache::cache_key& k) { return s_->inner.contains(k); }
  bool erase(const cache::cache_key& k) { return s_->inner.erase(k); }
  cache::cache_stats stats() const { return s_->inner.stats(); }

  // Hits and lookups per epoch of a run of `epochs` epochs whose first epoch made `first_epoch_lookups`.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> per_epoch(std::size_t epochs, std::uint64_t first_epoch_lookups) const {
    std::lock_guard lock(s_->mu);
    std::unordered_map<cache::cache_key, std::uint64_t, cache::cache_key_hasher> share, seen;
    for (std::size_t i = 0; i < s_->log.size() && i < first_epoch_lookups; ++i) ++share[s_->log[i].first];
    std::vector<std::pair<std::uint64_t, std::uint64_t>> out(epochs);
    for (const auto& [k, hit] : s_->log) {
      const auto it = share.find(k);
      const std::uint64_t m = it == share.end() ? 1 : it->second;
      const auto e = seen[k]++ / m;
      if (e >= epochs) continue;
      out[e].first += hit;
      out[e].second += 1;
    }
    return out;
  }

 private:
  struct state {
    explicit state(cache::any_store s) : inner(std::move(s)) {}
    cache::any_store inner;
    mutable std::mutex mu;
    std::vector<std::pair<cache::cache_key, std::uint8_t>> log;
  };
  std::shared_ptr<state> s_;
};

static_assert(cache::cache_store<lookup_log>);

}  // namespace jit_train_demo
