// Element types: the dtype enum, sizes and names, and portable fp16 / bf16 storage types.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace jitembed {

// Wire-stable values: the format stores them as one byte.
enum class dtype : std::uint8_t {
  u8 = 0,
  i8 = 1,
  i16 = 2,
  i32 = 3,
  i64 = 4,
  f16 = 5,
  bf16 = 6,
  f32 = 7,
  f64 = 8,
  boolean = 9,
};

inline constexpr int kDtypeCount = 10;

constexpr bool is_valid(dtype t) noexcept { return static_cast<std::uint8_t>(t) < kDtypeCount; }

constexpr std::size_t element_size(dtype t) noexcept {
  switch (t) {
    case dtype::u8:
    case dtype::i8:
    case dtype::boolean: return 1;
    case dtype::i16:
    case dtype::f16:
    case dtype::bf16: return 2;
    case dtype::i32:
    case dtype::f32: return 4;
    case dtype::i64:
    case dtype::f64: return 8;
  }
  return 0;
}

constexpr std::string_view to_string(dtype t) noexcept {
  switch (t) {
    case dtype::u8: return "u8";
    case dtype::i8: return "i8";
    case dtype::i16: return "i16";
    case dtype::i32: return "i32";
    case dtype::i64: return "i64";
    case dtype::f16: return "f16";
    case dtype::bf16: return "bf16";
    case dtype::f32: return "f32";
    case dtype::f64: return "f64";
    case dtype::boolean: return "bool";
  }
  return "invalid";
}

constexpr std::optional<dtype> dtype_from_string(std::string_view s) noexcept {
  for (int i = 0; i < kDtypeCount; ++i) {
    auto t = static_cast<dtype>(i);
    if (to_string(t) == s) return t;
  }
  return std::nullopt;
}

constexpr bool is_floating(dtype t) noexcept {
  return t == dtype::f16 || t == dtype::bf16 || t == dtype::f32 || t == dtype::f64;
}

// IEEE 754 binary16 stored as bits; conversions round to nearest even.
struct float16 {
  std::uint16_t bits = 0;

  float16() = default;
  explicit float16(float f) noexcept : bits(from_float(f)) {}
  explicit operator float() const noexcept { return to_float(bits); }

  static constexpr float16 from_bits(std::uint16_t b) noexcept {
    float16 h;
    h.bits = b;
    return h;
  }
  friend bool operator==(float16 a, float16 b) noexcept { return a.bits == b.bits; }

  static std::uint16_t from_float(float f) noexcept {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const std::uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) {  // inf or nan
      return static_cast<std::uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
    }
    if (absx >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
    if (absx < 0x38800000u) {                                                    // subnormal or zero
      if (absx < 0x33000000u) return static_cast<std::uint16_t>(sign);
      const std::uint32_t e = absx >> 23;
      const std::uint32_t m = (absx & 0x7fffffu) | 0x800000u;
      const std::uint32_t shift = 126u - e;  // 14..24
      std::uint32_t h = m >> shift;
      const std::uint32_t rem = m & ((1u << shift) - 1u);
      const std::uint32_t half = 1u << (shift - 1u);
      if (rem > half || (rem == half && (h & 1u))) ++h;
      return static_cast<std::uint16_t>(sign | h);
    }
    std::uint32_t h = ((absx - 0x38000000u) >> 13);
    const std::uint32_t rem = absx & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }

  static float to_float(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t e = (h >> 10) & 0x1fu;
    std::uint32_t m = h & 0x3ffu;
    std::uint32_t out;
    if (e == 0) {
      if (m == 0) {
        out = sign;
      } else {  // subnormal: normalise
        int shift = 0;
        while ((m & 0x400u) == 0) {
          m <<= 1;
          ++shift;
        }
        m &= 0x3ffu;
        out = sign | (static_cast<std::uint32_t>(113 - shift) << 23) | (m << 13);
      }
    } else if (e == 31) {
      out = sign | 0x7f800000u | (m << 13);
    } else {
      out = sign | ((e + 112u) << 23) | (m << 13);
    }
    return std::bit_cast<float>(out);
  }
};

// bfloat16: the top 16 bits of an IEEE binary32; conversion rounds to nearest even.
struct bfloat16 {
  std::uint16_t bits = 0;

  bfloat16() = default;
  explicit bfloat16(float f) noexcept : bits(from_float(f)) {}
  explicit operator float() const noexcept { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

  static constexpr bfloat16 from_bits(std::uint16_t b) noexcept {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  friend bool operator==(bfloat16 a, bfloat16 b) noexcept { return a.bits == b.bits; }

  static std::uint16_t from_float(float f) noexcept {
    std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet nan
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<std::uint16_t>(x >> 16);
  }
};

static_assert(sizeof(float16) == 2 && sizeof(bfloat16) == 2);

// Maps C++ element types to dtypes.
template <class T>
struct dtype_of;
template <> struct dtype_of<std::uint8_t> { static constexpr dtype value = dtype::u8; };
template <> struct dtype_of<std::int8_t> { static constexpr dtype value = dtype::i8; };
template <> struct dtype_of<std::int16_t> { static constexpr dtype value = dtype::i16; };
template <> struct dtype_of<std::int32_t> { static constexpr dtype value = dtype::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr dtype value = dtype::i64; };
template <> struct dtype_of<float16> { static constexpr dtype value = dtype::f16; };
template <> struct dtype_of<bfloat16> { static constexpr dtype value = dtype::bf16; };
template <> struct dtype_of<float> { static constexpr dtype value = dtype::f32; };
template <> struct dtype_of<double> { static constexpr dtype value = dtype::f64; };
template <> struct dtype_of<bool> { static constexpr dtype value = dtype::boolean; };

template <class T>
inline constexpr dtype dtype_of_v = dtype_of<T>::value;

}  // namespace jitembed
