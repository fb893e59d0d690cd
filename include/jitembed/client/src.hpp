// The JIT client compiled once: with JITEMBED_SEPARATE_COMPILATION (core/config.hpp), include this header in
// exactly one translation unit; the others include only the API headers (no Boost). The loader's: loader/src.hpp.
#pragma once

#include "jitembed/client/detail/jit_client_impl.hpp"
#include "jitembed/core/config.hpp"

// Deprecated, for one release: this header also compiled the loader before it became its own component
// (CHANGELOG); a program that includes only this one keeps linking. Include jitembed/loader/src.hpp instead.
#if __has_include("jitembed/loader/detail/jit_loader_impl.hpp")
#include "jitembed/loader/detail/jit_loader_impl.hpp"
#endif
