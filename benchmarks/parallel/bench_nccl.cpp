// bench_nccl: NCCL collective bandwidth only (nccl-tests' algbw / busbw per collective and size), for the GPU
// check. Sizes in bytes may be given on the command line; without a device it prints a line and exits 0.
#include <cstdlib>
#include <vector>

#include "bench_util.hpp"
#include "parallel/nccl_collectives.hpp"

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(static_cast<std::size_t>(std::strtoull(argv[i], nullptr, 10)));
  if (sizes.empty()) sizes = {8u << 10, 256u << 10, 4u << 20, 64u << 20, 256u << 20};
  jitembed::bench::reporter rep;
  jitembed::bench::run_nccl_collectives(rep, sizes);
  rep.print();
  return 0;
}
