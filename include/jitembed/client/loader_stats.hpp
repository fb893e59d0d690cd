// Deprecated forwarding header, kept for one release: the loader's counters moved to jitembed/loader/stats.hpp
// (namespace jitembed::loader, component jitembed::loader; CHANGELOG). The old names warn where used.
#pragma once

#include "jitembed/loader/stats.hpp"

namespace jitembed::client {

using loader_epoch_stats [[deprecated("jitembed::loader::loader_epoch_stats (jitembed/loader/stats.hpp)")]] =
    loader::loader_epoch_stats;
using loader_stats [[deprecated("jitembed::loader::loader_stats (jitembed/loader/stats.hpp)")]] = loader::loader_stats;

}  // namespace jitembed::client
