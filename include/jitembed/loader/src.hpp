// The prefetching loader compiled once: with JITEMBED_SEPARATE_COMPILATION (core/config.hpp), include this
// header in exactly one translation unit, next to jitembed/client/src.hpp; the others include loader/jit_loader.hpp.
#pragma once

#include "jitembed/core/config.hpp"
#include "jitembed/format/src.hpp"  // the loader's data set (format/dataset.hpp): programs with loader/src.hpp link
#include "jitembed/loader/detail/jit_loader_impl.hpp"
