// The string parameters of a model configuration (config.pbtxt's `parameters`) parsed with specific errors that
// name the file, the key and the value: what models/preprocess.hpp reads its settings with.
#pragma once

#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include <vector>

#include "jitembed/core/dtype.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::models::detail {

inline error_info bad_param(const std::string& file, std::string_view key, const std::string& value, std::string_view why) {
  return fail(errc::invalid_argument, file + ": parameters '" + std::string(key) + "' is '" + value + "': " + std::string(why));
}

inline result<std::int64_t> param_int(const std::string& file, std::string_view key, const std::string& v, std::int64_t lo,
                                      std::int64_t hi) {
  std::int64_t x = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  if (r.ec != std::errc() || r.ptr != v.data() + v.size() || x < lo || x > hi)
    return bad_param(file, key, v, "not an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  return x;
}

inline result<bool> param_bool(const std::string& file, std::string_view key, const std::string& v) {
  if (v == "true") return true;
  if (v == "false") return false;
  return bad_param(file, key, v, "not true or false");
}

inline result<std::array<float, 3>> param_floats3(const std::string& file, std::string_view key, const std::string& v, bool positive) {
  std::array<float, 3> out{};
  std::size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    const std::size_t end = i < 2 ? v.find(',', pos) : v.size();
    if (end == std::string::npos) return bad_param(file, key, v, "not 3 comma-separated numbers");
    std::string_view part(v.data() + pos, end - pos);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    const auto r = std::from_chars(part.data(), part.data() + part.size(), out[static_cast<std::size_t>(i)]);
    if (r.ec != std::errc() || r.ptr != part.data() + part.size() || !std::isfinite(out[static_cast<std::size_t>(i)]) ||
        (positive && !(out[static_cast<std::size_t>(i)] > 0)))
      return bad_param(file, key, v, positive ? "not 3 comma-separated positive numbers" : "not 3 comma-separated numbers");
    pos = end + 1;
  }
  return out;
}

// "i64 [2, 77]": an input's dtype and item dims, for messages.
inline std::string describe_input(dtype type, const std::vector<std::int64_t>& dims) {
  std::string d = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) d += (i ? ", " : "") + std::to_string(dims[i]);
  return std::string(to_string(type)) + " " + d + "]";
}

}  // namespace jitembed::models::detail
