// Umbrella header of the embedding service (component jitembed::server): config, model registry, routes;
// with JITEMBED_HAS_REPOSITORY (component jitembed::repository linked) the model repository too.
#pragma once

#include "jitembed/server/config.hpp"
#include "jitembed/server/model_instance.hpp"
#include "jitembed/server/model_spec.hpp"
#include "jitembed/server/model_status.hpp"
#include "jitembed/server/repository/model_source.hpp"
#include "jitembed/server/service.hpp"
#if defined(JITEMBED_HAS_REPOSITORY)
#include "jitembed/server/repository/backends.hpp"
#include "jitembed/server/repository/config.hpp"
#include "jitembed/server/repository/model_repository.hpp"
#endif
