// CPU f32 reference neural-net math, forward and backward: GEMM (CBLAS/OpenBLAS), linear, GELU, LayerNorm,
// attention, embedding, cross-entropy. The single-rank baseline the parallel layers are checked against.
//
// Conventions: every tensor is an f32 (ids/targets: i64), contiguous, CPU tensor_view; shapes follow PyTorch
// (activations [..., hidden], weights [out, in], attention [B, S, H, D]). Outputs are written through the
// views passed in; parameters documented "accumulated" are added to (+=), "overwritten" are replaced.
// Outputs must not alias inputs unless a function says so. The ops return nothing and fail only by
// throwing jitembed::error (docs/api.md rule 1.2) with errc::dtype_mismatch (wrong dtype) or
// errc::invalid_argument (shape, device, layout, id out of range), message "<function>: <what>, got <shape>".
#pragma once

#include "jitembed/nn/attention.hpp"
#include "jitembed/nn/cross_entropy.hpp"
#include "jitembed/nn/elementwise.hpp"
#include "jitembed/nn/embedding.hpp"
#include "jitembed/nn/gelu.hpp"
#include "jitembed/nn/gemm.hpp"
#include "jitembed/nn/layer_norm.hpp"
#include "jitembed/nn/linear.hpp"
#include "jitembed/nn/pointwise.hpp"
