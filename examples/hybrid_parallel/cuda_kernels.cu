// The one translation unit that defines cuda_backend's kernels (parallel/cuda/kernels.hpp) for hybrid_parallel.
#include "jitembed/parallel/cuda/kernels.cuh"
