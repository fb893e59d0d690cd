// jitembed._Model's handle (python/src/model.cpp): the Python callable's state and the model_config the server
// loads it with (jitembed.Server(models=[...]), Server.load).
#pragma once

#include <memory>

#include "common.hpp"
#include "jitembed/models/any_model.hpp"
#include "jitembed/server/config.hpp"

namespace jitembed::python {

struct py_model_handle {
  // The callable's state (model.cpp's callable_state): shared by every served copy (served()); only the handle
  // holds it while state.use_count() == 1, and only then does the garbage collector see `fn` through the handle
  // (a callable whose globals reference its Model is a cycle it can then collect).
  std::shared_ptr<const void> state;
  PyObject* fn = nullptr;             // borrowed from `state` (for tp_traverse)
  PyObject* preprocess_fn = nullptr;  // the same, for a Python preprocessing callable (or nullptr)
  server::model_config config;

  // A served copy: the model the server's registry holds (it shares `state`).
  models::any_model served() const;
};

}  // namespace jitembed::python
