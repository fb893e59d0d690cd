// Tensor data as JSON "data" arrays: to and from the binary layout, for every datatype but FP16/BF16
// (Triton accepts those only in the binary extension). BYTES elements are JSON strings.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/net/kserve/bytes_elements.hpp"
#include "jitembed/net/kserve/datatype.hpp"
#include "jitembed/net/kserve/detail/json_writer.hpp"
#include "jitembed/net/kserve/message.hpp"

namespace jitembed::net::kserve {

namespace detail {

// Leaves of a (possibly nested, as Triton allows) data array, in row-major order.
template <class F>
bool for_each_leaf(const json& v, F& f, std::size_t depth) {
  if (!v.is_array()) return f(v);
  if (depth == 0) return false;
  for (const auto& e : v)
    if (!for_each_leaf(e, f, depth - 1)) return false;
  return true;
}

template <class T>
bool json_to_int(const json& v, T& out) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return false;
    out = static_cast<T>(u);
    return true;
  }
  if (v.is_number_integer()) {
    const auto s = v.get<std::int64_t>();
    if constexpr (std::is_unsigned_v<T>) {
      if (s < 0 || static_cast<std::uint64_t>(s) > std::numeric_limits<T>::max()) return false;
    } else {
      if (s < std::numeric_limits<T>::min() || s > std::numeric_limits<T>::max()) return false;
    }
    out = static_cast<T>(s);
    return true;
  }
  return false;
}

template <class T>
void store(byte_buffer& out, std::size_t i, T v) {
  std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
}

}  // namespace detail

// Converts a JSON "data" array of `numel` elements to the binary layout. `what` names the tensor in
// messages ("input 'x'").
inline result<byte_buffer> json_data_to_bytes(const json& data, datatype type, std::uint64_t numel, std::string_view what,
                                              std::size_t max_depth = 32) {
  const std::string w(what);
  if (binary_only(type)) {
    return fail(errc::invalid_argument, w + ": " + std::string(to_string(type)) +
                                            " data cannot be sent as JSON; use the binary data extension");
  }
  if (!data.is_array()) return fail(errc::invalid_argument, w + ": \"data\" is not an array");
  // Count (and for BYTES size) the leaves before allocating anything.
  std::uint64_t count = 0;
  std::uint64_t bytes_total = 0;
  std::string bad;
  auto counter = [&](const json& leaf) {
    if (type == datatype::bytes) {
      if (!leaf.is_string()) {
        bad = w + ": data element " + std::to_string(count) + " is not a string";
        return false;
      }
      bytes_total += 4 + leaf.get_ref<const std::string&>().size();
    }
    ++count;
    return true;
  };
  if (!detail::for_each_leaf(data, counter, max_depth)) {
    if (!bad.empty()) return fail(errc::invalid_argument, bad);
    return fail(errc::limit_exceeded, w + ": \"data\" nested too deeply");
  }
  if (count != numel) {
    return fail(errc::invalid_argument, w + ": \"data\" has " + std::to_string(count) + " elements, shape needs " + std::to_string(numel));
  }
  if (type == datatype::bytes) {  // the strings counted above, in the binary layout
    std::vector<std::string_view> elements;
    elements.reserve(static_cast<std::size_t>(count));
    auto add = [&](const json& leaf) {
      elements.emplace_back(leaf.get_ref<const std::string&>());
      return true;
    };
    detail::for_each_leaf(data, add, max_depth);
    byte_buffer out;
    out.reserve(static_cast<std::size_t>(bytes_total));
    if (auto r = encode_bytes_elements(out, elements); !r) return fail(r.code(), w + ": " + r.error().message);
    return out;
  }
  byte_buffer out(static_cast<std::size_t>(numel) * element_size(type));
  std::size_t i = 0;
  auto convert = [&](const json& leaf) -> bool {
    auto int_elem = [&](auto tag) {
      using T = decltype(tag);
      T v{};
      if (!detail::json_to_int(leaf, v)) {
        bad = w + ": data element " + std::to_string(i) + " is not an integer in range of " + std::string(to_string(type));
        return false;
      }
      detail::store(out, i++, v);
      return true;
    };
    switch (type) {
      case datatype::boolean: {
        if (!leaf.is_boolean()) {
          bad = w + ": data element " + std::to_string(i) + " is not a boolean";
          return false;
        }
        out[i++] = static_cast<std::byte>(leaf.get<bool>() ? 1 : 0);
        return true;
      }
      case datatype::uint8: return int_elem(std::uint8_t{});
      case datatype::uint16: return int_elem(std::uint16_t{});
      case datatype::uint32: return int_elem(std::uint32_t{});
      case datatype::uint64: return int_elem(std::uint64_t{});
      case datatype::int8: return int_elem(std::int8_t{});
      case datatype::int16: return int_elem(std::int16_t{});
      case datatype::int32: return int_elem(std::int32_t{});
      case datatype::int64: return int_elem(std::int64_t{});
      case datatype::fp32:
      case datatype::fp64: {
        if (!leaf.is_number()) {
          bad = w + ": data element " + std::to_string(i) + " is not a number";
          return false;
        }
        const double d = leaf.get<double>();
        if (type == datatype::fp32) {
          detail::store(out, i++, static_cast<float>(d));
        } else {
          detail::store(out, i++, d);
        }
        return true;
      }
      default: return false;
    }
  };
  if (!detail::for_each_leaf(data, convert, max_depth)) return fail(errc::invalid_argument, bad.empty() ? w + ": bad data" : bad);
  return out;
}

