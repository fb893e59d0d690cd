// bench_cache: memory, LMDB and Redis stores against memcpy and redis-benchmark, side by side.
// Usage: bench_cache [memory|lmdb|redis ...]   (default: all; --help)
#include "cache_benches.hpp"

int main(int argc, char** argv) {
  using namespace jitembed::bench;
  command_line cli{"bench_cache: memory, LMDB and Redis stores against memcpy and redis-benchmark", {"memory", "lmdb", "redis"}};
  CLI11_PARSE(cli.app, argc, argv);
  reporter r;
  if (cli.wanted("memory")) run_memory_cache_benchmarks(r);
  if (cli.wanted("lmdb")) run_lmdb_benchmarks(r);
  if (cli.wanted("redis")) run_redis_benchmarks(r);
  r.print();
  return 0;
}
