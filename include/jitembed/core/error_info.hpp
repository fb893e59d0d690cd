// The error vocabulary (docs/api.md rule 1): a stable errc enum, what a caller does about each
// (caller_action), error_info with structured context, the exception carrying it, and fail().
// result<T> is in core/error.hpp, which includes this header.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <exception>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "jitembed/core/assert.hpp"

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

// What a caller does next about a failure, decided by its errc alone (docs/api.md rule 1.5).
enum class caller_move : std::uint8_t {
  proceed = 0,     // errc::ok: nothing failed
  fix_input,       // the caller's input is bad: fix it; never retried (HTTP 4xx)
  look_elsewhere,  // not_found: another model, key or file; a client ejects that endpoint for that model
  retry,           // the service's own trouble: retry with backoff, on another endpoint when there is one
  drop,            // cancelled: nobody is waiting for the answer any more
  report_bug,      // internal, encode_failed: a bug (in jitembed or a plugged-in part); report it
};

constexpr caller_move caller_action(errc e) noexcept {
  switch (e) {
    case errc::ok: return caller_move::proceed;
    case errc::invalid_argument:
    case errc::buffer_too_small:
    case errc::truncated:
    case errc::bad_magic:
    case errc::unsupported_version:
    case errc::checksum_mismatch:
    case errc::corrupt_data:
    case errc::limit_exceeded:
    case errc::shape_overflow:
    case errc::unsupported_format:
    case errc::unsupported_codec:
    case errc::decode_failed:
    case errc::invalid_utf8:
    case errc::dtype_mismatch: return caller_move::fix_input;
    case errc::not_found: return caller_move::look_elsewhere;
    case errc::unavailable:
    case errc::timeout:
    case errc::resource_exhausted:
    case errc::io_error:
    case errc::comm_failed: return caller_move::retry;
    case errc::cancelled: return caller_move::drop;
    case errc::internal:
    case errc::encode_failed: return caller_move::report_bug;
  }
  return caller_move::report_bug;  // a code from a newer peer this build does not know
}

// Whether an operation that failed with `e` may succeed when retried unchanged (elsewhere or later):
// the service's own trouble, never the caller's input.
constexpr bool is_retryable(errc e) noexcept { return caller_action(e) == caller_move::retry; }

