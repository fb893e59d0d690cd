// gather_list: a record or batch as a list of byte pieces (header, payload views, padding) whose
// concatenation is the encoded bytes, for writev-style I/O without joining them first.
#pragma once

#include <cstddef>
#include <cstring>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::format {

struct gather_list {
  std::vector<byte_buffer> storage;  // bytes the pieces point into that the builder made (headers, tables)
  std::vector<bytes_view> pieces;    // in order; payload pieces point into the caller's memory
  std::size_t size = 0;              // total bytes

  // Joins the pieces into out (out.size() >= size); returns size.
  result<std::size_t> copy_to(mutable_bytes out) const {
    if (out.size() < size)
      return fail(errc::buffer_too_small, "gather: output of " + std::to_string(out.size()) + " bytes < " + std::to_string(size));
    std::size_t pos = 0;
    for (auto p : pieces) {
      if (!p.empty()) std::memcpy(out.data() + pos, p.data(), p.size());
      pos += p.size();
    }
    return pos;
  }

  byte_buffer join() const {
    byte_buffer out(size);
    (void)copy_to(out);
    return out;
  }
};

}  // namespace jitembed::format
