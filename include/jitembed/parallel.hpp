// Umbrella header of the parallelism components: communicators (Gloo on CPU, NCCL on CUDA when linked),
// placements and redistribute, Megatron tensor-parallel layers, Ulysses attention, hybrid plans and the
// boundary transform, two-stage pipeline schedules, a local process launcher, CPU math.
#pragma once

#include "jitembed/parallel/backend.hpp"
#include "jitembed/parallel/boundary.hpp"
#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/copy2d.hpp"
#include "jitembed/parallel/functional.hpp"
#include "jitembed/parallel/host_staged.hpp"
#include "jitembed/parallel/hybrid.hpp"
#include "jitembed/parallel/local_launch.hpp"
#include "jitembed/parallel/mappings.hpp"
#include "jitembed/parallel/math.hpp"
#include "jitembed/parallel/pipeline_schedule.hpp"
#include "jitembed/parallel/placement.hpp"
#include "jitembed/parallel/shard.hpp"
#include "jitembed/parallel/store.hpp"
#include "jitembed/parallel/tensor_parallel.hpp"
#include "jitembed/parallel/ulysses.hpp"
// jitembed/parallel/tcp_store.hpp (component jitembed::tcp_store, Boost.Asio) is included explicitly,
// like jitembed/net/http.hpp: the umbrella headers stay free of Asio.
#if defined(JITEMBED_HAS_GLOO)
#include "jitembed/parallel/gloo.hpp"
#endif
#if defined(JITEMBED_HAS_NCCL)
#include "jitembed/parallel/nccl.hpp"
#include "jitembed/parallel/cuda/attention.hpp"
#include "jitembed/parallel/cuda/backend.hpp"
#include "jitembed/parallel/cuda/copy2d.hpp"
#include "jitembed/parallel/cuda/gemm.hpp"
#include "jitembed/parallel/cuda/host_staged.hpp"
#include "jitembed/parallel/cuda/kernels.hpp"
#endif
