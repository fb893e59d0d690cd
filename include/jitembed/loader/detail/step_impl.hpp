// step::collate (loader/step.hpp): included there in header-only mode, from loader/src.hpp in separate
// compilation (core/config.hpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/config.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/core/tensor_stack.hpp"
#include "jitembed/loader/step.hpp"

namespace jitembed::loader {

JITEMBED_DECL result<tensor> step::collate(std::string_view name) const {
  std::vector<const tensor*> rows;
  rows.reserve(samples.size());
  for (const auto& s : samples) {
    if (!s.ok()) continue;
    const tensor* t = s.find(name);
    if (t == nullptr)
      return fail(errc::not_found, "collate: sample '" + s.id + "' (index " + std::to_string(s.index) +
                                       ") has no embedding '" + std::string(name) + "'");
    rows.push_back(t);
  }
  if (rows.empty())
    return fail(errc::invalid_argument,
                "collate: no sample of step " + std::to_string(index) + " has embedding '" + std::string(name) + "'");
  return stack(rows);
}

}  // namespace jitembed::loader
