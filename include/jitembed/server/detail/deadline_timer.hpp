// deadline_timer: calls fn(key) once at each armed time point, on a thread of its own, so that a request past its
// KServe "timeout" is answered at the deadline, not when the model returns. Keys are weak.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <stop_token>
#include <utility>
#include <vector>

#include "jitembed/core/worker_group.hpp"

namespace jitembed::server::detail {

template <class T>
class deadline_timer {
 public:
  using clock = std::chrono::steady_clock;

  // fn runs on the timer's thread, outside its lock; it must not block for long.
  explicit deadline_timer(std::function<void(std::shared_ptr<T>)> fn)
      : fn_(std::move(fn)), thread_(1, [this](std::stop_token st, std::size_t) { loop(st); }) {}
  deadline_timer(const deadline_timer&) = delete;
  deadline_timer& operator=(const deadline_timer&) = delete;
  ~deadline_timer() { thread_.stop(); }

  void arm(clock::time_point at, const std::shared_ptr<T>& key) {
    {
      std::lock_guard lock(mu_);
      const bool earliest = q_.empty() || at < q_.top().at;
      q_.push({at, key});
      if (q_.size() >= purge_at_) purge();
      if (!earliest) return;
    }
    cv_.notify_one();
  }

 private:
  struct entry {
    clock::time_point at;
    std::weak_ptr<T> key;
    bool operator>(const entry& o) const { return at > o.at; }
  };

  // Entries of answered requests stay queued until their time: drop the expired ones once the queue has
  // doubled since the last purge (amortized O(1) per arm; the queue stays within twice the live entries).
  void purge() {
    std::vector<entry> live;
    live.reserve(q_.size());
    while (!q_.empty()) {
      if (!q_.top().key.expired()) live.push_back(q_.top());
      q_.pop();
    }
    for (auto& e : live) q_.push(std::move(e));
    purge_at_ = std::max<std::size_t>(kMinPurge, 2 * q_.size());
  }

  void loop(std::stop_token st) {
    std::unique_lock lock(mu_);
    while (!st.stop_requested()) {
      if (q_.empty()) {
        cv_.wait(lock, st, [&] { return !q_.empty(); });
        continue;
      }
      const auto at = q_.top().at;
      if (clock::now() < at) {
        cv_.wait_until(lock, st, at, [&] { return !q_.empty() && q_.top().at < at; });
        continue;
      }
      auto key = q_.top().key.lock();
      q_.pop();
      if (!key) continue;
      lock.unlock();
      fn_(std::move(key));
      lock.lock();
    }
  }

  static constexpr std::size_t kMinPurge = 1024;
  std::function<void(std::shared_ptr<T>)> fn_;
  std::size_t purge_at_ = kMinPurge;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::priority_queue<entry, std::vector<entry>, std::greater<entry>> q_;
  worker_group thread_;  // last: started after the state it uses, stopped first
};

}  // namespace jitembed::server::detail
