// Error model (docs/api.md rule 1): a stable errc enum, what a caller does about each (caller_action), an
// error_info with structured context, the exception carrying it, and result<T> with std::expected's interface.
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

template <class T>
class result;

// Whether T is a result<U> (for generic code: and_then's callable must return one).
template <class T>
struct is_result : std::false_type {};
template <class T>
struct is_result<result<T>> : std::true_type {};
template <class T>
inline constexpr bool is_result_v = is_result<T>::value;

// result<T>: a value or an error_info, with std::expected's interface (has_value, value, operator*, ->,
// error, value_or, and_then, transform, or_else, transform_error) plus code() and with_context().
// value() throws jitembed::error on a failure (the bridge to throwing code, rule 1.3); `*r` / `r->` on a
// failure and error() on a success are precondition violations (JITEMBED_ASSERT), not errors.
template <class T>
class [[nodiscard]] result {
  static_assert(!std::is_reference_v<T> && !std::is_array_v<T>, "result<T>: T is an object type");
  static_assert(!std::is_same_v<std::remove_cv_t<T>, error_info>, "result<error_info> is ambiguous");
  static_assert(!is_result<std::remove_cv_t<T>>::value, "result<result<T>> is not supported");

 public:
  using value_type = T;
  using error_type = error_info;
  template <class U>
  using rebind = result<U>;

