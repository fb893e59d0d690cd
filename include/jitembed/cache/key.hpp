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
#include "jitembed/core/byte_order.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/core/preprocess_params.hpp"

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

// What a named-fields key is made of: key_inputs with several named contents instead of one.
struct fields_key_inputs {
  std::string_view model;
  std::string_view version;
  std::string_view preprocess;
  std::span<const key_field> fields;  // distinct names; their order does not matter
};

namespace detail {

// Which of the two key layouts follows the version word.
inline constexpr std::uint64_t kLayoutSingle = 1;
inline constexpr std::uint64_t kLayoutFields = 2;

inline void put_u64(hasher128& h, std::uint64_t v) noexcept {
  std::byte b[8];
  store_le(b, v);
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
inline result<cache_key> make_key(const fields_key_inputs& in) {
  std::vector<const key_field*> order;
  order.reserve(in.fields.size());
  for (const auto& f : in.fields) order.push_back(&f);
  std::sort(order.begin(), order.end(), [](const key_field* a, const key_field* b) { return a->name < b->name; });
  for (std::size_t i = 1; i < order.size(); ++i)
    if (order[i - 1]->name == order[i]->name)
      return fail(errc::invalid_argument, "cache key: field name '" + std::string(order[i]->name) + "' given twice");
  hasher128 h;
  detail::put_head(h, detail::kLayoutFields, in.model, in.version, in.preprocess);
  detail::put_u64(h, order.size());
  for (const key_field* f : order) {
    detail::put_part(h, as_bytes_view(f->name));
    detail::put_part(h, f->content);
  }
  return cache_key{h.digest()};
}

// The canonical preprocessing string of a key (key_inputs::preprocess) is built by preprocess_params, which
// lives in core (models build it without the cache component); this name stays for compatibility.
using jitembed::preprocess_params;

}  // namespace jitembed::cache
