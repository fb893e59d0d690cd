// Lookup tables of the tokenizer models: a string -> id map with string_view lookups, an open-addressing map of
// 64-bit keys (BPE merges, trie edges), a byte trie with common-prefix search, and a bounded thread-safe word cache.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace jitembed::models::detail {

struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using vocab_map = std::unordered_map<std::string, std::int32_t, string_hash, std::equal_to<>>;

inline std::optional<std::int32_t> find_id(const vocab_map& v, std::string_view s) {
  const auto it = v.find(s);
  if (it == v.end()) return std::nullopt;
  return it->second;
}

// uint64 -> V, linear probing; the all-ones key is reserved (never a valid key here).
template <class V>
class u64_map {
 public:
  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, slot{});
    size_ = 0;
  }
  // Inserts or overwrites (later merges of the same pair win, as the library's HashMap collect does).
  void put(std::uint64_t k, V v) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    slot* s = probe(k);
    if (s->key == kEmpty) ++size_;
    s->key = k;
    s->value = v;
  }
  const V* get(std::uint64_t k) const noexcept {
    if (slots_.empty()) return nullptr;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = mix(k) & mask;; i = (i + 1) & mask) {
      if (slots_[i].key == k) return &slots_[i].value;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }
  std::size_t size() const noexcept { return size_; }

 private:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  struct slot {
    std::uint64_t key = kEmpty;
    V value{};
  };
  static std::size_t mix(std::uint64_t k) noexcept {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return static_cast<std::size_t>(k);
  }
  slot* probe(std::uint64_t k) {
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = mix(k) & mask;; i = (i + 1) & mask)
      if (slots_[i].key == k || slots_[i].key == kEmpty) return &slots_[i];
  }
  void grow() {
    std::vector<slot> old;
    old.swap(slots_);
    reserve(old.size() < 8 ? 16 : old.size());
    for (const auto& s : old)
      if (s.key != kEmpty) put(s.key, s.value);
  }
  std::vector<slot> slots_;
  std::size_t size_ = 0;
};

// A byte trie: insert keys with a value, then walk a text from a position and see every key that prefixes it.
class byte_trie {
 public:
  byte_trie() : values_(1, -1) {}
  void insert(std::string_view key, std::int32_t value) {
    std::uint32_t node = 0;
    for (const char c : key) {
      const std::uint64_t edge = (std::uint64_t{node} << 8) | static_cast<unsigned char>(c);
      if (const std::uint32_t* next = edges_.get(edge)) {
        node = *next;
      } else {
        const auto n = static_cast<std::uint32_t>(values_.size());
        values_.push_back(-1);
        edges_.put(edge, n);
        node = n;
      }
    }
    values_[node] = value;
    first_[static_cast<unsigned char>(key.empty() ? 0 : key[0])] = true;
  }
  // f(length, value) for each key that is a prefix of s, shortest first.
  template <class F>
  void prefixes(std::string_view s, F&& f) const {
    std::uint32_t node = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const std::uint32_t* next = edges_.get((std::uint64_t{node} << 8) | static_cast<unsigned char>(s[i]));
      if (!next) return;
      node = *next;
      if (values_[node] >= 0) f(i + 1, values_[node]);
    }
  }
  bool may_start(unsigned char c) const noexcept { return first_[c]; }

 private:
  u64_map<std::uint32_t> edges_;
  std::vector<std::int32_t> values_;
  std::array<bool, 256> first_{};
};

// Words already tokenized -> their ids. Bounded (entries stop being added at capacity, words of 256 bytes or more
// are not kept, as in the library) and sharded so that threads encoding at once rarely wait on one another.
class word_cache {
 public:
  explicit word_cache(std::size_t capacity = 10000) : per_shard_(capacity / kShards + 1) {}
  static constexpr std::size_t kMaxWord = 256;

  bool get(std::string_view word, std::vector<std::int64_t>& out) const {
    auto& s = shards_[string_hash{}(word) % kShards];
    std::lock_guard lock(s.mu);
    const auto it = s.map.find(word);
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void put(std::string_view word, const std::int64_t* ids, std::size_t n) const {
    if (word.size() >= kMaxWord) return;
    auto& s = shards_[string_hash{}(word) % kShards];
    std::lock_guard lock(s.mu);
    if (s.map.size() >= per_shard_) return;
    s.map.try_emplace(std::string(word), ids, ids + n);
  }

 private:
  static constexpr std::size_t kShards = 16;
  struct shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<std::int32_t>, string_hash, std::equal_to<>> map;
  };
  std::size_t per_shard_;
  mutable std::array<shard, kShards> shards_;
};

}  // namespace jitembed::models::detail
