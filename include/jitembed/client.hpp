// The JIT client component: jit_client (remote KServe v2 endpoints or in-process models), endpoint lists,
// and the prefetching loader.
#pragma once

#include "jitembed/client/endpoints.hpp"
#include "jitembed/client/jit_client.hpp"
#include "jitembed/client/options.hpp"
#include "jitembed/client/request.hpp"
#include "jitembed/client/stats.hpp"
#if __has_include("jitembed/client/jit_loader.hpp")
#include "jitembed/client/jit_loader.hpp"
#endif
