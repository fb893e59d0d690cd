// Semantic checks of one field's metadata, shared by record_builder (what it writes) and record_view
// (what it accepts), so a builder never writes a record the reader rejects.
#pragma once

#include <cstdint>
#include <string>

#include "jitembed/codec/codec.hpp"
#include "jitembed/core/dtype.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/format/field.hpp"

namespace jitembed::format::detail {

inline constexpr int kCodecCount = 5;  // codec::codec_id raw..text

constexpr bool codec_known(std::uint8_t c) noexcept { return c < kCodecCount; }
constexpr bool kind_known(std::uint8_t k) noexcept { return k < kFieldKindCount; }
constexpr bool dtype_known(std::uint8_t d) noexcept { return d < kDtypeCount; }
constexpr bool valid_shuffle(std::uint8_t s) noexcept { return s == 0 || s == 2 || s == 4 || s == 8; }

// Which codecs a kind may use in 1.0.
constexpr bool codec_allowed(field_kind k, codec::codec_id c) noexcept {
  using codec::codec_id;
  switch (k) {
    case field_kind::bytes:
    case field_kind::json:
    case field_kind::tensor: return c == codec_id::raw || c == codec_id::zstd;
    case field_kind::text: return c == codec_id::raw || c == codec_id::text;
    case field_kind::image:
    case field_kind::video: return c != codec_id::text;
  }
  return false;
}

struct field_meta {
  std::uint8_t kind = 0;
  std::uint8_t codec = 0;
  std::uint8_t dtype = 0;
  std::uint8_t shuffle = 0;
  const jitembed::shape& shape;
  std::uint64_t payload_size = 0;
  std::uint64_t decoded_size = 0;
};

// Checks one field's metadata against the 1.0 rules and the limits; the message does not name the field
// (the caller prefixes it). newer_minor: the record is 1.(minor > ours), so unknown kind / codec / dtype
// bytes are accepted (the field stays reachable as bytes) and only the rules that still apply are checked.
inline result<void> check_field_meta(const field_meta& m, bool newer_minor, const decode_limits& lim) {
  const bool kind_ok = kind_known(m.kind), codec_ok = codec_known(m.codec), dtype_ok = dtype_known(m.dtype);
  if (!kind_ok && !newer_minor) return fail(errc::corrupt_data, "kind byte " + std::to_string(m.kind) + " is unknown");
  if (!codec_ok && !newer_minor)
    return fail(errc::unsupported_codec, "codec byte " + std::to_string(m.codec) + " is unknown");
  if (!dtype_ok && !newer_minor) return fail(errc::corrupt_data, "dtype byte " + std::to_string(m.dtype) + " is unknown");
  const std::size_t rank = m.shape.size();
  if (rank > lim.max_dims)
    return fail(errc::limit_exceeded, "rank " + std::to_string(rank) + " > max_dims " + std::to_string(lim.max_dims));
  for (std::size_t i = 0; i < rank; ++i)
    if (m.shape[i] < 0)
      return fail(errc::corrupt_data, "negative extent " + std::to_string(m.shape[i]) + " at dim " + std::to_string(i));
  // The shape rule of core/tensor.hpp (product_of_extents): exact, whatever the order of the extents or a
  // zero among them; docs/format.md "Kinds, codecs, dtypes" rule 2.
  const extent_product p = product_of_extents(m.shape.span());
  if (p.overflow_dim >= 0)
    return fail(errc::shape_overflow, "shape product of the non-zero extents overflows at dim " + std::to_string(p.overflow_dim) +
                                          " (shape " + m.shape.to_string() + ", limit 2^63 - 1)");
  const std::uint64_t numel = p.numel();
  if (numel > lim.max_elements)
    return fail(errc::limit_exceeded, "shape " + m.shape.to_string() + " has " + std::to_string(numel) +
                                          " elements > max_elements " + std::to_string(lim.max_elements));
  std::uint64_t nbytes = 0;
  if (dtype_ok) {
    const std::uint64_t es = element_size(static_cast<jitembed::dtype>(m.dtype));
    if (p.nonzero > kMaxShapeProduct / es)
      return fail(errc::shape_overflow, "byte size of the non-zero extents overflows (shape " + m.shape.to_string() + " of " +
                                            std::to_string(es) + "-byte elements, limit 2^63 - 1)");
    nbytes = numel * es;
  }
  if (m.decoded_size > lim.max_decoded_bytes)
    return fail(errc::limit_exceeded, "decoded size " + std::to_string(m.decoded_size) + " > max_decoded_bytes " +
                                          std::to_string(lim.max_decoded_bytes));
  if (!valid_shuffle(m.shuffle)) return fail(errc::corrupt_data, "shuffle " + std::to_string(m.shuffle) + " not in {0,2,4,8}");
  if (m.shuffle != 0 && m.codec != static_cast<std::uint8_t>(codec::codec_id::zstd))
    return fail(errc::corrupt_data, "shuffle " + std::to_string(m.shuffle) + " without codec zstd");
  if (codec_ok && m.codec == static_cast<std::uint8_t>(codec::codec_id::raw) && m.payload_size != m.decoded_size)
    return fail(errc::corrupt_data, "raw payload of " + std::to_string(m.payload_size) + " bytes but decoded size " +
                                        std::to_string(m.decoded_size));
  if (!kind_ok || !codec_ok || !dtype_ok) return {};  // newer minor: nothing more is known

  const auto kind = static_cast<field_kind>(m.kind);
  const auto cid = static_cast<codec::codec_id>(m.codec);
  if (!codec_allowed(kind, cid))
    return fail(errc::unsupported_codec, "codec " + std::string(codec::to_string(cid)) + " is not allowed for kind " +
                                             std::string(to_string(kind)));
  if (rank != 0 && (kind == field_kind::bytes || kind == field_kind::text || kind == field_kind::json))
    return fail(errc::corrupt_data, "rank " + std::to_string(rank) + " for kind " + std::string(to_string(kind)) +
                                        " (bytes, text and json fields have rank 0)");
  const bool has_shape = kind == field_kind::tensor || rank > 0;
  if (has_shape && m.decoded_size != nbytes)
    return fail(errc::corrupt_data, "decoded size " + std::to_string(m.decoded_size) + " != " +
                                        std::string(jitembed::to_string(static_cast<jitembed::dtype>(m.dtype))) +
                                        m.shape.to_string() + " = " + std::to_string(nbytes) + " bytes");
  if (!has_shape && m.dtype != static_cast<std::uint8_t>(jitembed::dtype::u8))
    return fail(errc::corrupt_data, "dtype " + std::string(jitembed::to_string(static_cast<jitembed::dtype>(m.dtype))) +
                                        " without a shape (kind " + std::string(to_string(kind)) + " must be u8)");
  if (!has_shape && (cid == codec::codec_id::jpeg || cid == codec::codec_id::video) && m.decoded_size != 0)
    return fail(errc::corrupt_data, "decoded size " + std::to_string(m.decoded_size) + " without a decoded shape");
  return {};
}

}  // namespace jitembed::format::detail
