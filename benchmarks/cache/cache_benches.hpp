// The parts of bench_cache, one file per store under benchmarks/cache/.
#pragma once

#include "bench_util.hpp"

namespace jitembed::bench {
void run_memory_cache_benchmarks(reporter& r);  // memory_bench.cpp
void run_lmdb_benchmarks(reporter& r);          // lmdb_bench.cpp
void run_redis_benchmarks(reporter& r);         // redis_bench.cpp
}  // namespace jitembed::bench
