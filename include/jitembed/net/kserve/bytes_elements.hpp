// BYTES tensor elements in Triton's serialization: each element is a uint32 little-endian length + its bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/byte_order.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::net::kserve {

namespace detail {
inline std::uint32_t load_u32le(const std::byte* p) noexcept { return load_le<std::uint32_t>(p); }
inline void store_u32le(std::byte* p, std::uint32_t v) noexcept { store_le(p, v); }
}  // namespace detail

// Calls f(std::string_view element) for each element of `buf`, in order. Fails (without calling f further)
// when a length prefix or an element runs past the end of the buffer, or when there are more than
// max_elements elements. Returns the element count.
template <class F>
result<std::uint64_t> for_each_bytes_element(bytes_view buf, F&& f,
                                             std::uint64_t max_elements = std::numeric_limits<std::uint64_t>::max()) {
  std::size_t off = 0;
  std::uint64_t n = 0;
  while (off < buf.size()) {
    if (n == max_elements) {
      return fail(errc::limit_exceeded, "BYTES: more than max_bytes_elements " + std::to_string(max_elements) + " elements");
    }
    if (buf.size() - off < 4) {
      return fail(errc::truncated, "BYTES element " + std::to_string(n) + ": length prefix at offset " + std::to_string(off) +
                                       " runs past the end of the " + std::to_string(buf.size()) + "-byte buffer");
    }
    const std::uint32_t len = detail::load_u32le(buf.data() + off);
    off += 4;
    if (len > buf.size() - off) {
      return fail(errc::truncated, "BYTES element " + std::to_string(n) + " at offset " + std::to_string(off - 4) + ": length " +
                                       std::to_string(len) + " runs past the end of the " + std::to_string(buf.size()) + "-byte buffer");
    }
    f(std::string_view(reinterpret_cast<const char*>(buf.data() + off), len));
    off += len;
    ++n;
  }
  return n;
}

// Element views into `buf`; fails unless there are exactly `expected` elements (the tensor's numel).
inline result<std::vector<std::string_view>> split_bytes_elements(bytes_view buf, std::uint64_t expected) {
  std::vector<std::string_view> out;
  // Every element takes at least 4 bytes, so a count past size/4 can be rejected before reserving.
  if (expected > buf.size() / 4) {
    return fail(errc::corrupt_data, "BYTES: " + std::to_string(buf.size()) + " bytes cannot hold " + std::to_string(expected) + " elements");
  }
  out.reserve(static_cast<std::size_t>(expected));
  auto n = for_each_bytes_element(buf, [&](std::string_view e) { out.push_back(e); }, expected);
  if (!n) {
    if (n.code() == errc::limit_exceeded) {
      return fail(errc::corrupt_data, "BYTES: more than the expected " + std::to_string(expected) + " elements");
    }
    return n.error();
  }
  if (*n != expected) {
    return fail(errc::corrupt_data, "BYTES: " + std::to_string(*n) + " elements, expected " + std::to_string(expected));
  }
  return out;
}

// Appends the elements of `range` (anything convertible to std::string_view) to `out`.
template <class Range>
result<void> encode_bytes_elements(byte_buffer& out, const Range& range) {
  for (const auto& item : range) {
    const std::string_view e(item);
    if (e.size() > std::numeric_limits<std::uint32_t>::max()) {
      return fail(errc::limit_exceeded, "BYTES: element of " + std::to_string(e.size()) + " bytes > 4 GiB - 1");
    }
    const std::size_t at = out.size();
    out.resize(at + 4 + e.size());
    detail::store_u32le(out.data() + at, static_cast<std::uint32_t>(e.size()));
    if (!e.empty()) std::memcpy(out.data() + at + 4, e.data(), e.size());
  }
  return {};
}

template <class Range>
result<byte_buffer> encode_bytes_elements(const Range& range) {
  byte_buffer out;
  JITEMBED_TRY(encode_bytes_elements(out, range));
  return out;
}

inline result<byte_buffer> encode_bytes_elements(std::initializer_list<std::string_view> elements) {
  return encode_bytes_elements<std::initializer_list<std::string_view>>(elements);
}

}  // namespace jitembed::net::kserve
