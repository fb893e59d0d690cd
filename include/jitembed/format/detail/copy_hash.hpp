// Copy a payload and hash it (XXH3-64) in cache-sized chunks, so the hash reads bytes the copy just
// brought into cache instead of making a second pass over memory.
#pragma once

#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "jitembed/core/buffer.hpp"

namespace jitembed::format::detail {

inline constexpr std::size_t kCopyHashChunk = std::size_t{32} << 10;

struct xxh3_state_deleter {
  void operator()(XXH3_state_t* s) const noexcept { XXH3_freeState(s); }
};

inline XXH3_state_t* thread_xxh3_state() {
  thread_local std::unique_ptr<XXH3_state_t, xxh3_state_deleter> s(XXH3_createState());
  return s.get();
}

// Copies src to dst and returns XXH3-64 (seed 0) of the bytes: identical to XXH3_64bits(src).
inline std::uint64_t copy_and_hash(std::byte* dst, bytes_view src) {
  const std::size_t n = src.size();
  if (n <= kCopyHashChunk) {
    if (n) std::memcpy(dst, src.data(), n);
    return XXH3_64bits(dst, n);
  }
  XXH3_state_t* st = thread_xxh3_state();
  if (!st) {  // allocation failed: two passes
    std::memcpy(dst, src.data(), n);
    return XXH3_64bits(dst, n);
  }
  XXH3_64bits_reset(st);
  for (std::size_t off = 0; off < n; off += kCopyHashChunk) {
    const std::size_t len = std::min(kCopyHashChunk, n - off);
    std::memcpy(dst + off, src.data() + off, len);
    XXH3_64bits_update(st, dst + off, len);
  }
  return XXH3_64bits_digest(st);
}

}  // namespace jitembed::format::detail
