// Delivers the completions of one caller in the order the caller submitted them, whatever order the
// runner threads finish them in; one caller's deliveries never run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace jitembed::batching::detail {

template <class Item>
class caller_sequencer {
 public:
  // The next sequence number of `caller` (0, 1, 2, ...); every number handed out must be completed.
  std::uint64_t assign(std::uint64_t caller) {
    std::lock_guard lock(mu_);
    return states_[caller].next_assign++;
  }

  // Hands over completion `seq` of `caller`. Delivers it and every completion it unblocks, in sequence
  // order, on this thread (deliver is called without the lock held) unless another thread is already
  // delivering for this caller, which then picks it up.
  template <class Deliver>
  void complete(std::uint64_t caller, std::uint64_t seq, Item item, Deliver&& deliver) {
    std::unique_lock lock(mu_);
    auto& st = states_[caller];  // unordered_map references survive rehashing; only this loop erases
    st.ready.emplace(seq, std::move(item));
    ++held_;
    if (st.delivering) return;
    st.delivering = true;
    for (;;) {
      auto it = st.ready.begin();
      if (it == st.ready.end() || it->first != st.next_deliver) break;
      Item next = std::move(it->second);
      st.ready.erase(it);
      ++st.next_deliver;
      --held_;
      lock.unlock();
      deliver(std::move(next));
      lock.lock();
    }
    st.delivering = false;
    if (st.ready.empty() && st.next_deliver == st.next_assign) states_.erase(caller);
  }

  // Completions handed over but waiting for an earlier one of the same caller.
  std::size_t held() const {
    std::lock_guard lock(mu_);
    return held_;
  }
  // Callers with outstanding (assigned, undelivered) completions.
  std::size_t callers() const {
    std::lock_guard lock(mu_);
    return states_.size();
  }

 private:
  struct state {
    std::uint64_t next_assign = 0;
    std::uint64_t next_deliver = 0;
    bool delivering = false;
    std::map<std::uint64_t, Item> ready;
  };
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, state> states_;
  std::size_t held_ = 0;
};

}  // namespace jitembed::batching::detail