  result(const T& v) : state_(std::in_place_index<0>, v) {}  // NOLINT: implicit by design
  result(T&& v) : state_(std::in_place_index<0>, std::move(v)) {}  // NOLINT
  result(error_info e) : state_(std::in_place_index<1>, std::move(e)) {  // NOLINT
    JITEMBED_ASSERT(std::get_if<1>(&state_)->code != errc::ok, "a failed result with errc::ok");
  }
  template <class U>
    requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::remove_cvref_t<U>, T> &&
             !std::is_same_v<std::remove_cvref_t<U>, error_info> &&
             !std::is_same_v<std::remove_cvref_t<U>, result>)
  result(U&& v) : state_(std::in_place_index<0>, T(std::forward<U>(v))) {}  // NOLINT

  bool has_value() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  // The value; throws jitembed::error (the result's code, message and context) on a failure.
  T& value() & { check(); return *std::get_if<0>(&state_); }
  const T& value() const& { check(); return *std::get_if<0>(&state_); }
  T&& value() && { check(); return std::move(*std::get_if<0>(&state_)); }
  const T&& value() const&& { check(); return std::move(*std::get_if<0>(&state_)); }

  // The value; the result has one (precondition).
  T& operator*() & noexcept { return *get(); }
  const T& operator*() const& noexcept { return *get(); }
  T&& operator*() && noexcept { return std::move(*get()); }
  const T&& operator*() const&& noexcept { return std::move(*get()); }
  T* operator->() noexcept { return get(); }
  const T* operator->() const noexcept { return get(); }

  // The error; the result is a failure (precondition).
  error_info& error() & noexcept { return *err(); }
  const error_info& error() const& noexcept { return *err(); }
  error_info&& error() && noexcept { return std::move(*err()); }
  const error_info&& error() const&& noexcept { return std::move(*err()); }
  // errc::ok for a success, the error's code otherwise.
  errc code() const noexcept { return has_value() ? errc::ok : std::get_if<1>(&state_)->code; }

  template <class U = std::remove_cv_t<T>>
  T value_or(U&& fallback) const& {
    return has_value() ? **this : static_cast<T>(std::forward<U>(fallback));
  }
  template <class U = std::remove_cv_t<T>>
  T value_or(U&& fallback) && {
    return has_value() ? std::move(**this) : static_cast<T>(std::forward<U>(fallback));
  }

  // f(value) -> result<U>; a failure passes through as result<U>.
  template <class F> auto and_then(F&& f) & { return and_then_(*this, std::forward<F>(f)); }
  template <class F> auto and_then(F&& f) const& { return and_then_(*this, std::forward<F>(f)); }
  template <class F> auto and_then(F&& f) && { return and_then_(std::move(*this), std::forward<F>(f)); }
  template <class F> auto and_then(F&& f) const&& { return and_then_(std::move(*this), std::forward<F>(f)); }

  // f(value) -> U, wrapped as result<U> (result<void> for a void f); a failure passes through.
  template <class F> auto transform(F&& f) & { return transform_(*this, std::forward<F>(f)); }
  template <class F> auto transform(F&& f) const& { return transform_(*this, std::forward<F>(f)); }
  template <class F> auto transform(F&& f) && { return transform_(std::move(*this), std::forward<F>(f)); }
  template <class F> auto transform(F&& f) const&& { return transform_(std::move(*this), std::forward<F>(f)); }

  // f(error) -> result<T> (recover, or fail differently); a success passes through.
  template <class F> result or_else(F&& f) & { return or_else_(*this, std::forward<F>(f)); }
  template <class F> result or_else(F&& f) const& { return or_else_(*this, std::forward<F>(f)); }
  template <class F> result or_else(F&& f) && { return or_else_(std::move(*this), std::forward<F>(f)); }
  template <class F> result or_else(F&& f) const&& { return or_else_(std::move(*this), std::forward<F>(f)); }

  // f(error) -> error_info (re-code or re-word); a success passes through.
  template <class F> result transform_error(F&& f) & { return transform_error_(*this, std::forward<F>(f)); }
  template <class F> result transform_error(F&& f) const& { return transform_error_(*this, std::forward<F>(f)); }
  template <class F> result transform_error(F&& f) && { return transform_error_(std::move(*this), std::forward<F>(f)); }
  template <class F> result transform_error(F&& f) const&& { return transform_error_(std::move(*this), std::forward<F>(f)); }

  // Adds context to a failure (error_info::with_context); a success is left as it is, so
  // `return step().with_context(ctx::row(i));` annotates only what failed.
  template <ctx::item... Items>
  result& with_context(Items&&... items) & {
    if (!has_value()) err()->with_context(std::forward<Items>(items)...);
    return *this;
  }
  template <ctx::item... Items>
  result with_context(Items&&... items) && {
    if (!has_value()) err()->with_context(std::forward<Items>(items)...);
    return std::move(*this);
  }

 private:
  void check() const {
    if (!has_value()) throw jitembed::error(*std::get_if<1>(&state_));
  }
  T* get() noexcept {
    JITEMBED_ASSERT(has_value(), "*r or r-> on a failed result");
    return std::get_if<0>(&state_);
  }
  const T* get() const noexcept {
    JITEMBED_ASSERT(has_value(), "*r or r-> on a failed result");
    return std::get_if<0>(&state_);
  }
  error_info* err() noexcept {
    JITEMBED_ASSERT(!has_value(), "error() on a successful result");
    return std::get_if<1>(&state_);
  }
  const error_info* err() const noexcept {
    JITEMBED_ASSERT(!has_value(), "error() on a successful result");
    return std::get_if<1>(&state_);
  }

  template <class Self, class F>
  static auto and_then_(Self&& self, F&& f) {
    using R = std::remove_cvref_t<std::invoke_result_t<F, decltype(*std::forward<Self>(self))>>;
    static_assert(is_result<R>::value, "and_then: f must return a result<U>");
    if (self.has_value()) return std::invoke(std::forward<F>(f), *std::forward<Self>(self));
    return R(std::forward<Self>(self).error());
  }
  template <class Self, class F>
  static auto transform_(Self&& self, F&& f) {
    using U = std::remove_cv_t<std::invoke_result_t<F, decltype(*std::forward<Self>(self))>>;
    using R = result<U>;
    if (!self.has_value()) return R(std::forward<Self>(self).error());
    if constexpr (std::is_void_v<U>) {
      std::invoke(std::forward<F>(f), *std::forward<Self>(self));
      return R();
    } else {
      return R(std::invoke(std::forward<F>(f), *std::forward<Self>(self)));
    }
  }
  template <class Self, class F>
  static result or_else_(Self&& self, F&& f) {
    using R = std::remove_cvref_t<std::invoke_result_t<F, decltype(std::forward<Self>(self).error())>>;
    static_assert(std::is_same_v<R, result>, "or_else: f must return a result of the same T");
    if (self.has_value()) return result(*std::forward<Self>(self));
    return std::invoke(std::forward<F>(f), std::forward<Self>(self).error());
  }
  template <class Self, class F>
  static result transform_error_(Self&& self, F&& f) {
    static_assert(std::is_same_v<std::remove_cvref_t<std::invoke_result_t<F, decltype(std::forward<Self>(self).error())>>,
                                 error_info>,
                  "transform_error: f must return an error_info");
    if (self.has_value()) return result(*std::forward<Self>(self));
    return result(std::invoke(std::forward<F>(f), std::forward<Self>(self).error()));
  }

  std::variant<T, error_info> state_;
};

