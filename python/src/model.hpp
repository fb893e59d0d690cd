// jitembed._Model's handle (python/src/model.cpp): the served model and the model_config the server loads it
// with (jitembed.Server(models=[...]), Server.load).
#pragma once

#include "jitembed/models/any_model.hpp"
#include "jitembed/server/config.hpp"

namespace jitembed::python {

struct py_model_handle {
  models::any_model model;
  server::model_config config;
};

}  // namespace jitembed::python
