// What jit_loader::next() hands out: one training step's samples, each with its embeddings or the error
// that failed it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::client {

struct loaded_sample {
  std::uint64_t index = 0;   // position in the data set (format::dataset::get(index))
  std::string id;            // the data set's stable sample id ("" when reading the sample failed)
  // One tensor per embedding_spec the sample has a field for: that sample's row, without the leading N.
  // Tensors share the response or cache buffer they came from (no copy).
  std::vector<std::pair<std::string, tensor>> embeddings;
  // Set when the sample failed (unreadable, bad field, a model rejected it, the service gave up): its
  // errc says why; embeddings is then empty. A failed sample is delivered like any other, never dropped.
  std::optional<error_info> error;

  bool ok() const noexcept { return !error.has_value(); }
  const tensor* find(std::string_view name) const noexcept {
    for (const auto& [n, t] : embeddings)
      if (n == name) return &t;
    return nullptr;
  }
};

struct batch {
  std::uint64_t epoch = 0;
  std::uint64_t step = 0;               // 0-based step within the epoch
  std::vector<loaded_sample> samples;   // batch_size, fewer in an epoch's last step (possibly none on a short rank)
};

}  // namespace jitembed::client
