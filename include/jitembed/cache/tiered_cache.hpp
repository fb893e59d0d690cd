// tiered_cache: fastest-first tiers of cache stores (e.g. memory -> LMDB -> Redis) with promotion on hit, built
// from any_store handles (cache/any_store.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "jitembed/cache/any_store.hpp"
#include "jitembed/cache/store.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::cache {

struct tiered_options {
  bool promote_on_hit = true;  // a hit in tier i is put into tiers 0..i-1
  // put() writes to every tier (write-through) when true, else only to tier 0 (lower tiers then fill by
  // other writers, e.g. a shared Redis another job populates).
  bool write_through = true;
};

// Tiers, fastest first. get() asks them in order and promotes a hit into every faster tier; multi_get()
// sends each tier one batch of the keys still missing; put() writes through (see tiered_options);
// contains() is true if any tier has the key; erase() erases from all. A tier that fails (its get is a
// miss and counts an error, or it throws) never fails the call: the call goes on with the next tier, and
// exceptions are counted in this cache's own `errors`.
//
// stats(): hits / misses / bytes_read of the cache as a whole (a hit in any tier is one hit), puts /
// bytes_written of put() calls that stored in at least one tier, evictions and errors summed over the
// tiers plus this cache's own errors, entries / bytes_held left 0 (values are in several tiers); per-tier
// counters come from tier_stats(). `promotions` counts values put into faster tiers.
class tiered_cache {
 public:
  tiered_cache() : s_(std::make_unique<state>()) {}
  // Empty handles among `tiers` are left out (an empty any_store is no cache), so this cannot fail.
  explicit tiered_cache(std::vector<any_store> tiers, tiered_options opt = {}) : s_(std::make_unique<state>()) {
    s_->tiers = std::move(tiers);
    s_->opt = opt;
    std::erase_if(s_->tiers, [](const any_store& t) { return !t; });
  }
  // A movable value (docs/api.md rule 2.3): the tiers and counters live behind a pointer, so a move keeps
  // them (tier(i) references stay valid); a moved-from cache may only be destroyed or assigned to.
  tiered_cache(tiered_cache&&) noexcept = default;
  tiered_cache& operator=(tiered_cache&&) noexcept = default;

  std::size_t tier_count() const noexcept { return s_->tiers.size(); }
  any_store& tier(std::size_t i) { return s_->tiers.at(i); }

  std::optional<cached_value> get(const cache_key& k) {
    for (std::size_t i = 0; i < s_->tiers.size(); ++i) {
      std::optional<cached_value> v;
      try {
        v = s_->tiers[i].get(k);
      } catch (...) {
        s_->errors.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (!v) continue;
      promote(k, v->bytes, i);
      s_->counters.hits.fetch_add(1, std::memory_order_relaxed);
      s_->counters.bytes_read.fetch_add(v->bytes.size(), std::memory_order_relaxed);
      return v;
    }
    s_->counters.misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }

  std::vector<std::optional<cached_value>> multi_get(std::span<const cache_key> keys) {
    std::vector<std::optional<cached_value>> out(keys.size());
    std::vector<std::size_t> missing(keys.size());  // indices into keys still missing
    for (std::size_t j = 0; j < keys.size(); ++j) missing[j] = j;
    std::vector<cache_key> batch;
    for (std::size_t i = 0; i < s_->tiers.size() && !missing.empty(); ++i) {
      batch.clear();
      for (std::size_t j : missing) batch.push_back(keys[j]);
      std::vector<std::optional<cached_value>> got;
      try {
        got = s_->tiers[i].multi_get(batch);
      } catch (...) {
        s_->errors.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (got.size() != batch.size()) {  // a broken tier: treat the whole batch as missed
        s_->errors.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      std::vector<std::size_t> still;
      for (std::size_t b = 0; b < batch.size(); ++b) {
        if (!got[b]) {
          still.push_back(missing[b]);
          continue;
        }
        promote(batch[b], got[b]->bytes, i);
        s_->counters.hits.fetch_add(1, std::memory_order_relaxed);
        s_->counters.bytes_read.fetch_add(got[b]->bytes.size(), std::memory_order_relaxed);
        out[missing[b]] = std::move(got[b]);
      }
      missing.swap(still);
    }
    s_->counters.misses.fetch_add(missing.size(), std::memory_order_relaxed);
    return out;
  }

  bool put(const cache_key& k, bytes_view v) {
    bool stored = false;
    const std::size_t n = s_->opt.write_through ? s_->tiers.size() : std::min<std::size_t>(s_->tiers.size(), 1);
    for (std::size_t i = 0; i < n; ++i) stored |= guarded([&] { return s_->tiers[i].put(k, v); });
    if (stored) {
      s_->counters.puts.fetch_add(1, std::memory_order_relaxed);
      s_->counters.bytes_written.fetch_add(v.size(), std::memory_order_relaxed);
    }
    return stored;
  }

  bool contains(const cache_key& k) {
    for (auto& t : s_->tiers)
      if (guarded([&] { return t.contains(k); })) return true;
    return false;
  }

  bool erase(const cache_key& k) {
    bool any = false;
    for (auto& t : s_->tiers) any |= guarded([&] { return t.erase(k); });
    return any;
  }

  cache_stats stats() const {
    cache_stats s = s_->counters.snapshot();
    s.errors = s_->errors.load(std::memory_order_relaxed);
    for (const auto& t : s_->tiers) {
      try {
        const cache_stats ts = t.stats();
        s.errors += ts.errors;
        s.evictions += ts.evictions;
      } catch (...) {
        ++s.errors;
      }
    }
    return s;
  }

  std::vector<cache_stats> tier_stats() const {
    std::vector<cache_stats> out;
    out.reserve(s_->tiers.size());
    for (const auto& t : s_->tiers) {
      try {
        out.push_back(t.stats());
      } catch (...) {
        out.emplace_back();
      }
    }
    return out;
  }

  std::uint64_t promotions() const noexcept { return s_->promotions.load(std::memory_order_relaxed); }

 private:
  template <class F>
  bool guarded(F&& f) noexcept {
    try {
      return f();
    } catch (...) {
      s_->errors.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  }

  void promote(const cache_key& k, bytes_view v, std::size_t hit_tier) {
    if (!s_->opt.promote_on_hit) return;
    for (std::size_t i = 0; i < hit_tier; ++i)
      if (guarded([&] { return s_->tiers[i].put(k, v); })) s_->promotions.fetch_add(1, std::memory_order_relaxed);
  }

  struct state {
    std::vector<any_store> tiers;
    tiered_options opt{};
    stats_counters counters;  // errors unused: see errors
    std::atomic<std::uint64_t> errors{0};
    std::atomic<std::uint64_t> promotions{0};
  };
  std::unique_ptr<state> s_;
};

static_assert(cache_store<tiered_cache>);

}  // namespace jitembed::cache
