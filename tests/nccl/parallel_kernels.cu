// The one translation unit that defines cuda_backend's kernels (parallel/cuda/kernels.hpp) for test_parallel_cuda.
#include "jitembed/parallel/cuda/kernels.cuh"
