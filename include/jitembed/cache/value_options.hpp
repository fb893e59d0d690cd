// value_options: how cache values (cache/value.hpp) encode their tensors, in its own header so that options
// structs holding it (loader/options.hpp) do not parse the record builder and zstd.
#pragma once

#include <cstdint>
#include <optional>

#include "jitembed/core/dtype.hpp"
#include "jitembed/format/field.hpp"

namespace jitembed::cache {

struct value_options {
  format::compression compression = format::compression::raw;
  int level = 3;  // zstd level
  // Byte-shuffle element size before zstd (0, 2, 4, 8); nullopt = auto: the element size of f16 / bf16
  // (2), f32 (4) and f64 (8), none for integer and bool tensors.
  std::optional<std::uint8_t> shuffle;
  // With zstd: store a tensor raw instead when compression does not save at least one 64-byte block
  // (embeddings are often incompressible; a raw field decodes zero-copy).
  bool raw_if_not_smaller = true;
};

// The shuffle value_options picks for a dtype when `shuffle` is nullopt.
constexpr std::uint8_t auto_shuffle(dtype t) noexcept {
  switch (t) {
    case dtype::f16:
    case dtype::bf16: return 2;
    case dtype::f32: return 4;
    case dtype::f64: return 8;
    default: return 0;
  }
}

}  // namespace jitembed::cache
