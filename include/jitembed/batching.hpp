// Umbrella header of the batching component: the dynamic batcher, its options, errors and statistics,
// and resolution buckets for shape bucketing.
#pragma once

#include "jitembed/batching/dynamic_batcher.hpp"
#include "jitembed/batching/errors.hpp"
#include "jitembed/batching/options.hpp"
#include "jitembed/batching/resolution_buckets.hpp"
#include "jitembed/batching/runner.hpp"
#include "jitembed/batching/stats.hpp"
