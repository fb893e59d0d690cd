// Deprecated forwarding header, kept for one release: the epoch plan moved to jitembed/loader/epoch_plan.hpp
// (namespace jitembed::loader, component jitembed::loader; CHANGELOG). The old names warn where used.
#pragma once

#include <cstdint>
#include <vector>

#include "jitembed/loader/epoch_plan.hpp"

namespace jitembed::client {

using epoch_plan [[deprecated("jitembed::loader::epoch_plan (jitembed/loader/epoch_plan.hpp)")]] = loader::epoch_plan;

[[deprecated("jitembed::loader::epoch_permutation (jitembed/loader/epoch_plan.hpp)")]] inline std::vector<std::uint64_t>
epoch_permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch, bool shuffle) {
  return loader::epoch_permutation(n, seed, epoch, shuffle);
}

}  // namespace jitembed::client
