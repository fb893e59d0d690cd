// docs/api.md rule 1.1 for the parallel component: a function that returns result<T> reports every failure
// through it, including what the helpers it calls throw (core_detail::capture, core/detail/capture.hpp).
#pragma once

#include "jitembed/core/detail/capture.hpp"

namespace jitembed::parallel::detail {

using jitembed::core_detail::capture;

}  // namespace jitembed::parallel::detail
