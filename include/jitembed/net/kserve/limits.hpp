// protocol_limits: bounds a KServe request/response decoder enforces before it allocates or walks data.
#pragma once

#include <cstddef>
#include <cstdint>

namespace jitembed::net::kserve {

struct protocol_limits {
  std::size_t max_header_bytes = std::size_t{1} << 20;  // the JSON inference header
  std::size_t max_body_bytes = std::size_t{64} << 20;   // header + binary section
  std::size_t max_tensors = 256;                        // inputs, and requested/returned outputs, each
  std::size_t max_dims = 8;                             // rank of one tensor
  std::uint64_t max_bytes_elements = std::uint64_t{1} << 20;  // elements of one BYTES tensor
  std::size_t max_json_depth = 32;                      // nesting of the JSON header
  std::size_t max_object_keys = 256;                    // keys in one JSON object (bounds parse cost)
};

}  // namespace jitembed::net::kserve
