// bench_cache: memory, LMDB and Redis stores against memcpy and redis-benchmark, side by side.
// Usage: bench_cache [memory|lmdb|redis ...]   (default: all)
#include "cache_benches.hpp"

int main(int argc, char** argv) {
  using namespace jitembed::bench;
  reporter r;
  if (wanted(argc, argv, "memory")) run_memory_cache_benchmarks(r);
  if (wanted(argc, argv, "lmdb")) run_lmdb_benchmarks(r);
  if (wanted(argc, argv, "redis")) run_redis_benchmarks(r);
  r.print();
  return 0;
}
