// Error model: a stable errc enum, an exception carrying it, and result<T> for non-throwing paths.
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace jitembed {

// Stable error codes. Values never change meaning; new codes are appended.
enum class errc : std::uint16_t {
  ok = 0,
  invalid_argument = 1,    // caller passed something meaningless (bad dtype, negative size, ...)
  buffer_too_small = 2,    // caller's output buffer cannot hold the result
  truncated = 3,           // input ends before a length or table says it should
  bad_magic = 4,           // not the format it claims to be
  unsupported_version = 5, // unknown major version
  checksum_mismatch = 6,   // XXH3 of the payload disagrees with the stored one
  corrupt_data = 7,        // a structural field is inconsistent (offset out of range, overlap, ...)
  limit_exceeded = 8,      // a decode_limits bound would be crossed
  shape_overflow = 9,      // a shape product or byte size overflows 64 bits
  unsupported_format = 10, // container/format not recognised or not whitelisted
  unsupported_codec = 11,  // codec id unknown or not whitelisted
  decode_failed = 12,      // the underlying decoder (zstd, TurboJPEG, FFmpeg) rejected the data
  encode_failed = 13,      // the underlying encoder failed
  invalid_utf8 = 14,       // text payload is not valid UTF-8
  dtype_mismatch = 15,     // tensor dtype or element size is not what the operation needs
  io_error = 16,           // open/read/write/mmap failed
  not_found = 17,          // a named field, key or file does not exist
  internal = 18,           // a bug in jitembed
  comm_failed = 19,        // a collective failed: a peer died, a connection broke, NCCL reported an async error
  timeout = 20,            // a deadline passed: a request, a queue wait, a collective, a rendezvous or store wait
  unavailable = 21,        // the service cannot take this now (overload, draining, no ready endpoint): retry elsewhere/later
  cancelled = 22,          // the caller (or a shutdown without drain) cancelled the operation before it completed
  resource_exhausted = 23, // host or GPU memory ran out serving this request: retry elsewhere/later
};

// Whether an operation that failed with `e` may succeed when retried unchanged (elsewhere or later):
// the service's own trouble, never the caller's input.
constexpr bool is_retryable(errc e) noexcept {
  return e == errc::unavailable || e == errc::timeout || e == errc::resource_exhausted || e == errc::io_error ||
         e == errc::comm_failed;
}

constexpr std::string_view to_string(errc e) noexcept {
  switch (e) {
    case errc::ok: return "ok";
    case errc::invalid_argument: return "invalid_argument";
    case errc::buffer_too_small: return "buffer_too_small";
    case errc::truncated: return "truncated";
    case errc::bad_magic: return "bad_magic";
    case errc::unsupported_version: return "unsupported_version";
    case errc::checksum_mismatch: return "checksum_mismatch";
    case errc::corrupt_data: return "corrupt_data";
    case errc::limit_exceeded: return "limit_exceeded";
    case errc::shape_overflow: return "shape_overflow";
    case errc::unsupported_format: return "unsupported_format";
    case errc::unsupported_codec: return "unsupported_codec";
    case errc::decode_failed: return "decode_failed";
    case errc::encode_failed: return "encode_failed";
    case errc::invalid_utf8: return "invalid_utf8";
    case errc::dtype_mismatch: return "dtype_mismatch";
    case errc::io_error: return "io_error";
    case errc::not_found: return "not_found";
    case errc::internal: return "internal";
    case errc::comm_failed: return "comm_failed";
    case errc::timeout: return "timeout";
    case errc::unavailable: return "unavailable";
    case errc::cancelled: return "cancelled";
    case errc::resource_exhausted: return "resource_exhausted";
  }
  return "unknown";
}

// The errc whose to_string() is `name` (e.g. from an error body's "errc"); nullopt for an unknown name.
constexpr std::optional<errc> errc_from_string(std::string_view name) noexcept {
  for (std::uint16_t i = 0; i <= static_cast<std::uint16_t>(errc::resource_exhausted); ++i)
    if (to_string(static_cast<errc>(i)) == name) return static_cast<errc>(i);
  return std::nullopt;
}

// A code plus a specific message (names the field and offset where there is one).
struct error_info {
  errc code = errc::ok;
  std::string message;
};

// The exception thrown by throwing entry points; what() is "<errc>: <message>".
class error : public std::runtime_error {
 public:
  error(errc code, std::string message)
      : std::runtime_error(std::string(to_string(code)) + ": " + message),
        code_(code),
        message_(std::move(message)) {}
  explicit error(error_info info) : error(info.code, std::move(info.message)) {}

  errc code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

 private:
  errc code_;
  std::string message_;
};

// Tag used to construct a failed result: `return fail(errc::truncated, "...")`.
inline error_info fail(errc code, std::string message) { return error_info{code, std::move(message)}; }

// result<T>: a value or an error_info. value() throws jitembed::error on failure.
template <class T>
class [[nodiscard]] result {
 public:
  using value_type = T;

  result(const T& v) : state_(std::in_place_index<0>, v) {}  // NOLINT: implicit by design
  result(T&& v) : state_(std::in_place_index<0>, std::move(v)) {}  // NOLINT
  result(error_info e) : state_(std::in_place_index<1>, std::move(e)) {}  // NOLINT
  template <class U>
    requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::remove_cvref_t<U>, T> &&
             !std::is_same_v<std::remove_cvref_t<U>, error_info> &&
             !std::is_same_v<std::remove_cvref_t<U>, result>)
  result(U&& v) : state_(std::in_place_index<0>, T(std::forward<U>(v))) {}  // NOLINT

  bool has_value() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & { check(); return std::get<0>(state_); }
  const T& value() const& { check(); return std::get<0>(state_); }
  T&& value() && { check(); return std::get<0>(std::move(state_)); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const error_info& error() const& { return std::get<1>(state_); }
  error_info&& error() && { return std::get<1>(std::move(state_)); }
  errc code() const noexcept { return has_value() ? errc::ok : std::get<1>(state_).code; }

 private:
  void check() const {
    if (!has_value()) throw jitembed::error(std::get<1>(state_));
  }
  std::variant<T, error_info> state_;
};

template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  result(error_info e) : err_(std::move(e)) {}  // NOLINT

  bool has_value() const noexcept { return err_.code == errc::ok; }
  explicit operator bool() const noexcept { return has_value(); }
  void value() const {
    if (!has_value()) throw jitembed::error(err_);
  }
  const error_info& error() const& { return err_; }
  errc code() const noexcept { return err_.code; }

 private:
  error_info err_{};
};

// Propagates a failed result out of a function returning result<U>.
#define JITEMBED_TRY(expr)                                 \
  do {                                                     \
    auto&& jitembed_try_r_ = (expr);                       \
    if (!jitembed_try_r_) return jitembed_try_r_.error();  \
  } while (0)

}  // namespace jitembed
