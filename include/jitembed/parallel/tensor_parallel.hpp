// Megatron-style tensor-parallel layers with explicit forward/backward (no autograd): column- and
// row-parallel linear, vocab-parallel embedding, the column(GELU)→row MLP, each with a sequence-parallel
// variant, and the gradient sync of replicated parameters inside sequence-parallel regions. CPU, f32.
//
// Layout: weights [out, in] (nn.Linear); activations [..., hidden]. With sequence_parallel the activations
// outside the tensor-parallel region are sharded along `seq_dim` (default 0: [s, b, h] as Megatron; pass 1
// for [b, s, h]) and the full sequence length must be divisible by the degree. Each layer saves what its
// backward needs in forward(); backward() returns the input gradient and ACCUMULATES (+=) the parameter
// gradients until zero_grad(). Misuse (a wrong shape, dtype or device, backward() without forward()) is an
// invalid_argument naming the numbers, returned in the result (load_full, which returns void, throws it);
// a failed collective returns its own error.
//
// Construction: `create(comm, sizes..., options, backend)` with one options struct per layer, written with
// designated initializers (`{.bias = false, .sequence_parallel = true}`). A layer keeps a copy of the
// communicator (keep_communicator, communicator.hpp), so moving the caller's communicator afterwards leaves
// it valid.
#pragma once

#include "jitembed/parallel/column_parallel_linear.hpp"
#include "jitembed/parallel/row_parallel_linear.hpp"
#include "jitembed/parallel/sync_replicated_grads.hpp"
#include "jitembed/parallel/tensor_parallel_mlp.hpp"
#include "jitembed/parallel/vocab_parallel_embedding.hpp"
