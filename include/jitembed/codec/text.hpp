// Text and token codecs: strict UTF-8 validation plus zstd for captions, and byte-shuffled zstd for
// token id tensors (i32/i64).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "jitembed/codec/codec.hpp"
#include "jitembed/codec/zstd.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/core/utf8.hpp"

namespace jitembed::codec {

// Strict UTF-8 validation (core/utf8.hpp): the one validator, under its codec-side name.
using jitembed::validate_utf8;

namespace detail {
inline result<void> check_text_view(const tensor_view& v) {
  if (!v.device().is_cpu()) return fail(errc::invalid_argument, "text: tensor is not on the CPU");
  if (v.dtype() != dtype::u8)
    return fail(errc::dtype_mismatch, "text: dtype " + std::string(to_string(v.dtype())) + " is not u8");
  if (v.rank() != 1) return fail(errc::invalid_argument, "text: rank " + std::to_string(v.rank()) + " tensor, expected 1-D bytes");
  if (!v.is_contiguous()) return fail(errc::invalid_argument, "text: tensor is not contiguous");
  return {};
}

inline zstd_codec text_zstd(int level, std::size_t shuffle = 0) {
  zstd_options o;
  o.level = level;
  o.shuffle = shuffle;
  return zstd_codec(std::move(o));
}
}  // namespace detail

// UTF-8 text as one plain zstd frame; models codec::codec (tensor: 1-D u8 of UTF-8 bytes).
class text_codec {
 public:
  static constexpr codec_id id = codec_id::text;
  int level = 3;

  result<std::size_t> max_encoded_size(const tensor_view& v) const {
    JITEMBED_TRY(detail::check_text_view(v));
    return zstd_codec::compress_bound(v.nbytes());
  }

  // Validates the text, then compresses it.
  result<std::size_t> encode(const tensor_view& v, mutable_bytes out) const {
    JITEMBED_TRY(detail::check_text_view(v));
    JITEMBED_TRY(validate_utf8(v.bytes()));
    return detail::text_zstd(level).compress(v.bytes(), out);
  }

  // Decompresses under limits, then validates: untrusted bytes never come back as invalid UTF-8.
  result<tensor> decode(bytes_view in, const decode_limits& limits) const {
    auto t = zstd_codec().decompress(in, limits);
    if (!t) return t;
    JITEMBED_TRY(validate_utf8(t->bytes()));
    return t;
  }
};

static_assert(codec<text_codec>);

inline result<byte_buffer> encode_text(std::string_view utf8, int level = 3) {
  JITEMBED_TRY(validate_utf8(utf8));
  const zstd_codec z = detail::text_zstd(level);
  byte_buffer out(zstd_codec::compress_bound(utf8.size()));
  JITEMBED_ASSIGN_OR_RETURN(auto n, z.compress(as_bytes_view(utf8), out));
  out.resize(n);
  return out;
}

inline result<std::string> decode_text(bytes_view encoded, const decode_limits& limits) {
  JITEMBED_ASSIGN_OR_RETURN(auto t, text_codec().decode(encoded, limits));
  return std::string(as_string_view(t.bytes()));
}

// Token ids (1-D i32 or i64): byte-shuffled by element size, then zstd. errc::dtype_mismatch otherwise.
inline result<byte_buffer> encode_tokens(const tensor_view& ids, int level = 3) {
  if (ids.dtype() != dtype::i32 && ids.dtype() != dtype::i64)
    return fail(errc::dtype_mismatch, "tokens: dtype " + std::string(to_string(ids.dtype())) + ", expected i32 or i64");
  if (ids.rank() != 1) return fail(errc::invalid_argument, "tokens: rank " + std::to_string(ids.rank()) + ", expected 1-D");
  if (!ids.device().is_cpu() || !ids.is_contiguous())
    return fail(errc::invalid_argument, "tokens: tensor must be contiguous on the CPU");
  const zstd_codec z = detail::text_zstd(level, ids.itemsize());
  byte_buffer out(zstd_codec::compress_bound(ids.nbytes()));
  JITEMBED_ASSIGN_OR_RETURN(auto n, z.compress(ids.bytes(), out));
  out.resize(n);
  return out;
}

// Decodes token ids of dtype t (i32 or i64); the decoded size must be a multiple of the element size.
inline result<tensor> decode_tokens(bytes_view encoded, dtype t, const decode_limits& limits) {
  if (t != dtype::i32 && t != dtype::i64)
    return fail(errc::dtype_mismatch, "tokens: dtype " + std::string(to_string(t)) + ", expected i32 or i64");
  const std::size_t es = element_size(t);
  decode_limits lim = limits;
  // Bounded in elements of t, not bytes: max_elements counts tokens.
  const std::uint64_t max_bytes_by_elems =
      limits.max_elements > UINT64_MAX / es ? UINT64_MAX : limits.max_elements * es;
  lim.max_decoded_bytes = std::min(limits.max_decoded_bytes, max_bytes_by_elems);
  lim.max_elements = lim.max_decoded_bytes;
  auto raw = detail::text_zstd(3, es).decompress(encoded, lim);
  if (!raw) return raw;
  if (raw->nbytes() % es != 0)
    return fail(errc::corrupt_data, "tokens: decoded " + std::to_string(raw->nbytes()) + " bytes, not a multiple of " +
                                        std::to_string(es) + " (" + std::string(to_string(t)) + ")");
  const tensor_view v(raw->data(), t, shape{static_cast<std::int64_t>(raw->nbytes() / es)});
  return tensor::wrap(raw->owner(), v);
}

}  // namespace jitembed::codec
