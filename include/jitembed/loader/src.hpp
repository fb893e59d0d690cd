// The prefetching loader compiled once: with JITEMBED_SEPARATE_COMPILATION defined for the whole program
// (core/config.hpp), include this header in exactly one translation unit, next to jitembed/client/src.hpp
// (the loader calls the client). Every other TU then includes only loader/jit_loader.hpp, without the loader's
// state, workers and cache plumbing. Without the macro it is an ordinary header.
#pragma once

#include "jitembed/core/config.hpp"
#include "jitembed/loader/detail/jit_loader_impl.hpp"
