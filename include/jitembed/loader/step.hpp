// What jit_loader hands out: one training step (loader::step) of samples (loader::embedded_sample), each with
// its embeddings or the error that failed it, and the step's field as one [B, ...] tensor (collate).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/config.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/named_tensors.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::loader {

struct embedded_sample {
  std::uint64_t index = 0;   // position in the data set (format::dataset::get(index))
  std::string id;            // the data set's stable sample id ("" when reading the sample failed)
  // One tensor per embedding_spec the sample has a field for: that sample's row, without the leading N.
  // Lifetime: the tensors share the response body or cache value they came from (an LMDB value pins its read
  // snapshot's pages until the last tensor goes). Use a step and drop it; to keep rows, own() or collate().
  named_tensors embeddings;
  // Set when the sample failed (unreadable, bad field, a model rejected it, the service gave up): its
  // errc says why; embeddings is then empty. A failed sample is delivered like any other, never dropped.
  std::optional<error_info> error;

  bool ok() const noexcept { return !error.has_value(); }
  const tensor* find(std::string_view name) const noexcept { return find_tensor(embeddings, name); }
  // Replaces every embedding by a deep copy in its own storage, releasing the response / cache buffers.
  void own() {
    for (auto& [n, t] : embeddings) t = t.clone();
  }
};

struct step {
  std::uint64_t epoch = 0;
  std::uint64_t index = 0;              // 0-based step within the epoch
  std::vector<embedded_sample> samples;   // batch_size, fewer in an epoch's last step (possibly none on a short rank)

  // The samples that did not fail, in order (the rows of collate()).
  std::size_t ok_count() const noexcept {
    std::size_t n = 0;
    for (const auto& s : samples) n += s.ok() ? 1 : 0;
    return n;
  }
  // Embedding `name` of every sample that did not fail, stacked in sample order into one contiguous
  // [ok_count(), ...] tensor in its own storage (one copy; it pins no response or cache buffer). Errors:
  // not_found when a sample that did not fail has no `name` (its spec's field kind is missing from the
  // sample: collate per sample then), invalid_argument when rows differ in dtype or shape (a model whose
  // output extent varies), or when no sample succeeded (the item shape is unknown).
  result<tensor> collate(std::string_view name) const;
};

}  // namespace jitembed::loader

// collate(), defined out of line: here header-only, in loader/src.hpp with JITEMBED_SEPARATE_COMPILATION
// (core/config.hpp), so a trainer's TU does not compile the stacking (and the allocation it charges) again.
#if defined(JITEMBED_HEADER_ONLY)
#include "jitembed/loader/detail/step_impl.hpp"
#endif
