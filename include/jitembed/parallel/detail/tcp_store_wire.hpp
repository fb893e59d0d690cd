// The tcp_store wire format (parallel/tcp_store_options.hpp describes it): op and status codes, and the
// little-endian integer fields.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace jitembed::parallel::detail {

namespace tcp_wire {
inline constexpr std::uint8_t op_set = 1;
inline constexpr std::uint8_t op_get = 2;
inline constexpr std::uint8_t op_check = 3;
inline constexpr std::uint8_t status_ok = 0;
inline constexpr std::uint8_t status_timeout = 1;
inline constexpr std::size_t request_head = 5;  // op + key_len
inline constexpr std::size_t reply_head = 9;    // status + value_len
// Longest wait the server parks a get for: keeps the timer arithmetic far from overflow.
inline constexpr std::chrono::milliseconds max_wait = std::chrono::hours(24 * 365);

inline void put_u32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline void put_u64(std::byte* p, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline std::uint32_t get_u32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}
inline std::uint64_t get_u64(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}
}  // namespace tcp_wire


}  // namespace jitembed::parallel::detail
