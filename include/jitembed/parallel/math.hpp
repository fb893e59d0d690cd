// Compatibility: the reference math moved to its own area, jitembed/nn.hpp (namespace jitembed::nn).
// parallel::math names the same functions; new code includes the jitembed/nn/ headers it uses.
#pragma once

#include "jitembed/nn.hpp"

namespace jitembed::parallel {
namespace math = ::jitembed::nn;
}  // namespace jitembed::parallel