constexpr std::string_view to_string(caller_move m) noexcept {
  switch (m) {
    case caller_move::proceed: return "proceed";
    case caller_move::fix_input: return "fix_input";
    case caller_move::look_elsewhere: return "look_elsewhere";
    case caller_move::retry: return "retry";
    case caller_move::drop: return "drop";
    case caller_move::report_bug: return "report_bug";
  }
  return "unknown";
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

// Structured context of a failure: a small typed set plus key/value notes. Not part of the errc decision
// (rule 1.5): it tells a human and a log where, and a retrying caller how long to wait.
struct error_context {
  std::string endpoint;                                     // the peer involved: "host:port" or a URL
  std::string field;                                        // a sample field, tensor, input or option name
  std::optional<std::uint64_t> row;                         // index of the sample / row / element concerned
  std::optional<std::chrono::milliseconds> retry_after;     // when to retry (a server's Retry-After)
  std::vector<std::pair<std::string, std::string>> notes;   // anything else, in the order added

  bool empty() const noexcept {
    return endpoint.empty() && field.empty() && !row && !retry_after && notes.empty();
  }
  bool operator==(const error_context&) const = default;
};

// The items with_context() takes: `fail(...).with_context(ctx::field("latent"), ctx::row(3))`.
namespace ctx {
struct endpoint {
  explicit endpoint(std::string v) : value(std::move(v)) {}
  std::string value;
};
struct field {
  explicit field(std::string v) : value(std::move(v)) {}
  std::string value;
};
struct row {
  explicit constexpr row(std::uint64_t v) noexcept : value(v) {}
  std::uint64_t value;
};
struct retry_after {
  explicit constexpr retry_after(std::chrono::milliseconds v) noexcept : value(v) {}
  std::chrono::milliseconds value;
};
struct note {  // a generic key/value pair; keys are snake_case words
  note(std::string k, std::string v) : key(std::move(k)), value(std::move(v)) {}
  std::string key, value;
};

template <class T>
concept item = std::same_as<std::remove_cvref_t<T>, endpoint> || std::same_as<std::remove_cvref_t<T>, field> ||
               std::same_as<std::remove_cvref_t<T>, row> || std::same_as<std::remove_cvref_t<T>, retry_after> ||
               std::same_as<std::remove_cvref_t<T>, note>;
}  // namespace ctx

// A code plus a specific message (names the field and offset where there is one) and optional context.
// error_info is plain data: errc::ok in it means "no error" where a table of per-item outcomes needs that,
// but a failed result never holds errc::ok (a precondition of fail() and of result's constructor).
struct error_info {
  errc code = errc::ok;
  std::string message;
  error_context context{};

  // Adds context; a typed slot set twice keeps the last value, notes append. Chainable.
  template <ctx::item... Items>
  error_info& with_context(Items&&... items) & {
    (add(std::forward<Items>(items)), ...);
    return *this;
  }
  template <ctx::item... Items>
  error_info with_context(Items&&... items) && {
    (add(std::forward<Items>(items)), ...);
    return std::move(*this);
  }

  bool operator==(const error_info&) const = default;

 private:
  void add(ctx::endpoint e) { context.endpoint = std::move(e.value); }
  void add(ctx::field f) { context.field = std::move(f.value); }
  void add(ctx::row r) { context.row = r.value; }
  void add(ctx::retry_after r) { context.retry_after = r.value; }
  void add(ctx::note n) { context.notes.emplace_back(std::move(n.key), std::move(n.value)); }
};

// The context in its stable rendering: "endpoint=E, field=F, row=R, retry_after=Nms, k=v, ..." (only the
// slots that are set, in this order; notes in the order added). Empty for an empty context.
inline std::string to_string(const error_context& c) {
  std::string out;
  auto put = [&out](std::string_view key, std::string_view value) {
    if (!out.empty()) out += ", ";
    out.append(key).append("=").append(value);
  };
  if (!c.endpoint.empty()) put("endpoint", c.endpoint);
  if (!c.field.empty()) put("field", c.field);
  if (c.row) put("row", std::to_string(*c.row));
  if (c.retry_after) put("retry_after", std::to_string(c.retry_after->count()) + "ms");
  for (const auto& [k, v] : c.notes) put(k, v);
  return out;
}

// "<errc>: <message>", then " [<context>]" when there is context. What jitembed::error::what() says.
inline std::string to_string(const error_info& e) {
  std::string out = std::string(to_string(e.code)) + ": " + e.message;
  if (!e.context.empty()) out += " [" + to_string(e.context) + "]";
  return out;
}

// The exception thrown by throwing entry points; what() is to_string(info()): "<errc>: <message>[ [ctx]]".
class error : public std::runtime_error {
 public:
  error(errc code, std::string message) : error(error_info{code, std::move(message), {}}) {}
  explicit error(error_info info) : std::runtime_error(to_string(info)), info_(std::move(info)) {}

  errc code() const noexcept { return info_.code; }
  const std::string& message() const noexcept { return info_.message; }  // without the context
  const error_context& context() const noexcept { return info_.context; }
  const error_info& info() const noexcept { return info_; }

 private:
  error_info info_;
};

// Builds the error of a failed result: `return fail(errc::truncated, "...")`. `code` is not errc::ok
// (precondition).
inline error_info fail(errc code, std::string message) {
  JITEMBED_ASSERT(code != errc::ok, "fail(errc::ok, ...): a failure needs a failing code");
  return error_info{code, std::move(message), {}};
}

}  // namespace jitembed
