// Cache keys: XXH3-128 over (model, version, canonical preprocessing string, content), length-prefixed so
// no two different inputs collide by concatenation; the exact byte layout is in docs/cache.md.
#pragma once

#include <algorithm>
#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "jitembed/cache/store.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"

namespace jitembed::cache {

// Bumped whenever the layout below changes: every key changes with it (old cache entries become misses).
inline constexpr std::uint64_t kKeyFormatVersion = 1;
// Domain tag hashed first, so a cache key never equals an XXH3-128 computed for another purpose.
inline constexpr std::string_view kKeyDomainTag = "jitembed/cache-key";

// What a single-content key is made of.
struct key_inputs {
  std::string_view model;       // model name, e.g. "sdxl-vae"
  std::string_view version;     // model version or weights fingerprint
  std::string_view preprocess;  // canonical preprocessing string (preprocess_params::str())
  bytes_view content;           // the field's content bytes (e.g. the encoded JPEG)
};

// One named content piece of a multi-field key (e.g. a record's image and its caption).
struct key_field {
  std::string_view name;
  bytes_view content;
};

namespace detail {

// Which of the two key layouts follows the version word.
inline constexpr std::uint64_t kLayoutSingle = 1;
inline constexpr std::uint64_t kLayoutFields = 2;

inline void put_u64(hasher128& h, std::uint64_t v) noexcept {
  std::byte b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<std::byte>(v >> (8 * i));
  h.update(bytes_view(b, 8));
}
inline void put_part(hasher128& h, bytes_view part) noexcept {
  put_u64(h, part.size());
  h.update(part);
}
inline void put_head(hasher128& h, std::uint64_t layout, std::string_view model, std::string_view version,
                     std::string_view preprocess) noexcept {
  h.update(as_bytes_view(kKeyDomainTag));
  put_u64(h, kKeyFormatVersion);
  put_u64(h, layout);
  put_part(h, as_bytes_view(model));
  put_part(h, as_bytes_view(version));
  put_part(h, as_bytes_view(preprocess));
}

}  // namespace detail

// The content address of one embedding: see docs/cache.md ("Key layout").
inline cache_key make_key(const key_inputs& in) {
  hasher128 h;
  detail::put_head(h, detail::kLayoutSingle, in.model, in.version, in.preprocess);
  detail::put_part(h, in.content);
  return cache_key{h.digest()};
}

// The content address of an embedding computed from several named pieces. Fields are hashed in name
// order (byte-wise), so the order the caller lists them in does not matter; names must be distinct
// (errc::invalid_argument otherwise). Never equal to a single-content key (different layout word).
inline result<cache_key> make_key(std::string_view model, std::string_view version, std::string_view preprocess,
                                  std::span<const key_field> fields) {
  std::vector<const key_field*> order;
  order.reserve(fields.size());
  for (const auto& f : fields) order.push_back(&f);
  std::sort(order.begin(), order.end(), [](const key_field* a, const key_field* b) { return a->name < b->name; });
  for (std::size_t i = 1; i < order.size(); ++i)
    if (order[i - 1]->name == order[i]->name)
      return fail(errc::invalid_argument, "cache key: field name '" + std::string(order[i]->name) + "' given twice");
  hasher128 h;
  detail::put_head(h, detail::kLayoutFields, model, version, preprocess);
  detail::put_u64(h, order.size());
  for (const key_field* f : order) {
    detail::put_part(h, as_bytes_view(f->name));
    detail::put_part(h, f->content);
  }
  return cache_key{h.digest()};
}

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

}  // namespace jitembed::cache
