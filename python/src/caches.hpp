// The Python Cache holder (an any_store handle), shared with the Loader binding.
#pragma once

#include "common.hpp"
#include "jitembed/cache/store.hpp"
#include "jitembed/cache/tiered_cache.hpp"

namespace jitembed::python {

struct py_cache {
  cache::any_store s;
};

cache::cache_key key_from(nb::handle k);
nb::bytes key_bytes(const cache::cache_key& k);

}  // namespace jitembed::python
