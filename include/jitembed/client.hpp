// The JIT client component: jit_client (remote KServe v2 endpoints or in-process models) and endpoint lists.
// The prefetching loader built on it is its own component: jitembed/loader.hpp.
#pragma once

#include "jitembed/client/endpoints.hpp"
#include "jitembed/client/jit_client.hpp"
#include "jitembed/client/options.hpp"
#include "jitembed/client/request.hpp"
#include "jitembed/client/stats.hpp"
// Deprecated, for one release: the loader under its old names (client::jit_loader, ...; CHANGELOG).
#if __has_include("jitembed/client/jit_loader.hpp")
#include "jitembed/client/jit_loader.hpp"
#endif
