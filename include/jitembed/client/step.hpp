// Deprecated forwarding header, kept for one release: step and embedded_sample moved to jitembed/loader/step.hpp
// (namespace jitembed::loader, component jitembed::loader; CHANGELOG). The old names warn where used.
#pragma once

#include "jitembed/loader/step.hpp"

namespace jitembed::client {

using embedded_sample [[deprecated("jitembed::loader::embedded_sample (jitembed/loader/step.hpp)")]] =
    loader::embedded_sample;
using step [[deprecated("jitembed::loader::step (jitembed/loader/step.hpp)")]] = loader::step;

}  // namespace jitembed::client
