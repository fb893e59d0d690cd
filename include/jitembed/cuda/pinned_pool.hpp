// A pool of pinned host buffers in power-of-two size classes: acquire() hands out a tensor whose storage
// returns to the pool (not to cudaFreeHost) when its last reference goes. cudaHostAlloc is slow (it maps
// pages for the device), so loaders recycle staging buffers instead of allocating one per batch.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "jitembed/core/tensor.hpp"
#include "jitembed/cuda/buffer.hpp"

namespace jitembed::cuda {

namespace detail {

// The free lists behind pinned_pool; buffers handed out hold it weakly, so they may outlive every handle.
class pinned_pool_state : public std::enable_shared_from_this<pinned_pool_state> {
 public:
  explicit pinned_pool_state(std::size_t max_cached) noexcept : max_cached_(max_cached) {}

  tensor acquire(const shape& s, dtype t) {
    const auto n = static_cast<std::size_t>(checked_nbytes(s.span(), t).value());
    const std::size_t cls = std::bit_ceil(std::max<std::size_t>(n, 4096));
    std::unique_ptr<pinned_buffer> buf;
    {
      std::lock_guard lock(mu_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        buf = std::move(it->second.back());
        it->second.pop_back();
        cached_bytes_ -= cls;
        ++hits_;
      }
    }
    if (!buf) buf = std::make_unique<pinned_buffer>(pinned_buffer::create(cls).value());
    void* p = buf->data();
    std::weak_ptr<pinned_pool_state> weak = weak_from_this();
    std::shared_ptr<pinned_buffer> owner(buf.release(), [weak](pinned_buffer* b) {
      if (auto pool = weak.lock()) {
        pool->release(std::unique_ptr<pinned_buffer>(b));
      } else {
        delete b;
      }
    });
    return tensor::wrap(std::move(owner), tensor_view(p, t, s));
  }

  std::size_t cached_bytes() const {
    std::lock_guard lock(mu_);
    return cached_bytes_;
  }
  std::size_t hits() const {
    std::lock_guard lock(mu_);
    return hits_;
  }

 private:
  void release(std::unique_ptr<pinned_buffer> b) {
    std::lock_guard lock(mu_);
    if (cached_bytes_ + b->size() > max_cached_) return;  // freed by unique_ptr
    cached_bytes_ += b->size();
    free_[b->size()].push_back(std::move(b));
  }

  mutable std::mutex mu_;
  std::map<std::size_t, std::vector<std::unique_ptr<pinned_buffer>>> free_;
  std::size_t cached_bytes_ = 0;
  std::size_t hits_ = 0;
  std::size_t max_cached_;
};

}  // namespace detail

// A handle shared on purpose (docs/api.md rule 2.4): copies refer to the same pool, so every loader worker
// can hold one. Construction cannot fail (nothing is allocated until acquire()); the free lists live while
// a copy or a buffer from the pool does.
class pinned_pool {
 public:
  // max_cached_bytes bounds what idle buffers may hold; beyond it released buffers are freed.
  explicit pinned_pool(std::size_t max_cached_bytes = std::size_t{1} << 30)
      : s_(std::make_shared<detail::pinned_pool_state>(max_cached_bytes)) {}

  // A CPU tensor in pinned memory (device cpu, usable with copy_async to a CUDA tensor). Throws
  // jitembed::error for a shape whose size overflows, or when cudaHostAlloc fails.
  tensor acquire(const shape& s, dtype t) const { return s_->acquire(s, t); }

  std::size_t cached_bytes() const { return s_->cached_bytes(); }
  std::size_t hits() const { return s_->hits(); }

 private:
  std::shared_ptr<detail::pinned_pool_state> s_;
};

}  // namespace jitembed::cuda
