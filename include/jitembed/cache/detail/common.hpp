// Helpers shared by the cache stores: a mutex that spins briefly before it sleeps (store critical sections
// are a hash lookup long; sleeping on a short collision costs more than the whole lookup).
#pragma once

#include <mutex>

namespace jitembed::cache::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// A std::mutex whose lock() first retries try_lock() a bounded number of times. Lockable, so it works with
// std::lock_guard / std::unique_lock (and ThreadSanitizer sees the std::mutex underneath).
class adaptive_mutex {
 public:
  static constexpr int kSpins = 128;

  void lock() noexcept {
    for (int i = 0; i < kSpins; ++i) {
      if (mu_.try_lock()) return;
      cpu_relax();
    }
    mu_.lock();
  }
  bool try_lock() noexcept { return mu_.try_lock(); }
  void unlock() noexcept { mu_.unlock(); }

 private:
  std::mutex mu_;
};

}  // namespace jitembed::cache::detail
