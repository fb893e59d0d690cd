// bench_cache: memory, LMDB and Redis stores against memcpy and redis-benchmark, side by side.
// Usage: bench_cache [memory|lmdb|redis ...]   (default: all)
#include <cstring>

#include "cache_benches.hpp"

int main(int argc, char** argv) {
  using namespace jitembed::bench;
  auto want = [&](const char* name) {
    if (argc < 2) return true;
    for (int i = 1; i < argc; ++i)
      if (std::strcmp(argv[i], name) == 0) return true;
    return false;
  };
  reporter r;
  if (want("memory")) run_memory_cache_benchmarks(r);
  if (want("lmdb")) run_lmdb_benchmarks(r);
  if (want("redis")) run_redis_benchmarks(r);
  r.print();
  return 0;
}
