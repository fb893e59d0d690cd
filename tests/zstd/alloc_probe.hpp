// Largest single operator-new request since the last reset (test_zstd replaces global operator new).
#pragma once

#include <cstddef>

namespace jitembed::test {
void reset_max_alloc() noexcept;
std::size_t max_alloc() noexcept;
}  // namespace jitembed::test
