// Umbrella header of the CUDA component (host side; kernels are in jitembed/cuda/*.cuh, for nvcc).
#pragma once

#include "jitembed/cuda/buffer.hpp"
#include "jitembed/cuda/check.hpp"
#include "jitembed/cuda/ipc_backend.hpp"
#include "jitembed/cuda/pinned_pool.hpp"
#include "jitembed/cuda/stream.hpp"
