// named_tensors: tensors by name, in order (one item's model outputs, a request's stacked outputs, a
// delivered sample's embeddings): one list type and one lookup.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/tensor.hpp"

namespace jitembed {

using named_tensors = std::vector<std::pair<std::string, tensor>>;

// The first tensor named `name`, or nullptr.
inline const tensor* find_tensor(const named_tensors& list, std::string_view name) noexcept {
  for (const auto& [n, t] : list)
    if (n == name) return &t;
  return nullptr;
}

}  // namespace jitembed
