// Deprecated forwarding header, kept for one release: jit_loader moved to its own component, jitembed::loader
// (jitembed/loader/jit_loader.hpp, namespace jitembed::loader; CHANGELOG). The old names warn where used.
#pragma once

#include "jitembed/client/loader_options.hpp"
#include "jitembed/client/loader_stats.hpp"
#include "jitembed/client/step.hpp"
#include "jitembed/loader/jit_loader.hpp"

namespace jitembed::client {

using jit_loader [[deprecated("jitembed::loader::jit_loader (jitembed/loader/jit_loader.hpp)")]] = loader::jit_loader;

}  // namespace jitembed::client
