// Umbrella header of the embedding service (component jitembed::server): config, model registry, routes.
#pragma once

#include "jitembed/server/config.hpp"
#include "jitembed/server/model_instance.hpp"
#include "jitembed/server/model_spec.hpp"
#include "jitembed/server/model_status.hpp"
#include "jitembed/server/service.hpp"
