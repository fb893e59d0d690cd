// Precondition checks (docs/api.md rule 1.6): a precondition violation is a bug in the caller, not an error;
// JITEMBED_ASSERT aborts with file and line when assertions are on, and compiles to nothing otherwise.
#pragma once

#include <cstdio>
#include <cstdlib>

// On unless NDEBUG, as assert(); a build may force it either way (the test executables turn it on in
// Release too, so a test that breaks a precondition aborts instead of reading garbage).
#ifndef JITEMBED_ASSERTIONS
#ifdef NDEBUG
#define JITEMBED_ASSERTIONS 0
#else
#define JITEMBED_ASSERTIONS 1
#endif
#endif

// Not `jitembed::detail`: every file includes this one, and a user's `using namespace jitembed;` next to
// `using namespace jitembed::<area>;` would make their `detail::` ambiguous.
namespace jitembed::core_detail {

[[noreturn]] inline void precondition_failed(const char* expr, const char* what, const char* file, int line) noexcept {
  std::fprintf(stderr, "%s:%d: jitembed precondition violated: %s (%s)\n", file, line, what, expr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace jitembed::core_detail

#if JITEMBED_ASSERTIONS
#define JITEMBED_ASSERT(cond, what) \
  ((cond) ? static_cast<void>(0) : ::jitembed::core_detail::precondition_failed(#cond, what, __FILE__, __LINE__))
#else
#define JITEMBED_ASSERT(cond, what) static_cast<void>(0)
#endif
