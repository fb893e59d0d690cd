// What a model repository hands a backend to make one model version (backend_config), and the backend's
// signature (backend_factory): plain data, no protobuf, so a backend (LibTorch's, in the torch component)
// does not depend on the repository's parser.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "jitembed/core/dtype.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/any_model.hpp"

namespace jitembed::models {

// One declared input or output: Triton's data type name ("TYPE_FP32") and its dtype where there is one
// (TYPE_STRING has none).
struct backend_tensor {
  std::string name;
  std::string data_type;
  std::optional<dtype> type;
  std::vector<std::int64_t> dims;  // item dims, no batch dim; -1: variable
};

struct backend_config {
  std::string name;                        // the model's name (part of every cache key)
  std::string config_file;                 // the config.pbtxt (messages name it)
  std::string kind;                        // the platform / backend name that chose this backend
  std::filesystem::path version_dir;       // <repository>/<model>/<version>
  std::string model_filename;              // default_model_filename, or "" for the backend's default
  std::size_t max_batch_size = 0;          // 0: the model has no batch dimension
  std::vector<backend_tensor> inputs, outputs;
  std::map<std::string, std::string> parameters;  // the config's parameters (string_value)
  jitembed::device device = jitembed::device::cpu();              // where instances run (instance_group)
};

// Makes one model version. Errors name the config file and the field or file at fault: invalid_argument
// (a setting the backend refuses, dims that disagree with the module), not_found (no model file),
// decode_failed (a file that is not a model), unsupported_format (a backend that is not linked).
using backend_factory = std::function<result<any_model>(const backend_config&)>;

}  // namespace jitembed::models
