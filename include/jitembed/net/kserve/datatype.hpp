// KServe v2 tensor datatypes ("BOOL" ... "BYTES"): names, element sizes and the mapping to jitembed::dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "jitembed/core/dtype.hpp"

namespace jitembed::net::kserve {

enum class datatype : std::uint8_t {
  boolean,
  uint8,
  uint16,
  uint32,
  uint64,
  int8,
  int16,
  int32,
  int64,
  fp16,
  bf16,
  fp32,
  fp64,
  bytes,
};

inline constexpr int kDatatypeCount = 14;

constexpr std::string_view to_string(datatype t) noexcept {
  switch (t) {
    case datatype::boolean: return "BOOL";
    case datatype::uint8: return "UINT8";
    case datatype::uint16: return "UINT16";
    case datatype::uint32: return "UINT32";
    case datatype::uint64: return "UINT64";
    case datatype::int8: return "INT8";
    case datatype::int16: return "INT16";
    case datatype::int32: return "INT32";
    case datatype::int64: return "INT64";
    case datatype::fp16: return "FP16";
    case datatype::bf16: return "BF16";
    case datatype::fp32: return "FP32";
    case datatype::fp64: return "FP64";
    case datatype::bytes: return "BYTES";
  }
  return "INVALID";
}

// Exact, case-sensitive, as Triton parses it.
constexpr std::optional<datatype> datatype_from_string(std::string_view s) noexcept {
  for (int i = 0; i < kDatatypeCount; ++i) {
    const auto t = static_cast<datatype>(i);
    if (to_string(t) == s) return t;
  }
  return std::nullopt;
}

// Bytes per element; 0 for BYTES (variable-length elements).
constexpr std::size_t element_size(datatype t) noexcept {
  switch (t) {
    case datatype::boolean:
    case datatype::uint8:
    case datatype::int8: return 1;
    case datatype::uint16:
    case datatype::int16:
    case datatype::fp16:
    case datatype::bf16: return 2;
    case datatype::uint32:
    case datatype::int32:
    case datatype::fp32: return 4;
    case datatype::uint64:
    case datatype::int64:
    case datatype::fp64: return 8;
    case datatype::bytes: return 0;
  }
  return 0;
}

// Triton accepts these only in the binary extension, never as JSON "data".
constexpr bool binary_only(datatype t) noexcept { return t == datatype::fp16 || t == datatype::bf16; }

// jitembed::dtype has no UINT16/32/64 and no BYTES: those map to nullopt.
constexpr std::optional<dtype> to_dtype(datatype t) noexcept {
  switch (t) {
    case datatype::boolean: return dtype::boolean;
    case datatype::uint8: return dtype::u8;
    case datatype::int8: return dtype::i8;
    case datatype::int16: return dtype::i16;
    case datatype::int32: return dtype::i32;
    case datatype::int64: return dtype::i64;
    case datatype::fp16: return dtype::f16;
    case datatype::bf16: return dtype::bf16;
    case datatype::fp32: return dtype::f32;
    case datatype::fp64: return dtype::f64;
    default: return std::nullopt;
  }
}

constexpr datatype from_dtype(dtype t) noexcept {
  switch (t) {
    case dtype::boolean: return datatype::boolean;
    case dtype::u8: return datatype::uint8;
    case dtype::i8: return datatype::int8;
    case dtype::i16: return datatype::int16;
    case dtype::i32: return datatype::int32;
    case dtype::i64: return datatype::int64;
    case dtype::f16: return datatype::fp16;
    case dtype::bf16: return datatype::bf16;
    case dtype::f32: return datatype::fp32;
    case dtype::f64: return datatype::fp64;
  }
  return datatype::uint8;
}

// The KServe datatype of a C++ element type (bool, fixed-width ints, float16/bfloat16, float, double).
template <class T>
struct datatype_of;
template <> struct datatype_of<bool> { static constexpr datatype value = datatype::boolean; };
template <> struct datatype_of<std::uint8_t> { static constexpr datatype value = datatype::uint8; };
template <> struct datatype_of<std::uint16_t> { static constexpr datatype value = datatype::uint16; };
template <> struct datatype_of<std::uint32_t> { static constexpr datatype value = datatype::uint32; };
template <> struct datatype_of<std::uint64_t> { static constexpr datatype value = datatype::uint64; };
template <> struct datatype_of<std::int8_t> { static constexpr datatype value = datatype::int8; };
template <> struct datatype_of<std::int16_t> { static constexpr datatype value = datatype::int16; };
template <> struct datatype_of<std::int32_t> { static constexpr datatype value = datatype::int32; };
template <> struct datatype_of<std::int64_t> { static constexpr datatype value = datatype::int64; };
template <> struct datatype_of<float16> { static constexpr datatype value = datatype::fp16; };
template <> struct datatype_of<bfloat16> { static constexpr datatype value = datatype::bf16; };
template <> struct datatype_of<float> { static constexpr datatype value = datatype::fp32; };
template <> struct datatype_of<double> { static constexpr datatype value = datatype::fp64; };

template <class T>
inline constexpr datatype datatype_of_v = datatype_of<T>::value;

}  // namespace jitembed::net::kserve
