// The parts of bench_codecs, one file per codec under benchmarks/codecs/.
#pragma once

#include "bench_util.hpp"

namespace jitembed::bench {
void run_zstd_benchmarks(reporter& r);   // benchmarks/codecs/zstd_bench.cpp
void run_jpeg_benchmarks(reporter& r);   // benchmarks/codecs/jpeg_bench.cpp
void run_video_benchmarks(reporter& r);  // benchmarks/codecs/video_bench.cpp
}  // namespace jitembed::bench