// result<void>: success or an error_info, with its own has-value bit.
template <>
class [[nodiscard]] result<void> {
 public:
  using value_type = void;
  using error_type = error_info;
  template <class U>
  using rebind = result<U>;

  result() noexcept = default;  // success
  result(error_info e) : err_(std::move(e)) {  // NOLINT
    JITEMBED_ASSERT(err_->code != errc::ok, "a failed result with errc::ok");
  }

  bool has_value() const noexcept { return !err_.has_value(); }
  explicit operator bool() const noexcept { return has_value(); }
  // Throws jitembed::error on a failure.
  void value() const {
    if (err_) throw jitembed::error(*err_);
  }
  // Nothing; the result is a success (precondition), as std::expected<void>::operator*.
  void operator*() const noexcept { JITEMBED_ASSERT(has_value(), "*r on a failed result"); }

  // The error; the result is a failure (precondition).
  error_info& error() & noexcept { return *err(); }
  const error_info& error() const& noexcept { return *err(); }
  error_info&& error() && noexcept { return std::move(*err()); }
  const error_info&& error() const&& noexcept { return std::move(*err()); }
  errc code() const noexcept { return err_ ? err_->code : errc::ok; }

  // f() -> result<U>; a failure passes through.
  template <class F> auto and_then(F&& f) & { return and_then_(*this, std::forward<F>(f)); }
  template <class F> auto and_then(F&& f) const& { return and_then_(*this, std::forward<F>(f)); }
  template <class F> auto and_then(F&& f) && { return and_then_(std::move(*this), std::forward<F>(f)); }
  template <class F> auto and_then(F&& f) const&& { return and_then_(std::move(*this), std::forward<F>(f)); }

  // f() -> U, wrapped as result<U>; a failure passes through.
  template <class F> auto transform(F&& f) & { return transform_(*this, std::forward<F>(f)); }
  template <class F> auto transform(F&& f) const& { return transform_(*this, std::forward<F>(f)); }
  template <class F> auto transform(F&& f) && { return transform_(std::move(*this), std::forward<F>(f)); }
  template <class F> auto transform(F&& f) const&& { return transform_(std::move(*this), std::forward<F>(f)); }

  // f(error) -> result<void>; a success passes through.
  template <class F> result or_else(F&& f) & { return or_else_(*this, std::forward<F>(f)); }
  template <class F> result or_else(F&& f) const& { return or_else_(*this, std::forward<F>(f)); }
  template <class F> result or_else(F&& f) && { return or_else_(std::move(*this), std::forward<F>(f)); }
  template <class F> result or_else(F&& f) const&& { return or_else_(std::move(*this), std::forward<F>(f)); }

  // f(error) -> error_info; a success passes through.
  template <class F> result transform_error(F&& f) & { return transform_error_(*this, std::forward<F>(f)); }
  template <class F> result transform_error(F&& f) const& { return transform_error_(*this, std::forward<F>(f)); }
  template <class F> result transform_error(F&& f) && { return transform_error_(std::move(*this), std::forward<F>(f)); }
  template <class F> result transform_error(F&& f) const&& { return transform_error_(std::move(*this), std::forward<F>(f)); }

  template <ctx::item... Items>
  result& with_context(Items&&... items) & {
    if (err_) err_->with_context(std::forward<Items>(items)...);
    return *this;
  }
  template <ctx::item... Items>
  result with_context(Items&&... items) && {
    if (err_) err_->with_context(std::forward<Items>(items)...);
    return std::move(*this);
  }

 private:
  error_info* err() noexcept {
    JITEMBED_ASSERT(err_.has_value(), "error() on a successful result");
    return &*err_;
  }
  const error_info* err() const noexcept {
    JITEMBED_ASSERT(err_.has_value(), "error() on a successful result");
    return &*err_;
  }

