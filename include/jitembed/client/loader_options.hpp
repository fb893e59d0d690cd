// Deprecated forwarding header, kept for one release: the loader's options moved to jitembed/loader/options.hpp
// (namespace jitembed::loader, component jitembed::loader; CHANGELOG). The old names warn where used.
#pragma once

#include "jitembed/loader/options.hpp"

namespace jitembed::client {

using embedding_spec [[deprecated("jitembed::loader::embedding_spec (jitembed/loader/options.hpp)")]] =
    loader::embedding_spec;
using delivery_order [[deprecated("jitembed::loader::delivery_order (jitembed/loader/options.hpp)")]] =
    loader::delivery_order;
using loader_options [[deprecated("jitembed::loader::loader_options (jitembed/loader/options.hpp)")]] =
    loader::loader_options;

}  // namespace jitembed::client
