// memory_cache: an in-process, thread-safe LRU store with a byte budget, sharded by key hash so threads
// rarely share a lock. get() is a refcount bump: values live in immutable shared buffers.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "jitembed/cache/detail/common.hpp"
#include "jitembed/cache/store.hpp"
#include "jitembed/core/buffer.hpp"

namespace jitembed::cache {

struct memory_cache_options {
  std::size_t byte_budget = std::size_t{1} << 30;  // value bytes held at most, split evenly over the shards
  std::size_t shards = 16;                         // rounded up to a power of two (at least 1)
};

// Model of cache_store. Each shard is a hash map whose nodes form an LRU list, under its own mutex; the
// shard of a key comes from its hash. The budget counts value bytes (not the ~100 bytes of bookkeeping
// per entry): a shard holds at most byte_budget / shards, evicting its least recently used values to make
// room; a value larger than a shard's budget is not stored (put returns false). A value handed out by
// get() stays valid while its cached_value lives, even after it is evicted or erased.
class memory_cache {
 public:
  explicit memory_cache(const memory_cache_options& opt = {}) : memory_cache(opt.byte_budget, opt.shards) {}
  explicit memory_cache(std::size_t byte_budget, std::size_t shards = 16)
      : shard_count_(std::bit_ceil(std::max<std::size_t>(shards, 1))),
        mask_(shard_count_ - 1),
        shard_budget_(byte_budget / shard_count_),
        shards_(std::make_unique<shard[]>(shard_count_)) {}

  memory_cache(const memory_cache&) = delete;
  memory_cache& operator=(const memory_cache&) = delete;
  // Movable (the shards live behind a pointer); a moved-from cache may only be destroyed or assigned to.
  memory_cache(memory_cache&&) noexcept = default;
  memory_cache& operator=(memory_cache&&) noexcept = default;

  std::optional<cached_value> get(const cache_key& k) {
    shard& s = shard_of(k);
    std::lock_guard lock(s.mu);
    auto it = s.map.find(k);
    if (it == s.map.end()) {
      ++s.misses;
      return std::nullopt;
    }
    node& e = it->second;
    s.touch(&e);
    ++s.hits;
    s.bytes_read += e.size;
    return cached_value{bytes_view(e.data.get(), e.size), e.data};
  }

  std::vector<std::optional<cached_value>> multi_get(std::span<const cache_key> keys) {
    std::vector<std::optional<cached_value>> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(get(k));
    return out;
  }

  // Copies value into a new 64-byte aligned buffer (outside the lock) and inserts it, evicting LRU values
  // of the shard as needed. An existing key is only marked as recently used (values never change).
  bool put(const cache_key& k, bytes_view value) {
    shard& s = shard_of(k);
    if (value.size() > shard_budget_) return false;
    {
      std::lock_guard lock(s.mu);
      if (auto it = s.map.find(k); it != s.map.end()) {
        s.touch(&it->second);
        return true;
      }
    }
    std::shared_ptr<const std::byte> data;
    try {
      auto buf = allocate_shared_aligned(value.size());
      if (!value.empty()) std::memcpy(buf.get(), value.data(), value.size());
      data = std::move(buf);
      std::lock_guard lock(s.mu);
      auto [it, inserted] = s.map.try_emplace(k);
      if (!inserted) {  // another thread put it meanwhile
        s.touch(&it->second);
        return true;
      }
      while (s.bytes + value.size() > shard_budget_ && s.tail) {
        node* victim = s.tail;
        s.unlink(victim);
        s.bytes -= victim->size;
        ++s.evictions;
        const cache_key vk = victim->key;
        s.map.erase(vk);
      }
      node& e = it->second;
      e.key = k;
      e.data = std::move(data);
      e.size = value.size();
      s.push_front(&e);
      s.bytes += value.size();
      ++s.puts;
      s.bytes_written += value.size();
      return true;
    } catch (const std::bad_alloc&) {
      std::lock_guard lock(s.mu);
      ++s.errors;
      return false;
    }
  }

  bool contains(const cache_key& k) {
    shard& s = shard_of(k);
    std::lock_guard lock(s.mu);
    return s.map.find(k) != s.map.end();
  }

  bool erase(const cache_key& k) {
    shard& s = shard_of(k);
    std::shared_ptr<const std::byte> dropped;  // released after unlocking
    std::lock_guard lock(s.mu);
    auto it = s.map.find(k);
    if (it == s.map.end()) return false;
    s.unlink(&it->second);
    s.bytes -= it->second.size;
    dropped = std::move(it->second.data);
    s.map.erase(it);
    return true;
  }

  // Drops every value (holders of cached_values keep theirs). Not counted as evictions.
  void clear() {
    for (std::size_t i = 0; i < shard_count_; ++i) {
      shard& s = shards_[i];
      decltype(s.map) gone;  // destroyed after unlocking
      std::lock_guard lock(s.mu);
      gone.swap(s.map);
      s.head = s.tail = nullptr;
      s.bytes = 0;
    }
  }

  cache_stats stats() const {
    cache_stats t;
    for (std::size_t i = 0; i < shard_count_; ++i) {
      const shard& s = shards_[i];
      std::lock_guard lock(s.mu);
      t.hits += s.hits;
      t.misses += s.misses;
      t.puts += s.puts;
      t.evictions += s.evictions;
      t.errors += s.errors;
      t.bytes_read += s.bytes_read;
      t.bytes_written += s.bytes_written;
      t.entries += s.map.size();
      t.bytes_held += s.bytes;
    }
    return t;
  }

  std::size_t shard_count() const noexcept { return shard_count_; }
  std::size_t shard_budget() const noexcept { return shard_budget_; }
  std::size_t byte_budget() const noexcept { return shard_budget_ * shard_count_; }
  // The shard a key lives in (tests use it to fill one shard).
  std::size_t shard_index(const cache_key& k) const noexcept {
    return static_cast<std::size_t>(k.hash.high >> 32) & mask_;
  }

 private:
  // An entry lives in its map node (stable address) and is linked into the shard's LRU list in place:
  // a hit touches one node, not a map node plus a list node.
  struct node {
    cache_key key;
    std::shared_ptr<const std::byte> data;
    std::size_t size = 0;
    node* prev = nullptr;  // towards the most recently used
    node* next = nullptr;
  };
  // Counters live in the shard, under its mutex: no shared atomic cache line between threads.
  struct alignas(64) shard {
    mutable detail::adaptive_mutex mu;
    std::unordered_map<cache_key, node, cache_key_hasher> map;
    node* head = nullptr;  // most recently used
    node* tail = nullptr;  // least recently used
    std::size_t bytes = 0;
    std::uint64_t hits = 0, misses = 0, puts = 0, evictions = 0, errors = 0, bytes_read = 0, bytes_written = 0;

    void unlink(node* n) noexcept {
      (n->prev ? n->prev->next : head) = n->next;
      (n->next ? n->next->prev : tail) = n->prev;
      n->prev = n->next = nullptr;
    }
    void push_front(node* n) noexcept {
      n->prev = nullptr;
      n->next = head;
      (head ? head->prev : tail) = n;
      head = n;
    }
    void touch(node* n) noexcept {
      if (head == n) return;
      unlink(n);
      push_front(n);
    }
  };

  shard& shard_of(const cache_key& k) noexcept { return shards_[shard_index(k)]; }

  std::size_t shard_count_;
  std::size_t mask_;
  std::size_t shard_budget_;
  std::unique_ptr<shard[]> shards_;
};

static_assert(cache_store<memory_cache>);

}  // namespace jitembed::cache