// Appends the tensor's elements as a flat JSON array, written as tritonclient writes them.
inline result<void> write_json_data(std::string& out, const infer_tensor& t, std::string_view what) {
  const std::string w(what);
  if (binary_only(t.type)) {
    return fail(errc::invalid_argument, w + ": " + std::string(to_string(t.type)) +
                                            " data cannot be sent as JSON; use the binary data extension");
  }
  out += '[';
  if (t.type == datatype::bytes) {
    bool first = true;
    bool utf8 = true;
    std::uint64_t index = 0;
    std::uint64_t bad_index = 0;
    auto n = for_each_bytes_element(t.data, [&](std::string_view e) {
      if (!utf8) return;
      if (!first) out += ',';
      first = false;
      if (!detail::write_json_string(out, e)) utf8 = false, bad_index = index;
      ++index;
    });
    if (!n) return fail(n.code(), w + ": " + n.error().message);
    if (!utf8) {
      return fail(errc::invalid_utf8, w + ": BYTES element " + std::to_string(bad_index) +
                                          " is not valid UTF-8; send it as binary data");
    }
    out += ']';
    return {};
  }
  const std::size_t es = element_size(t.type);
  const std::size_t n = t.data.size() / es;
  const std::byte* p = t.data.data();
  for (std::size_t i = 0; i < n; ++i, p += es) {
    if (i) out += ',';
    auto load = [&](auto tag) {
      decltype(tag) v;
      std::memcpy(&v, p, sizeof(v));
      return v;
    };
    switch (t.type) {
      case datatype::boolean: out += (static_cast<unsigned>(*p) != 0) ? "true" : "false"; break;
      case datatype::uint8: out += std::to_string(load(std::uint8_t{})); break;
      case datatype::uint16: out += std::to_string(load(std::uint16_t{})); break;
      case datatype::uint32: out += std::to_string(load(std::uint32_t{})); break;
      case datatype::uint64: out += std::to_string(load(std::uint64_t{})); break;
      case datatype::int8: out += std::to_string(load(std::int8_t{})); break;
      case datatype::int16: out += std::to_string(load(std::int16_t{})); break;
      case datatype::int32: out += std::to_string(load(std::int32_t{})); break;
      case datatype::int64: out += std::to_string(load(std::int64_t{})); break;
      case datatype::fp32:
      case datatype::fp64: {
        const double d = t.type == datatype::fp32 ? static_cast<double>(load(float{})) : load(double{});
        if (!detail::write_json_double(out, d)) {
          return fail(errc::invalid_argument, w + ": element " + std::to_string(i) +
                                                  " is NaN or infinite, which JSON cannot carry; send it as binary data");
        }
        break;
      }
      default: return fail(errc::internal, w + ": unexpected datatype");
    }
  }
  out += ']';
  return {};
}

}  // namespace jitembed::net::kserve
