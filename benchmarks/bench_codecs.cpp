// bench_codecs: jitembed's codecs against direct library calls on the same data, side by side.
// Usage: bench_codecs [zstd|jpeg|video ...]   (default: all)
#include <cstring>
#include <string>

#include "codecs/codec_benches.hpp"

int main(int argc, char** argv) {
  using namespace jitembed::bench;
  reporter r;
  if (wanted(argc, argv, "zstd")) run_zstd_benchmarks(r);
  if (wanted(argc, argv, "jpeg")) run_jpeg_benchmarks(r);
  if (wanted(argc, argv, "video")) run_video_benchmarks(r);
  r.print();
  return 0;
}
