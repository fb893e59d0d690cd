// Umbrella header of the JIT cache: keys, the store concept, memory / LMDB / Redis stores (those linked),
// value encoding and the tiered cache.
#pragma once

#include "jitembed/cache/any_store.hpp"
#include "jitembed/cache/key.hpp"
#include "jitembed/cache/memory_cache.hpp"
#include "jitembed/cache/store.hpp"
#include "jitembed/cache/tiered_cache.hpp"
#include "jitembed/cache/value.hpp"
#include "jitembed/cache/value_options.hpp"
#if defined(JITEMBED_HAS_LMDB)
#include "jitembed/cache/lmdb_cache.hpp"
#endif
#if defined(JITEMBED_HAS_REDIS)
#include "jitembed/cache/redis_cache.hpp"
#endif
