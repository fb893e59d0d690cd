// wire_compression_options: when tensors are compressed for the wire (codec/zstd_wire.hpp), in its own header
// so that options structs holding it (client/options.hpp) do not parse zstd.
#pragma once

#include <cstddef>

namespace jitembed::codec {

struct wire_compression_options {
  int level = 1;                 // zstd level: fast (the link is what it saves, not disk)
  double min_saving = 0.10;      // send compressed only when it is at least this fraction smaller
  std::size_t min_bytes = 4096;  // smaller tensors always travel raw (the frame's overhead, the call's cost)
};

}  // namespace jitembed::codec
