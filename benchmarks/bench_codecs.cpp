// bench_codecs: jitembed's codecs against direct library calls on the same data, side by side.
// Usage: bench_codecs [zstd|jpeg|video ...]   (default: all)
#include <cstring>
#include <string>

#include "codecs/codec_benches.hpp"

int main(int argc, char** argv) {
  using namespace jitembed::bench;
  auto want = [&](const char* name) {
    if (argc < 2) return true;
    for (int i = 1; i < argc; ++i)
      if (std::strcmp(argv[i], name) == 0) return true;
    return false;
  };
  reporter r;
  if (want("zstd")) run_zstd_benchmarks(r);
  if (want("jpeg")) run_jpeg_benchmarks(r);
  if (want("video")) run_video_benchmarks(r);
  r.print();
  return 0;
}
