// preprocess_params: the canonical string of a model's preprocessing parameters, part of every cache key
// (cache/key.hpp) and of a model's metadata; in core so models and caches build it without each other.
#pragma once

#include <charconv>
#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "jitembed/core/error.hpp"

namespace jitembed {

// Builds the canonical preprocessing string: `name=value;` for each parameter, sorted by name (byte-wise),
// with one spelling per value (see docs/cache.md), so equal parameter sets give equal strings whatever
// the order or the C++ type they were set with:
//   preprocess_params{}.set("bucket", 256).set("frame_stride", 4).str() == "bucket=256;frame_stride=4;"
// Setting a name again replaces its value. `\`, `=` and `;` inside names and string values are escaped
// with a backslash. An empty name throws jitembed::error (errc::invalid_argument).
class preprocess_params {
 public:
  preprocess_params() = default;

  preprocess_params& set(std::string_view name, std::string_view value) { return put(name, escape(value)); }
  preprocess_params& set(std::string_view name, const char* value) { return set(name, std::string_view(value)); }
  preprocess_params& set(std::string_view name, bool value) { return put(name, value ? "true" : "false"); }
  template <std::integral T>
    requires(!std::same_as<T, bool> && !std::same_as<T, char>)
  preprocess_params& set(std::string_view name, T value) {
    return put(name, format_number(value));
  }
  template <std::floating_point T>
  preprocess_params& set(std::string_view name, T value) {
    return put(name, format_number(value));
  }
  // A list of integers (e.g. a resize bucket 256x384), comma-separated.
  preprocess_params& set(std::string_view name, std::span<const std::int64_t> values) {
    std::string s;
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i) s.push_back(',');
      s += format_number(values[i]);
    }
    return put(name, std::move(s));
  }
  preprocess_params& set(std::string_view name, std::initializer_list<std::int64_t> values) {
    return set(name, std::span<const std::int64_t>(values.begin(), values.size()));
  }

  bool contains(std::string_view name) const { return params_.find(escape(name)) != params_.end(); }
  bool erase(std::string_view name) { return params_.erase(escape(name)) > 0; }
  std::size_t size() const noexcept { return params_.size(); }
  bool empty() const noexcept { return params_.empty(); }

  // The canonical string (empty when no parameter is set).
  std::string str() const {
    std::string s;
    for (const auto& [k, v] : params_) {
      s += k;
      s.push_back('=');
      s += v;
      s.push_back(';');
    }
    return s;
  }

  // Canonical spelling of a number: integers in decimal ("-3", "256"); floating point as the shortest
  // string that reads back to the same value (std::to_chars), so 256.0 == "256", 0.1f == "0.1";
  // -0.0 is "0", infinities "inf" / "-inf", every NaN "nan".
  template <std::integral T>
  static std::string format_number(T v) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
  }
  template <std::floating_point T>
  static std::string format_number(T v) {
    if (v != v) return "nan";
    if (v == T(0)) return "0";
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
  }

 private:
  static std::string escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
      if (c == '\\' || c == '=' || c == ';') out.push_back('\\');
      out.push_back(c);
    }
    return out;
  }
  preprocess_params& put(std::string_view name, std::string value) {
    if (name.empty()) throw error(errc::invalid_argument, "preprocess_params: empty parameter name");
    params_[escape(name)] = std::move(value);
    return *this;
  }

  std::map<std::string, std::string, std::less<>> params_;
};

}  // namespace jitembed
