// Host-callable entry points of tests/cuda/kernels.cu (doctest code is compiled by the host compiler only).
#pragma once

#include "jitembed/core/tensor.hpp"
#include "jitembed/cuda/stream.hpp"

namespace jitembed::cuda::test {
// Runs normalize_hwc_to_chw from preprocess.cuh on device copies of `in` (u8 [N,H,W,C], CPU) and returns
// the CPU result in `out_dtype`.
tensor normalize_on_device(const tensor& in, dtype out_dtype, const float* mean, const float* stdev);
}  // namespace jitembed::cuda::test
