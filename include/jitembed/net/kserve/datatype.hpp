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

// One row per datatype, in the enum's order: its name, bytes per element (0 for BYTES: variable-length
// elements) and its jitembed::dtype (none for UINT16/32/64 and BYTES).
struct datatype_info {
  datatype type;
  std::string_view name;
  std::size_t size;
  std::optional<dtype> dt;
};
inline constexpr datatype_info kDatatypes[kDatatypeCount] = {
    {datatype::boolean, "BOOL", 1, dtype::boolean}, {datatype::uint8, "UINT8", 1, dtype::u8},
    {datatype::uint16, "UINT16", 2, std::nullopt},  {datatype::uint32, "UINT32", 4, std::nullopt},
    {datatype::uint64, "UINT64", 8, std::nullopt},  {datatype::int8, "INT8", 1, dtype::i8},
    {datatype::int16, "INT16", 2, dtype::i16},      {datatype::int32, "INT32", 4, dtype::i32},
    {datatype::int64, "INT64", 8, dtype::i64},      {datatype::fp16, "FP16", 2, dtype::f16},
    {datatype::bf16, "BF16", 2, dtype::bf16},       {datatype::fp32, "FP32", 4, dtype::f32},
    {datatype::fp64, "FP64", 8, dtype::f64},        {datatype::bytes, "BYTES", 0, std::nullopt}};
static_assert([] {
  for (int i = 0; i < kDatatypeCount; ++i)
    if (static_cast<int>(kDatatypes[i].type) != i) return false;
  return true;
}());

constexpr std::string_view to_string(datatype t) noexcept {
  const auto i = static_cast<std::size_t>(t);
  return i < kDatatypeCount ? kDatatypes[i].name : "INVALID";
}

// Exact, case-sensitive, as Triton parses it.
constexpr std::optional<datatype> datatype_from_string(std::string_view s) noexcept {
  for (const auto& d : kDatatypes)
    if (d.name == s) return d.type;
  return std::nullopt;
}

constexpr std::size_t element_size(datatype t) noexcept {
  const auto i = static_cast<std::size_t>(t);
  return i < kDatatypeCount ? kDatatypes[i].size : 0;
}

// Triton accepts these only in the binary extension, never as JSON "data".
constexpr bool binary_only(datatype t) noexcept { return t == datatype::fp16 || t == datatype::bf16; }

constexpr std::optional<dtype> to_dtype(datatype t) noexcept {
  const auto i = static_cast<std::size_t>(t);
  return i < kDatatypeCount ? kDatatypes[i].dt : std::nullopt;
}

constexpr datatype from_dtype(dtype t) noexcept {
  for (const auto& d : kDatatypes)
    if (d.dt == t) return d.type;
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
