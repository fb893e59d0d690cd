// Payload checksums (XXH3-64, seed 0): libxxhash's runtime-dispatched AVX2/AVX-512 entry points where the
// library exports them (Debian builds it so), and copy-while-hashing in cache-sized chunks for the writer.
#pragma once

#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "jitembed/core/buffer.hpp"

// xxh_x86dispatch.h's entry points, referenced weakly: null when the linked libxxhash lacks them (then the
// portable functions run). Same results either way.
#if defined(__ELF__) && (defined(__x86_64__) || defined(__i386__))
#define JITEMBED_XXH3_WEAK_DISPATCH 1
extern "C" {
XXH64_hash_t XXH3_64bits_dispatch(const void* input, size_t len) __attribute__((weak));
XXH_errorcode XXH3_64bits_update_dispatch(XXH3_state_t* state, const void* input, size_t len) __attribute__((weak));
}
#endif

namespace jitembed::format::detail {

inline constexpr std::size_t kCopyHashChunk = std::size_t{64} << 10;

inline std::uint64_t payload_hash(bytes_view b) noexcept {
#if defined(JITEMBED_XXH3_WEAK_DISPATCH)
  if (&XXH3_64bits_dispatch != nullptr) return XXH3_64bits_dispatch(b.data(), b.size());
#endif
  return XXH3_64bits(b.data(), b.size());
}

inline void payload_hash_update(XXH3_state_t* st, const std::byte* p, std::size_t n) noexcept {
#if defined(JITEMBED_XXH3_WEAK_DISPATCH)
  if (&XXH3_64bits_update_dispatch != nullptr) {
    XXH3_64bits_update_dispatch(st, p, n);
    return;
  }
#endif
  XXH3_64bits_update(st, p, n);
}

struct xxh3_state_deleter {
  void operator()(XXH3_state_t* s) const noexcept { XXH3_freeState(s); }
};

inline XXH3_state_t* thread_xxh3_state() {
  thread_local std::unique_ptr<XXH3_state_t, xxh3_state_deleter> s(XXH3_createState());
  return s.get();
}

// Copies src to dst and returns the payload hash of the bytes (== payload_hash(src)), hashing each chunk
// right after copying it, while it is still in cache.
inline std::uint64_t copy_and_hash(std::byte* dst, bytes_view src) {
  const std::size_t n = src.size();
  if (n) std::memcpy(dst, src.data(), std::min(n, kCopyHashChunk));
  XXH3_state_t* st = n > kCopyHashChunk ? thread_xxh3_state() : nullptr;
  if (!st) {  // small payload (or no state): one shot
    if (n > kCopyHashChunk) std::memcpy(dst + kCopyHashChunk, src.data() + kCopyHashChunk, n - kCopyHashChunk);
    return payload_hash(bytes_view(dst, n));
  }
  XXH3_64bits_reset(st);
  payload_hash_update(st, dst, kCopyHashChunk);
  for (std::size_t off = kCopyHashChunk; off < n; off += kCopyHashChunk) {
    const std::size_t len = std::min(kCopyHashChunk, n - off);
    std::memcpy(dst + off, src.data() + off, len);
    payload_hash_update(st, dst + off, len);
  }
  return XXH3_64bits_digest(st);
}

}  // namespace jitembed::format::detail
