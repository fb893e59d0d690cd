// Replies of the Redis store, built by hiredis's reader through our reply-object functions: bulk strings
// land, 64-byte aligned after the value header, in chunks recycled through a pool (no malloc/free or page
// faults per value in steady state), and a value's keep_alive shares its chunk.
#pragma once

#include <hiredis/hiredis.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/buffer.hpp"

namespace jitembed::cache::detail {

// Recycles chunk memory (power-of-two sizes kMinChunk..kMaxChunk) between batches, keeping at most
// max_cached_bytes idle. A chunk comes back when the last value in it is released, from any thread.
class chunk_pool : public std::enable_shared_from_this<chunk_pool> {
 public:
  static constexpr std::size_t kMinChunk = std::size_t{4} << 10;
  static constexpr std::size_t kMaxChunk = std::size_t{4} << 20;

  explicit chunk_pool(std::size_t max_cached_bytes) : max_cached_(max_cached_bytes) {}
  ~chunk_pool() {
    for (auto& list : free_)
      for (std::byte* p : list) ::operator delete(p, std::align_val_t{kAlignment});
  }
  chunk_pool(const chunk_pool&) = delete;
  chunk_pool& operator=(const chunk_pool&) = delete;

  // A chunk of at least `size` bytes (64-byte aligned); its actual size is written to `actual`.
  std::shared_ptr<std::byte> take(std::size_t size, std::size_t& actual) {
    if (size > kMaxChunk) {  // one big value: exact size, not pooled
      actual = align_up(size);
      return allocate_shared_aligned(actual);
    }
    actual = std::max(kMinChunk, std::bit_ceil(size));
    const std::size_t cls = class_of(actual);
    std::byte* p = nullptr;
    {
      std::lock_guard lk(mu_);
      if (!free_[cls].empty()) {
        p = free_[cls].back();
        free_[cls].pop_back();
        cached_ -= actual;
      }
    }
    if (!p) p = static_cast<std::byte*>(::operator new(actual, std::align_val_t{kAlignment}));
    return std::shared_ptr<std::byte>(p, returner{shared_from_this(), actual});  // on throw, gives p back
  }

  std::size_t cached_bytes() const {
    std::lock_guard lk(mu_);
    return cached_;
  }

 private:
  static constexpr std::size_t kClasses = 11;  // 4 KiB .. 4 MiB
  static std::size_t class_of(std::size_t pow2) noexcept {
    return static_cast<std::size_t>(std::countr_zero(pow2) - std::countr_zero(kMinChunk));
  }

  struct returner {
    std::shared_ptr<chunk_pool> pool;
    std::size_t size;
    void operator()(std::byte* p) const noexcept { pool->give(p, size); }
  };

  void give(std::byte* p, std::size_t size) noexcept {
    {
      std::lock_guard lk(mu_);
      if (cached_ + size <= max_cached_) {
        try {
          free_[class_of(size)].push_back(p);
          cached_ += size;
          return;
        } catch (...) {  // no room to remember it: free it
        }
      }
    }
    ::operator delete(p, std::align_val_t{kAlignment});
  }

  mutable std::mutex mu_;
  std::vector<std::byte*> free_[kClasses];
  std::size_t cached_ = 0;
  const std::size_t max_cached_;
};

// One reply. STRING: `data` points into a chunk that `owner` keeps alive. STATUS / ERROR: `text`.
struct reply {
  int type = 0;  // REDIS_REPLY_*
  long long integer = 0;
  std::string text;
  bytes_view data;
  jitembed::keep_alive owner;
};

// Collects the replies of one exchange: hiredis's reader calls the functions below with the sink as
// privdata. Objects are returned to hiredis as 1-based indices (hiredis treats them as opaque), so
// the vector may grow freely; array elements are collected too but never looked at.
class reply_sink {
 public:
  static constexpr std::size_t kValueOffset = 16;  // bulk strings are placed so that byte 16 is 64-byte aligned

  reply_sink(chunk_pool& pool, std::size_t expected) : pool_(pool) { objs_.reserve(expected); }

  reply& at_token(void* token) { return objs_[reinterpret_cast<std::uintptr_t>(token) - 1]; }

  void* add(reply&& r) noexcept {
    try {
      objs_.push_back(std::move(r));
      return reinterpret_cast<void*>(static_cast<std::uintptr_t>(objs_.size()));
    } catch (...) {
      return nullptr;  // hiredis reports "Out of memory"
    }
  }

  // Copies a bulk string into the current chunk (a new one when it does not fit).
  void* add_bulk(const char* s, std::size_t len) noexcept {
    try {
      std::size_t off = align_up(used_ + kValueOffset) - kValueOffset;
      if (!chunk_ || off + len > chunk_size_) {
        const std::size_t want = std::max(len + kAlignment, next_chunk_);
        chunk_ = pool_.take(want, chunk_size_);
        next_chunk_ = std::min(chunk_size_ * 2, chunk_pool::kMaxChunk);
        off = kAlignment - kValueOffset;
      }
      std::byte* dst = chunk_.get() + off;
      if (len) std::memcpy(dst, s, len);
      used_ = off + len;
      reply r;
      r.type = REDIS_REPLY_STRING;
      r.data = bytes_view(dst, len);
      r.owner = chunk_;
      return add(std::move(r));
    } catch (...) {
      return nullptr;
    }
  }

  static redisReplyObjectFunctions* functions() noexcept {
    static redisReplyObjectFunctions fns = {&create_string, &create_array, &create_integer, &create_nil, &free_object};
    return &fns;
  }

 private:
  static reply_sink& sink(const redisReadTask* t) noexcept { return *static_cast<reply_sink*>(t->privdata); }

  static void* create_string(const redisReadTask* t, char* s, std::size_t len) {
    if (t->type == REDIS_REPLY_STRING) return sink(t).add_bulk(s, len);
    try {
      reply r;
      r.type = t->type;  // STATUS or ERROR
      r.text.assign(s, len);
      return sink(t).add(std::move(r));
    } catch (...) {
      return nullptr;
    }
  }
  static void* create_array(const redisReadTask* t, int) {
    reply r;
    r.type = REDIS_REPLY_ARRAY;
    return sink(t).add(std::move(r));
  }
  static void* create_integer(const redisReadTask* t, long long v) {
    reply r;
    r.type = REDIS_REPLY_INTEGER;
    r.integer = v;
    return sink(t).add(std::move(r));
  }
  static void* create_nil(const redisReadTask* t) {
    reply r;
    r.type = REDIS_REPLY_NIL;
    return sink(t).add(std::move(r));
  }
  static void free_object(void*) {}  // the sink owns everything

  chunk_pool& pool_;
  std::vector<reply> objs_;
  std::shared_ptr<std::byte> chunk_;
  std::size_t chunk_size_ = 0, used_ = 0;
  std::size_t next_chunk_ = 0;
};

}  // namespace jitembed::cache::detail