  template <class Self, class F>
  static auto and_then_(Self&& self, F&& f) {
    using R = std::remove_cvref_t<std::invoke_result_t<F>>;
    static_assert(is_result<R>::value, "and_then: f must return a result<U>");
    if (self.has_value()) return std::invoke(std::forward<F>(f));
    return R(std::forward<Self>(self).error());
  }
  template <class Self, class F>
  static auto transform_(Self&& self, F&& f) {
    using U = std::remove_cv_t<std::invoke_result_t<F>>;
    using R = result<U>;
    if (!self.has_value()) return R(std::forward<Self>(self).error());
    if constexpr (std::is_void_v<U>) {
      std::invoke(std::forward<F>(f));
      return R();
    } else {
      return R(std::invoke(std::forward<F>(f)));
    }
  }
  template <class Self, class F>
  static result or_else_(Self&& self, F&& f) {
    using R = std::remove_cvref_t<std::invoke_result_t<F, decltype(std::forward<Self>(self).error())>>;
    static_assert(std::is_same_v<R, result>, "or_else: f must return a result<void>");
    if (self.has_value()) return result();
    return std::invoke(std::forward<F>(f), std::forward<Self>(self).error());
  }
  template <class Self, class F>
  static result transform_error_(Self&& self, F&& f) {
    static_assert(std::is_same_v<std::remove_cvref_t<std::invoke_result_t<F, decltype(std::forward<Self>(self).error())>>,
                                 error_info>,
                  "transform_error: f must return an error_info");
    if (self.has_value()) return result();
    return result(std::invoke(std::forward<F>(f), std::forward<Self>(self).error()));
  }

  std::optional<error_info> err_;
};

// Propagates a failed result out of a function returning result<U> (or error_info); the value, if any, is
// discarded. `JITEMBED_TRY(check(x));`
#define JITEMBED_TRY(...)                                                                           \
  do {                                                                                              \
    auto&& jitembed_try_r_ = (__VA_ARGS__);                                                         \
    if (!jitembed_try_r_.has_value()) [[unlikely]]                                                  \
      return ::std::forward<decltype(jitembed_try_r_)>(jitembed_try_r_).error();                    \
  } while (0)

// `JITEMBED_ASSIGN_OR_RETURN(lhs, expr);` evaluates expr (a result<T>); on a failure returns its error from
// the enclosing function (returning result<U> or error_info), otherwise moves the value into lhs:
//   JITEMBED_ASSIGN_OR_RETURN(auto rec, record_view::parse(bytes, limits));   // a new variable
//   JITEMBED_ASSIGN_OR_RETURN(out.shape, parse_shape(j));                      // an existing one
//   JITEMBED_ASSIGN_OR_RETURN((auto [host, port]), split_host_port(text));     // parenthesize a comma
// It expands to several statements (not a single one: brace it under an if) and declares a temporary
// with a unique name, so it may appear many times in one scope.
#define JITEMBED_ASSIGN_OR_RETURN(lhs, ...) \
  JITEMBED_DETAIL_ASSIGN_OR_RETURN(JITEMBED_DETAIL_CAT(jitembed_aor_, __COUNTER__), lhs, __VA_ARGS__)

#define JITEMBED_DETAIL_ASSIGN_OR_RETURN(tmp, lhs, ...)                             \
  auto tmp = (__VA_ARGS__);                                                         \
  if (!tmp.has_value()) [[unlikely]] return ::std::move(tmp).error();               \
  JITEMBED_DETAIL_UNPAREN(lhs) = *::std::move(tmp)

#define JITEMBED_DETAIL_CAT(a, b) JITEMBED_DETAIL_CAT_(a, b)
#define JITEMBED_DETAIL_CAT_(a, b) a##b
// (x) -> x, x -> x.
#define JITEMBED_DETAIL_UNPAREN(x) JITEMBED_DETAIL_UNPAREN_ESC(JITEMBED_DETAIL_UNPAREN_ISH x)
#define JITEMBED_DETAIL_UNPAREN_ISH(...) JITEMBED_DETAIL_UNPAREN_ISH __VA_ARGS__
#define JITEMBED_DETAIL_UNPAREN_ESC(...) JITEMBED_DETAIL_UNPAREN_ESC_(__VA_ARGS__)
#define JITEMBED_DETAIL_UNPAREN_ESC_(...) JITEMBED_DETAIL_UNPAREN_VAN##__VA_ARGS__
#define JITEMBED_DETAIL_UNPAREN_VANJITEMBED_DETAIL_UNPAREN_ISH

}  // namespace jitembed
