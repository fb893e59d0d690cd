// jitembed-server's GPU model factory, compiled by nvcc (tools/server_gpu_models.cu) when the CUDA component
// is built: the CUDA reference embedders live in .cuh headers that only nvcc can compile.
#pragma once

#include <string_view>

#include "jitembed/models/any_model.hpp"
#include "jitembed/models/reference.hpp"

namespace jitembed::tools {

// The CUDA implementation of reference model `name` on device `ordinal`; errc::not_found when there is no
// such device or no CUDA implementation of `name` (the caller then uses the CPU model).
result<models::any_model> make_gpu_reference_model(std::string_view name, const models::reference_options& o, int ordinal);

}  // namespace jitembed::tools
