// Largest single operator-new request since the last reset (test_zstd replaces global operator new).
#pragma once

#include <cstddef>

namespace jitembed::test {
void reset_max_alloc() noexcept;
std::size_t max_alloc() noexcept;
bool alloc_probe_active() noexcept;  // false under TSan/MSan, whose runtimes own operator new
}  // namespace jitembed::test
