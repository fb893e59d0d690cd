// The prefetching loader component (jitembed::loader): jit_loader, its options and stats, the steps it hands
// out and the epoch plan it follows. Built on the JIT client (jitembed/client.hpp), the cache and the format.
#pragma once

#include "jitembed/loader/epoch_plan.hpp"
#include "jitembed/loader/jit_loader.hpp"
#include "jitembed/loader/options.hpp"
#include "jitembed/loader/stats.hpp"
#include "jitembed/loader/step.hpp"
