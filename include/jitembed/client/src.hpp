// The JIT client and loader compiled once: with JITEMBED_SEPARATE_COMPILATION defined for the whole
// program (core/config.hpp), include this header in exactly one translation unit. Every other TU then
// includes only the API headers (jit_client.hpp, jit_loader.hpp: no Boost, no loader state), which
// preprocess to a fraction of the header-only size. Without the macro it is an ordinary header.
#pragma once

#include "jitembed/core/config.hpp"
#include "jitembed/client/detail/jit_client_impl.hpp"
#include "jitembed/client/detail/jit_loader_impl.hpp"
