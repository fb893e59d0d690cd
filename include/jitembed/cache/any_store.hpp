// any_store: the type-erased, shared handle to a cache store, what tiers are built from at run time and what
// the loader's options hold (its own header, so loader/options.hpp does not parse the tiers).
#pragma once

#include <concepts>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "jitembed/cache/store.hpp"
#include "jitembed/core/buffer.hpp"

namespace jitembed::cache {

// A shared, type-erased cache store: copies refer to the same store (a handle copied on purpose, e.g. to
// every loader worker; docs/api.md rule 2.4). Built from a store value (`any_store(lmdb)`, for stores that
// are themselves handles or movable) or in place (`any_store(std::in_place_type<memory_cache>, 64 << 20)`,
// for stores that are neither); itself a cache_store. An empty handle is no cache: get() misses, put()
// stores nothing, stats() are zero.
class any_store {
 public:
  any_store() = default;
  template <cache_store S>
    requires(!std::same_as<std::remove_cvref_t<S>, any_store> && std::move_constructible<std::remove_cvref_t<S>>)
  explicit any_store(S&& store)
      : impl_(std::make_shared<model<std::remove_cvref_t<S>>>(std::make_shared<std::remove_cvref_t<S>>(std::forward<S>(store)))) {}
  // Constructs an S in place.
  template <cache_store S, class... Args>
  explicit any_store(std::in_place_type_t<S>, Args&&... args)
      : impl_(std::make_shared<model<S>>(std::make_shared<S>(std::forward<Args>(args)...))) {}

  explicit operator bool() const noexcept { return impl_ != nullptr; }

  std::optional<cached_value> get(const cache_key& k) { return impl_ ? impl_->get(k) : std::nullopt; }
  std::vector<std::optional<cached_value>> multi_get(std::span<const cache_key> keys) {
    return impl_ ? impl_->multi_get(keys) : std::vector<std::optional<cached_value>>(keys.size());
  }
  bool put(const cache_key& k, bytes_view v) { return impl_ && impl_->put(k, v); }
  bool contains(const cache_key& k) { return impl_ && impl_->contains(k); }
  bool erase(const cache_key& k) { return impl_ && impl_->erase(k); }
  cache_stats stats() const { return impl_ ? impl_->stats() : cache_stats{}; }
  // The store behind the handle if it is an S, else nullptr.
  template <class S>
  S* target() const noexcept {
    auto* m = dynamic_cast<model<S>*>(impl_.get());
    return m ? m->store.get() : nullptr;
  }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::optional<cached_value> get(const cache_key&) = 0;
    virtual std::vector<std::optional<cached_value>> multi_get(std::span<const cache_key>) = 0;
    virtual bool put(const cache_key&, bytes_view) = 0;
    virtual bool contains(const cache_key&) = 0;
    virtual bool erase(const cache_key&) = 0;
    virtual cache_stats stats() const = 0;
  };
  template <class S>
  struct model final : concept_t {
    explicit model(std::shared_ptr<S> s) : store(std::move(s)) {}
    std::optional<cached_value> get(const cache_key& k) override { return store->get(k); }
    std::vector<std::optional<cached_value>> multi_get(std::span<const cache_key> keys) override {
      return store->multi_get(keys);
    }
    bool put(const cache_key& k, bytes_view v) override { return store->put(k, v); }
    bool contains(const cache_key& k) override { return store->contains(k); }
    bool erase(const cache_key& k) override { return store->erase(k); }
    cache_stats stats() const override { return store->stats(); }
    std::shared_ptr<S> store;
  };
  std::shared_ptr<concept_t> impl_;
};

static_assert(cache_store<any_store>);

}  // namespace jitembed::cache
