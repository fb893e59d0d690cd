// bench_codecs: jitembed's codecs against direct library calls on the same data, side by side.
// Usage: bench_codecs [zstd|jpeg|video ...]   (default: all; --help)
#include <string>

#include "codecs/codec_benches.hpp"

int main(int argc, char** argv) {
  using namespace jitembed::bench;
  command_line cli{"bench_codecs: jitembed's codecs against direct library calls on the same data", {"zstd", "jpeg", "video"}};
  CLI11_PARSE(cli.app, argc, argv);
  reporter r;
  if (cli.wanted("zstd")) run_zstd_benchmarks(r);
  if (cli.wanted("jpeg")) run_jpeg_benchmarks(r);
  if (cli.wanted("video")) run_video_benchmarks(r);
  r.print();
  return 0;
}
