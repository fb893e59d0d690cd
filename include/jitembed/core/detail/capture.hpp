// The exception -> result ladder (docs/api.md rule 1.1), written once: a function that returns result<T>
// runs what may throw through capture() and reports every failure in its result.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "jitembed/core/error.hpp"

namespace jitembed::core_detail {

// Runs f (returning result<T>, or T / void, which become result<T> / result<void>) and turns what it throws
// into the result: a jitembed::error keeps its code and message; std::bad_alloc, and a std::system_error
// saying a resource is temporarily unavailable (what starting a std::thread throws when it cannot), are
// resource_exhausted; anything else is internal. `what` names the operation in the messages it writes.
template <class F>
auto capture(const char* what, F&& f) {
  using R = std::invoke_result_t<F&>;
  using out = std::conditional_t<std::is_void_v<R>, result<void>,
                                 std::conditional_t<jitembed::is_result_v<R>, R, result<std::remove_cv_t<R>>>>;
  try {
    if constexpr (std::is_void_v<R>) {
      f();
      return out();
    } else {
      return out(f());
    }
  } catch (const error& e) {
    return out(e.info());
  } catch (const std::bad_alloc&) {
    return out(fail(errc::resource_exhausted, std::string(what) + ": out of memory"));
  } catch (const std::system_error& e) {
    const bool exhausted = e.code() == std::errc::resource_unavailable_try_again;
    return out(fail(exhausted ? errc::resource_exhausted : errc::internal, std::string(what) + ": " + e.what()));
  } catch (const std::exception& e) {
    return out(fail(errc::internal, std::string(what) + ": " + e.what()));
  } catch (...) {
    return out(fail(errc::internal, std::string(what) + ": unknown exception"));
  }
}

}  // namespace jitembed::core_detail
