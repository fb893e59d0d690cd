// Field vocabulary of the sample format: wire-stable field kinds, tensor encodings, checksum policy.
#pragma once

#include <cstdint>
#include <string_view>

#include "jitembed/codec/codec.hpp"
#include "jitembed/core/dtype.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::format {

// What a field holds. Wire-stable u8 values; a reader of 1.x keeps fields of unknown kinds from a newer
// minor reachable as bytes (kind() returns the stored value, is_known(kind) is false).
enum class field_kind : std::uint8_t {
  bytes = 0,   // opaque bytes (raw or zstd)
  image = 1,   // an encoded image (JPEG via codec jpeg, other formats as raw bytes); decode_with(codec)
  video = 2,   // an encoded clip (codec video); decode_with(codec)
  text = 3,    // UTF-8 text (raw, or codec text = zstd of validated UTF-8)
  tensor = 4,  // a dense tensor: dtype + shape, raw (zero-copy) or zstd (+ byte shuffle)
  json = 5,    // UTF-8 JSON text (raw or zstd); parsing is the caller's choice of library
};

inline constexpr int kFieldKindCount = 6;

constexpr bool is_known(field_kind k) noexcept { return static_cast<std::uint8_t>(k) < kFieldKindCount; }

constexpr std::string_view to_string(field_kind k) noexcept {
  switch (k) {
    case field_kind::bytes: return "bytes";
    case field_kind::image: return "image";
    case field_kind::video: return "video";
    case field_kind::text: return "text";
    case field_kind::tensor: return "tensor";
    case field_kind::json: return "json";
  }
  return "unknown";
}

// How record_builder stores a tensor or a byte payload.
enum class compression : std::uint8_t { raw = 0, zstd = 1 };

struct tensor_encoding {
  compression method = compression::raw;
  int level = 3;              // zstd level
  std::uint8_t shuffle = 0;   // byte-shuffle element size before zstd: 0 (none), 2, 4 or 8

  static constexpr tensor_encoding raw() noexcept { return {}; }
  static constexpr tensor_encoding zstd(int level = 3, std::uint8_t shuffle = 0) noexcept {
    return {compression::zstd, level, shuffle};
  }
};

// Whether an access hashes the payload against its stored XXH3-64 first. A field verified once stays
// verified for the life of its record_view (the check is not repeated).
enum class checksum_policy : std::uint8_t { verify = 0, skip = 1 };

// Metadata of an already-encoded payload given to record_builder::add_encoded.
struct encoded_info {
  jitembed::dtype dtype = jitembed::dtype::u8;  // element type of the decoded form
  jitembed::shape shape{};                      // decoded shape; rank 0 = unknown / not a tensor
  std::uint64_t decoded_size = 0;               // decoded bytes (0 = unknown for image/video codecs)
  std::uint8_t shuffle = 0;                     // zstd byte-shuffle element size (0, 2, 4, 8)
};

}  // namespace jitembed::format
