// Replaces global operator new for test_zstd to record the largest single request, so tests can prove
// that bounded decoding never asks for a frame's declared (possibly hostile) size. Kept in its own
// translation unit so the compiler does not pair the replacement with inlined std::allocator code.
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

#include "zstd/alloc_probe.hpp"

// TSan and MSan runtimes define operator new themselves: there the probe is off (tests skip its checks).
#if defined(__SANITIZE_THREAD__)
#define JITEMBED_ALLOC_PROBE 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define JITEMBED_ALLOC_PROBE 0
#endif
#endif
#ifndef JITEMBED_ALLOC_PROBE
#define JITEMBED_ALLOC_PROBE 1
#endif

namespace {
std::atomic<std::size_t> g_max_alloc{0};

[[maybe_unused]] void note_alloc(std::size_t n) noexcept {
  std::size_t cur = g_max_alloc.load(std::memory_order_relaxed);
  while (n > cur && !g_max_alloc.compare_exchange_weak(cur, n, std::memory_order_relaxed)) {
  }
}
}  // namespace

namespace jitembed::test {
void reset_max_alloc() noexcept { g_max_alloc.store(0); }
std::size_t max_alloc() noexcept { return g_max_alloc.load(); }
bool alloc_probe_active() noexcept { return JITEMBED_ALLOC_PROBE != 0; }
}  // namespace jitembed::test

#if JITEMBED_ALLOC_PROBE

void* operator new(std::size_t n) {
  note_alloc(n);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  note_alloc(n);
  const std::size_t al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al + (n == 0 ? al : 0))) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return ::operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#endif  // JITEMBED_ALLOC_PROBE
