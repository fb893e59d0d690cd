// SplitMix64 (Steele, Lea, Flood 2014): the library's one seeded 64-bit mixer, used where results must be
// the same on every platform and standard library (the loader's permutation, the reference models'
// weights). Not for hashing content: that is XXH3 (core/hash.hpp).
#pragma once

#include <cstdint>

namespace jitembed {

constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace jitembed
