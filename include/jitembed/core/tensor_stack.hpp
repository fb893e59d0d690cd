// stack(): same-shaped CPU tensors into one contiguous [N, ...] tensor (one copy), the collate of a
// training step (client::step::collate) and of the Python loader's arrays.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed {

// Stacks rows[0..N) along a new leading dimension. Every row must be a defined CPU tensor with the first
// row's dtype and shape (invalid_argument naming the row and both shapes otherwise); strided rows are
// gathered. An empty span gives invalid_argument (the item shape is unknown); a shape of rank kMaxDims
// cannot take the extra dimension (limit_exceeded).
inline result<tensor> stack(std::span<const tensor* const> rows) {
  if (rows.empty()) return fail(errc::invalid_argument, "stack: no rows (the item shape is unknown)");
  const tensor* first = rows[0];
  if (first == nullptr || !first->defined()) return fail(errc::invalid_argument, "stack: row 0 is missing");
  if (first->rank() >= kMaxDims)
    return fail(errc::limit_exceeded, "stack: rows of rank " + std::to_string(first->rank()) + " leave no room for the batch dimension");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const tensor* t = rows[i];
    if (t == nullptr || !t->defined()) return fail(errc::invalid_argument, "stack: row " + std::to_string(i) + " is missing");
    if (!t->device().is_cpu()) return fail(errc::invalid_argument, "stack: row " + std::to_string(i) + " is not on the CPU");
    if (t->dtype() != first->dtype() || t->shape() != first->shape())
      return fail(errc::invalid_argument, "stack: row " + std::to_string(i) + " is " + std::string(to_string(t->dtype())) +
                                              t->shape().to_string() + ", row 0 is " + std::string(to_string(first->dtype())) +
                                              first->shape().to_string());
  }
  shape s;
  s.push_back(static_cast<std::int64_t>(rows.size()));
  for (auto d : first->shape()) s.push_back(d);
  auto bytes = checked_nbytes(s.span(), first->dtype());
  if (!bytes) return bytes.error();
  tensor out = tensor::empty(s, first->dtype());
  const std::size_t row_bytes = first->nbytes();
  auto* dst = static_cast<std::byte*>(out.data());
  for (const tensor* t : rows) {
    if (row_bytes) {
      if (t->is_contiguous()) {
        std::memcpy(dst, t->data(), row_bytes);
      } else {
        const tensor c = t->clone();
        std::memcpy(dst, c.data(), row_bytes);
      }
    }
    dst += row_bytes;
  }
  return out;
}

}  // namespace jitembed
