// bench_nccl: NCCL collective bandwidth only (nccl-tests' algbw / busbw per collective and size), for the GPU
// check. Sizes in bytes may be given on the command line; without a device it prints a line and exits 0.
#include <vector>

#include "bench_util.hpp"
#include "parallel/nccl_collectives.hpp"

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes;
  jitembed::bench::command_line cli{"bench_nccl: NCCL collective bandwidth (nccl-tests' algbw / busbw) per collective and size"};
  cli.app.add_option("SIZE", sizes, "message sizes in bytes (default: 8 KiB, 256 KiB, 4 MiB, 64 MiB, 256 MiB)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(cli.app, argc, argv);
  if (sizes.empty()) sizes = {8u << 10, 256u << 10, 4u << 20, 64u << 20, 256u << 20};
  jitembed::bench::reporter rep;
  jitembed::bench::run_nccl_collectives(rep, sizes);
  rep.print();
  return 0;
}
