// loader::epoch_plan: the sample plan of one epoch on one rank, as jit_loader follows it: a deterministic
// permutation (seed, epoch; the same on every rank and platform), the rank's strided share of it, and the
// step sizes every rank agrees on. Public so that a trainer (or a baseline reader) can reproduce it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "jitembed/core/splitmix64.hpp"

namespace jitembed::loader {

// Fisher-Yates with our own generator and our own bounded draw (std::shuffle and the std distributions
// are implementation-defined: ranks built with different standard libraries would disagree).
inline std::vector<std::uint64_t> epoch_permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch, bool shuffle) {
  std::vector<std::uint64_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), std::uint64_t{0});
  if (!shuffle || n < 2) return p;
  std::uint64_t state = splitmix64(seed ^ splitmix64(epoch ^ 0x6a69746c6f616472ull));
  for (std::uint64_t i = n - 1; i > 0; --i) {
    state = splitmix64(state);
    // Lemire's multiply-shift draw in [0, i]; the bias (< i / 2^64) is irrelevant here and deterministic.
    const auto j = static_cast<std::uint64_t>((static_cast<unsigned __int128>(state) * (i + 1)) >> 64);
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
  }
  return p;
}

// Rank r's j-th sample is perm[j * W + r]: step k of every rank together covers perm[k*B*W, (k+1)*B*W).
// Ranks r < N % W get ceil(N/W) samples, the others floor(N/W); every rank runs
// ceil(ceil(N/W) / B) steps, all of B samples except the last, which is smaller on a short rank (empty
// when floor(N/W) is a multiple of B). No sample is repeated as padding.
struct epoch_plan {
  std::uint64_t n = 0, world = 1, rank = 0, batch = 1;
  std::vector<std::uint64_t> perm;

  static epoch_plan make(std::uint64_t n, std::uint64_t world, std::uint64_t rank, std::uint64_t batch, std::uint64_t seed,
                         std::uint64_t epoch, bool shuffle) {
    return {n, world, rank, batch, epoch_permutation(n, seed, epoch, shuffle)};
  }

  std::uint64_t count() const noexcept { return n > rank ? (n - rank + world - 1) / world : 0; }
  std::uint64_t steps() const noexcept {
    const std::uint64_t longest = (n + world - 1) / world;
    return (longest + batch - 1) / batch;
  }
  std::uint64_t step_size(std::uint64_t k) const noexcept {
    const std::uint64_t c = count(), lo = k * batch;
    return lo >= c ? 0 : std::min(batch, c - lo);
  }
  std::uint64_t index(std::uint64_t j) const noexcept { return perm[static_cast<std::size_t>(j * world + rank)]; }
};

}  // namespace jitembed::loader
