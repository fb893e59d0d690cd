// Little-endian loads and stores of fixed-width integers: the one helper every wire layout uses (format
// records and shards, cache keys, KServe BYTES elements). Unaligned pointers are fine.
#pragma once

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace jitembed {

namespace core::detail {

template <class B>
concept byte_like = std::same_as<std::remove_const_t<B>, std::byte> || std::same_as<std::remove_const_t<B>, unsigned char> ||
                    std::same_as<std::remove_const_t<B>, char>;

template <std::integral T>
constexpr T to_little_endian(T v) noexcept {
  if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
    using U = std::make_unsigned_t<T>;
    auto u = static_cast<U>(v);
    U r = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) r = static_cast<U>((r << 8) | ((u >> (8 * i)) & 0xffu));
    return static_cast<T>(r);
  }
  return v;
}

}  // namespace core::detail

// The T stored little-endian at p (sizeof(T) bytes).
template <std::integral T, core::detail::byte_like B>
inline T load_le(const B* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return core::detail::to_little_endian(v);
}

// Stores v little-endian at p (sizeof(T) bytes).
template <std::integral T, core::detail::byte_like B>
  requires(!std::is_const_v<B>)
inline void store_le(B* p, T v) noexcept {
  v = core::detail::to_little_endian(v);
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace jitembed
