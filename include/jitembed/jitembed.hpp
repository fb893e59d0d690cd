// Umbrella header: every component that is linked (JITEMBED_HAS_<C>, set by its CMake target), except those on
// Boost.Asio / Beast, included explicitly: jitembed/net/http.hpp, jitembed/client.hpp, jitembed/loader.hpp and
// jitembed/parallel/tcp_store.hpp.
#pragma once

#include "jitembed/codec.hpp"
#include "jitembed/core.hpp"
#if defined(JITEMBED_HAS_BATCHING)
#include "jitembed/batching.hpp"
#endif
#if defined(JITEMBED_HAS_FORMAT)
#include "jitembed/format.hpp"
#endif
#if defined(JITEMBED_HAS_CACHE)
#include "jitembed/cache.hpp"
#endif
#if defined(JITEMBED_HAS_MODELS)
#include "jitembed/models.hpp"
#endif
#if defined(JITEMBED_HAS_KSERVE)
#include "jitembed/net/kserve.hpp"
#endif
#if defined(JITEMBED_HAS_SERVER)
#include "jitembed/server.hpp"
#endif
#if defined(JITEMBED_HAS_CUDA)
#include "jitembed/cuda.hpp"
#endif
#if defined(JITEMBED_HAS_PARALLEL)
#include "jitembed/parallel.hpp"
#endif
