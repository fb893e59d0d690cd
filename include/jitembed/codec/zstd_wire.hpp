// Tensor bytes compressed for the wire (net/kserve/compression.hpp names the protocol): a byte-plane
// split by element size (codec/shuffle.hpp), then one zstd frame at a fast level; sent only when it saves
// at least a stated fraction. Decompression allocates exactly the announced raw size, and only after
// checking it against a limit, and fails unless the frame decodes to exactly that many bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "jitembed/codec/zstd_wire_options.hpp"
#include "jitembed/codec/zstd.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"

namespace jitembed::codec {

// The shuffle width for an element size: 2, 4 or 8 (the byte planes of f16/bf16, f32/i32, f64/i64); 0
// (no shuffle) otherwise.
constexpr std::size_t wire_shuffle_width(std::size_t element_size) noexcept {
  return element_size == 2 || element_size == 4 || element_size == 8 ? element_size : 0;
}

// `raw` compressed when that pays (at least o.min_saving smaller, raw at least o.min_bytes); nullopt: send
// it raw. Errors: encode_failed (zstd refused).
inline result<std::optional<byte_buffer>> compress_for_wire(bytes_view raw, std::size_t element_size,
                                                            const wire_compression_options& o = {}) {
  if (raw.size() < o.min_bytes || o.min_saving >= 1.0) return std::optional<byte_buffer>{};
  zstd_options zo;
  zo.level = o.level;
  zo.shuffle = wire_shuffle_width(element_size);
  if (zo.shuffle && raw.size() % zo.shuffle) zo.shuffle = 0;
  const zstd_codec codec(zo);
  byte_buffer out(zstd_codec::compress_bound(raw.size()));
  JITEMBED_ASSIGN_OR_RETURN(const auto n, codec.compress(raw, mutable_bytes(out.data(), out.size())));
  if (static_cast<double>(n) > (1.0 - o.min_saving) * static_cast<double>(raw.size()))
    return std::optional<byte_buffer>{};
  out.resize(n);
  return std::optional<byte_buffer>{std::move(out)};
}

// The raw bytes of a compressed tensor: exactly `raw_size` bytes. Errors: limit_exceeded (raw_size over
// max_bytes, checked before allocating), decode_failed / corrupt_data / buffer_too_small (the frame is
// damaged or decodes to another size).
inline result<byte_buffer> decompress_from_wire(bytes_view compressed, std::uint64_t raw_size, std::size_t element_size,
                                                std::uint64_t max_bytes) {
  if (raw_size > max_bytes)
    return fail(errc::limit_exceeded, "compressed tensor announces " + std::to_string(raw_size) +
                                          " raw bytes > the limit " + std::to_string(max_bytes));
  zstd_options zo;
  zo.shuffle = wire_shuffle_width(element_size);
  if (zo.shuffle && raw_size % zo.shuffle) zo.shuffle = 0;
  const zstd_codec codec(zo);
  byte_buffer out(static_cast<std::size_t>(raw_size));
  decode_limits lim;
  lim.max_decoded_bytes = max_bytes;
  JITEMBED_TRY(codec.decompress_into(compressed, mutable_bytes(out.data(), out.size()), lim));
  return out;
}

}  // namespace jitembed::codec
