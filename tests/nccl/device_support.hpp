// What the GPU tests of this folder share: whether a device is here (without one they print the line ctest
// reports as skipped).
#pragma once

#include <cstdio>

#include "jitembed/cuda/check.hpp"

namespace cuda_test {

inline bool have_device() {
  if (jitembed::cuda::device_count() > 0) return true;
  std::printf("no CUDA device: skipping\n");
  return false;
}

}  // namespace cuda_test
