// Admission of a process's LMDB transactions (the gate a map resize waits on, with the pool of reset read
// transactions) and the fork generation an env checks before use. Part of lmdb_env.hpp.
#pragma once

#include <lmdb.h>
#include <pthread.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>
#include "jitembed/core/error.hpp"

namespace jitembed::cache::detail {

// Admission of this process's transactions. mdb_env_set_mapsize() needs no transaction active in the
// process, and a read transaction lives as long as a value handed out from it, possibly on another
// thread than the one that began it: so a counter + condition variable rather than a rwlock (whose
// unlock must happen on the locking thread).
// It also keeps the pool of reset read transactions (under the same lock: one lock per begin and end).
class lmdb_txn_gate {
 public:
  void enter() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return !exclusive_; });
    ++active_;
  }
  // enter() and take a pooled (reset) read transaction, or null when the pool is empty.
  MDB_txn* enter_and_take() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return !exclusive_; });
    ++active_;
    if (pool_.empty()) return nullptr;
    MDB_txn* t = pool_.back();
    pool_.pop_back();
    return t;
  }
  void leave() {
    std::lock_guard lk(mu_);
    if (--active_ == 0) cv_.notify_all();
  }
  // Pools a reset read transaction and leave()s; when the pool is full returns false without leaving (the
  // caller aborts the transaction, then calls leave()).
  bool give_and_leave(MDB_txn* reset_txn, std::size_t pool_cap) {
    std::lock_guard lk(mu_);
    if (pool_.size() >= pool_cap) return false;
    pool_.push_back(reset_txn);
    if (--active_ == 0) cv_.notify_all();
    return true;
  }
  std::vector<MDB_txn*> drain_pool() {
    std::lock_guard lk(mu_);
    return std::move(pool_);
  }
  // Waits up to `timeout` for no transaction to be active, then holds new ones off until leave_exclusive().
  bool enter_exclusive(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (!cv_.wait_until(lk, deadline, [&] { return !exclusive_; })) return false;
    exclusive_ = true;
    if (!cv_.wait_until(lk, deadline, [&] { return active_ == 0; })) {
      exclusive_ = false;
      cv_.notify_all();
      return false;
    }
    return true;
  }
  void leave_exclusive() {
    std::lock_guard lk(mu_);
    exclusive_ = false;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t active_ = 0;
  bool exclusive_ = false;
  std::vector<MDB_txn*> pool_;
};

// Counts fork()s in this process's lineage: an env remembers the count it was opened at, and a child
// (where LMDB forbids using the parent's env) sees a different one. Cheaper than getpid() per read.
inline std::atomic<unsigned>& lmdb_fork_generation() noexcept {
  static std::atomic<unsigned> generation{0};
  return generation;
}
inline void lmdb_install_fork_hook() noexcept {
  static const bool installed = [] {
    pthread_atfork(nullptr, nullptr, [] { lmdb_fork_generation().fetch_add(1, std::memory_order_relaxed); });
    return true;
  }();
  (void)installed;
}

}  // namespace jitembed::cache::detail
