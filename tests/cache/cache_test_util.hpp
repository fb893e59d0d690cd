// Helpers shared by the cache tests.
#pragma once

#include <cstdint>
#include <string>

#include "jitembed/cache/key.hpp"

namespace cache_test {

// The key of a small integer's decimal text (model "m", version "v"): distinct keys for distinct n.
inline jitembed::cache::cache_key key_n(std::uint64_t n) {
  const std::string s = std::to_string(n);
  return jitembed::cache::make_key(jitembed::cache::key_inputs{"m", "v", "", jitembed::as_bytes_view(s)});
}

}  // namespace cache_test
