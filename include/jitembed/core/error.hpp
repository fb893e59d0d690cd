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

#include "jitembed/core/error_info.hpp"

namespace jitembed {

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
