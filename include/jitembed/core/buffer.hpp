// Byte spans, 64-byte aligned allocation, and a growable aligned byte buffer.
#pragma once

#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string_view>
#include <vector>

namespace jitembed {

using bytes_view = std::span<const std::byte>;
using mutable_bytes = std::span<std::byte>;

inline constexpr std::size_t kAlignment = 64;  // cache line; also what AVX-512 loads like

inline bytes_view as_bytes_view(std::string_view s) noexcept {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}
inline std::string_view as_string_view(bytes_view b) noexcept {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

constexpr std::size_t align_up(std::size_t n, std::size_t a = kAlignment) noexcept { return (n + a - 1) / a * a; }

// Allocator handing out kAlignment-aligned storage; used by byte_buffer and tensor storage.
template <class T, std::size_t Align = kAlignment>
struct aligned_allocator {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = aligned_allocator<U, Align>;
  };
  aligned_allocator() noexcept = default;
  template <class U>
  aligned_allocator(const aligned_allocator<U, Align>&) noexcept {}  // NOLINT

  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{Align}));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{Align}); }
  template <class U>
  bool operator==(const aligned_allocator<U, Align>&) const noexcept { return true; }
};

// The owner that keeps borrowed bytes valid: a file mapping, a cache entry, a read transaction, a buffer.
// Type-erased shared ownership, so any std::shared_ptr converts to it; copies share the owner; empty when
// the bytes belong to the caller. Views, values and replies carry one next to the bytes it keeps alive.
using keep_alive = std::shared_ptr<const void>;

// Growable, 64-byte aligned bytes. Writers encode into it; readers view into it.
using byte_buffer = std::vector<std::byte, aligned_allocator<std::byte>>;

// Allocates n bytes (at least one cache line) with kAlignment, owned by the returned shared_ptr.
inline std::shared_ptr<std::byte> allocate_shared_aligned(std::size_t n) {
  const std::size_t size = n == 0 ? kAlignment : n;
  auto* p = static_cast<std::byte*>(::operator new(size, std::align_val_t{kAlignment}));
  return std::shared_ptr<std::byte>(p, [](std::byte* q) { ::operator delete(q, std::align_val_t{kAlignment}); });
}

inline void append(byte_buffer& out, bytes_view b) { out.insert(out.end(), b.begin(), b.end()); }

}  // namespace jitembed
