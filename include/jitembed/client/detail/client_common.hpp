// Pieces shared by the client's local and remote backends: stacking per-row outputs, completion bookkeeping.
#pragma once

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/model.hpp"

namespace jitembed::client::detail {

// Stacks one item's outputs per row into [N, ...] tensors; rows without outputs (failed) stay zeros.
// Every present row must agree on names, dtypes and shapes (a model's outputs do).
inline result<named_tensors> stack_rows(const std::vector<models::named_tensors>& rows,
                                                                       const std::vector<bool>& present) {
  const models::named_tensors* first = nullptr;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (present[i]) {
      first = &rows[i];
      break;
    }
  named_tensors out;
  if (!first) return out;
  for (std::size_t k = 0; k < first->size(); ++k) {
    const auto& [name, t0] = (*first)[k];
    shape s;
    s.push_back(static_cast<std::int64_t>(rows.size()));
    for (auto d : t0.shape()) s.push_back(d);
    tensor stacked = tensor::zeros(s, t0.dtype());
    const std::size_t row_bytes = t0.nbytes();
    auto* dst = static_cast<std::byte*>(stacked.data());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (!present[i]) continue;
      if (rows[i].size() != first->size() || rows[i][k].first != name || rows[i][k].second.dtype() != t0.dtype() ||
          rows[i][k].second.nbytes() != row_bytes) {
        return fail(errc::internal, "output '" + name + "' differs between rows of one request");
      }
      const tensor src = rows[i][k].second.is_contiguous() ? rows[i][k].second : rows[i][k].second.clone();
      if (row_bytes) std::memcpy(dst + i * row_bytes, src.data(), row_bytes);
    }
    out.emplace_back(name, std::move(stacked));
  }
  return out;
}

}  // namespace jitembed::client::detail
