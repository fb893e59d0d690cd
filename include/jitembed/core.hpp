// Umbrella header of the core component.
#pragma once

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/byte_order.hpp"
#include "jitembed/core/cuda_ipc.hpp"
#include "jitembed/core/dlpack.hpp"
#include "jitembed/core/dtype.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/core/json_string.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/named_tensors.hpp"
#include "jitembed/core/preprocess_params.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/core/tensor_stack.hpp"
#include "jitembed/core/thread_pool.hpp"
#include "jitembed/core/utf8.hpp"
