// Memory accounting at the one place tensors get their storage (tensor::empty on the host, cuda::device_buffer
// on a GPU): live and peak bytes per tag (a model's module: "encoder", "llm"), and an optional budget per
// kind that fails the allocation with errc::resource_exhausted, so running out of memory is deterministic and
// testable on a CPU. A rank makes one memory_account and opens a memory_scope(account, tag) on each thread
// that allocates for a module; allocations on a thread without a scope are not counted.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/error.hpp"

namespace jitembed {

enum class memory_kind : std::uint8_t { host = 0, device = 1 };

struct memory_budget {
  std::optional<std::uint64_t> host;    // live host bytes, all tags together; empty: no limit
  std::optional<std::uint64_t> device;  // live device bytes, all tags together
};

// Bytes of one tag (or the account's total) of one kind.
struct memory_usage {
  std::uint64_t live = 0;
  std::uint64_t peak = 0;
  std::uint64_t allocations = 0;  // allocations counted so far
  std::uint64_t refused = 0;      // allocations the budget refused
};

struct memory_tag_usage {
  std::string tag;
  memory_usage host, device;
};

namespace core::detail {

struct memory_counter {
  std::atomic<std::uint64_t> live{0}, peak{0}, allocations{0}, refused{0};

  memory_usage load() const noexcept { return {live.load(), peak.load(), allocations.load(), refused.load()}; }
  void raise_peak(std::uint64_t now) noexcept {
    std::uint64_t p = peak.load(std::memory_order_relaxed);
    while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
};

struct memory_tag_state {
  explicit memory_tag_state(std::string_view name) : tag(name) {}
  std::string tag;
  memory_counter kinds[2];
};

// Shared by the account and every storage it counted (a tensor may outlive its account).
struct memory_account_state {
  memory_budget budget;
  memory_counter total[2];
  std::mutex mu;  // guards tags (entries never move: each its own allocation)
  std::vector<std::unique_ptr<memory_tag_state>> tags;

  memory_tag_state& tag(std::string_view name) {
    std::lock_guard lk(mu);
    for (auto& t : tags)
      if (t->tag == name) return *t;
    return *tags.emplace_back(std::make_unique<memory_tag_state>(name));
  }
};

struct memory_context {
  std::shared_ptr<memory_account_state> account;
  memory_tag_state* tag = nullptr;
};

inline memory_context& current_memory_context() noexcept {
  thread_local memory_context ctx;
  return ctx;
}

}  // namespace core::detail

// One rank's account. Copies share the counters. Thread-safe.
class memory_account {
 public:
  explicit memory_account(memory_budget budget = {}) : st_(std::make_shared<core::detail::memory_account_state>()) {
    st_->budget = budget;
  }

  memory_usage usage(memory_kind k = memory_kind::host) const noexcept { return st_->total[index(k)].load(); }
  // Per tag, in the order the tags were first used.
  std::vector<memory_tag_usage> tags() const {
    std::lock_guard lk(st_->mu);
    std::vector<memory_tag_usage> out;
    for (const auto& t : st_->tags) out.push_back({t->tag, t->kinds[0].load(), t->kinds[1].load()});
    return out;
  }
  memory_tag_usage tag(std::string_view name) const {
    for (auto& t : tags())
      if (t.tag == name) return t;
    return {std::string(name), {}, {}};
  }
  const memory_budget& budget() const noexcept { return st_->budget; }
  // Peaks restart from the live bytes (e.g. per step); the totals of allocations stay.
  void reset_peaks() noexcept {
    for (auto& c : st_->total) c.peak.store(c.live.load());
    std::lock_guard lk(st_->mu);
    for (auto& t : st_->tags)
      for (auto& c : t->kinds) c.peak.store(c.live.load());
  }

  // Counts `bytes` of kind `k` against the calling thread's scope, if any: a release handle, or
  // resource_exhausted when the budget would be passed (nothing counted then). Used by the allocators.
  class charge {
   public:
    charge() = default;
    charge(charge&& o) noexcept : st_(std::move(o.st_)), tag_(o.tag_), kind_(o.kind_), bytes_(o.bytes_) {
      o.bytes_ = 0;
    }
    charge& operator=(charge&&) = delete;
    charge(const charge&) = delete;
    ~charge() { release(); }
    bool counted() const noexcept { return bytes_ != 0; }
    void release() noexcept {
      if (!st_ || bytes_ == 0) return;
      st_->total[kind_].live.fetch_sub(bytes_);
      tag_->kinds[kind_].live.fetch_sub(bytes_);
      bytes_ = 0;
    }

   private:
    friend class memory_account;
    std::shared_ptr<core::detail::memory_account_state> st_;
    core::detail::memory_tag_state* tag_ = nullptr;
    int kind_ = 0;
    std::uint64_t bytes_ = 0;
  };
  static result<charge> charge_current(std::uint64_t bytes, memory_kind k) {
    const auto& ctx = core::detail::current_memory_context();
    charge c;
    if (!ctx.account || bytes == 0) return c;
    auto& st = *ctx.account;
    const int i = index(k);
    const auto& limit = k == memory_kind::host ? st.budget.host : st.budget.device;
    const std::uint64_t now = st.total[i].live.fetch_add(bytes) + bytes;
    if (limit && now > *limit) {
      st.total[i].live.fetch_sub(bytes);
      st.total[i].refused.fetch_add(1);
      ctx.tag->kinds[i].refused.fetch_add(1);
      return fail(errc::resource_exhausted,
                  std::string("memory budget: ") + (k == memory_kind::host ? "host" : "device") + " allocation of " +
                      std::to_string(bytes) + " bytes for '" + ctx.tag->tag + "' would hold " + std::to_string(now) +
                      " live bytes, over the budget of " + std::to_string(*limit) + " (peak so far " +
                      std::to_string(st.total[i].peak.load()) + ")");
    }
    st.total[i].raise_peak(now);
    st.total[i].allocations.fetch_add(1);
    auto& t = ctx.tag->kinds[i];
    t.raise_peak(t.live.fetch_add(bytes) + bytes);
    t.allocations.fetch_add(1);
    c.st_ = ctx.account;
    c.tag_ = ctx.tag;
    c.kind_ = i;
    c.bytes_ = bytes;
    return c;
  }

 private:
  friend class memory_scope;
  static int index(memory_kind k) noexcept { return k == memory_kind::host ? 0 : 1; }
  std::shared_ptr<core::detail::memory_account_state> st_;
};

// While it lives, tensors this thread allocates count against `account` under `tag`; scopes nest (the
// previous one returns at destruction). Not movable: it belongs to one thread's stack.
class memory_scope {
 public:
  memory_scope(const memory_account& account, std::string_view tag) : prev_(core::detail::current_memory_context()) {
    auto& ctx = core::detail::current_memory_context();
    ctx.account = account.st_;
    ctx.tag = &account.st_->tag(tag);
  }
  ~memory_scope() { core::detail::current_memory_context() = std::move(prev_); }
  memory_scope(const memory_scope&) = delete;
  memory_scope& operator=(const memory_scope&) = delete;

 private:
  core::detail::memory_context prev_;
};

}  // namespace jitembed
