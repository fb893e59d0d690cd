// record_builder: assembles one sample record. Payloads given as views are referenced (not copied) until
// write(); compressed payloads live in the builder. write() is the one copy of each payload (hashed while
// it is copied); gather() hands out the pieces for writev-style I/O instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/codec/codec.hpp"
#include "jitembed/codec/text.hpp"
#include "jitembed/codec/zstd.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/format/detail/copy_hash.hpp"
#include "jitembed/format/detail/validate.hpp"
#include "jitembed/format/detail/wire.hpp"
#include "jitembed/format/field.hpp"
#include "jitembed/format/gather.hpp"
#include "jitembed/format/record_view.hpp"

namespace jitembed::format {

class record_builder {
 public:
  record_builder() = default;

  // An encoded JPEG (referenced). The decoded shape is unknown to the format (decode_with tells).
  result<void> add_image(std::string_view name, bytes_view encoded_jpeg) {
    return add_encoded(name, field_kind::image, codec::codec_id::jpeg, encoded_jpeg);
  }
  // An encoded clip (MP4 / WebM / MKV; referenced).
  result<void> add_video(std::string_view name, bytes_view encoded_clip) {
    return add_encoded(name, field_kind::video, codec::codec_id::video, encoded_clip);
  }
  // Validated UTF-8, compressed with the text codec at `level`; stored raw instead when level == 0 or when
  // compression does not save a 64-byte block (short captions: decoding them then costs no zstd call). Text is copied into the builder (string_views
  // of temporaries are common; captions are small).
  result<void> add_text(std::string_view name, std::string_view utf8, int level = 3) {
    JITEMBED_TRY(check_name(name));
    if (auto ok = codec::validate_utf8(utf8); !ok) return prefixed(name, ok.error());
    // Text of one block or less cannot shrink by a block (any encoding is at least one): no zstd call.
    if (level != 0 && utf8.size() > kAlignment) {
      auto enc = codec::encode_text(utf8, level);
      if (!enc) return prefixed(name, enc.error());
      if (align_up(enc->size()) < align_up(utf8.size())) {  // saves at least one 64-byte block
        encoded_info info;
        info.decoded_size = utf8.size();
        return push_owned(name, field_kind::text, codec::codec_id::text, std::move(*enc), info);
      }
    }
    encoded_info info;
    info.decoded_size = utf8.size();
    const bytes_view raw = as_bytes_view(utf8);
    return push_owned(name, field_kind::text, codec::codec_id::raw, byte_buffer(raw.begin(), raw.end()), info);
  }
  // UTF-8 JSON text (validated as UTF-8 only), raw or zstd; copied into the builder like text.
  result<void> add_json(std::string_view name, std::string_view json, compression c = compression::raw, int level = 3) {
    if (auto ok = codec::validate_utf8(json); !ok) return prefixed(name, ok.error());
    if (c == compression::zstd) return add_bytes_as(name, field_kind::json, as_bytes_view(json), c, level);
    JITEMBED_TRY(check_name(name));
    encoded_info info;
    info.decoded_size = json.size();
    const bytes_view raw = as_bytes_view(json);
    return push_owned(name, field_kind::json, codec::codec_id::raw, byte_buffer(raw.begin(), raw.end()), info);
  }
  // A contiguous CPU tensor: raw (referenced; decodes zero-copy) or zstd (+ optional byte shuffle).
  result<void> add_tensor(std::string_view name, const tensor_view& t, tensor_encoding enc = {}) {
    if (!t.device().is_cpu()) return fail(errc::invalid_argument, "record_builder: tensor '" + std::string(name) + "' is not on the CPU");
    if (!t.is_contiguous())
      return fail(errc::invalid_argument, "record_builder: tensor '" + std::string(name) + "' is not contiguous");
    if (!is_valid(t.dtype())) return fail(errc::dtype_mismatch, "record_builder: tensor '" + std::string(name) + "' has an invalid dtype");
    encoded_info info;
    info.dtype = t.dtype();
    info.shape = t.shape();
    info.decoded_size = t.nbytes();
    const bytes_view data(static_cast<const std::byte*>(t.data()), t.nbytes());
    if (enc.method == compression::raw) {
      if (enc.shuffle != 0) return fail(errc::invalid_argument, "record_builder: shuffle needs compression::zstd");
      return push(name, field_kind::tensor, codec::codec_id::raw, data, info, std::nullopt);
    }
    if (!detail::valid_shuffle(enc.shuffle))
      return fail(errc::invalid_argument, "record_builder: shuffle " + std::to_string(enc.shuffle) + " not in {0,2,4,8}");
    info.shuffle = enc.shuffle;
    auto z = compress(name, data, enc.level, enc.shuffle);
    if (!z) return z.error();
    return push_owned(name, field_kind::tensor, codec::codec_id::zstd, std::move(*z), info);
  }
  // Opaque bytes, raw (referenced) or zstd.
  result<void> add_bytes(std::string_view name, bytes_view data, compression c = compression::raw, int level = 3) {
    return add_bytes_as(name, field_kind::bytes, data, c, level);
  }
  // Any payload already encoded by `codec` (referenced). `info` carries the decoded dtype / shape / size
  // where known; the same rules as the reader's apply (docs/format.md).
  result<void> add_encoded(std::string_view name, field_kind kind, codec::codec_id codec, bytes_view payload,
                           const encoded_info& info = {}) {
    return push(name, kind, codec, payload, info, std::nullopt);
  }
  // Encodes `v` with any codec into the builder (e.g. jpeg_codec for an image tensor); the field records
  // v's dtype and shape as the decoded shape.
  template <codec::codec C>
  result<void> add_encoded_with(std::string_view name, field_kind kind, const C& c, const tensor_view& v) {
    auto enc = codec::encode_to_buffer(c, v);
    if (!enc) return prefixed(name, enc.error());
    encoded_info info;
    info.dtype = v.dtype();
    info.shape = v.shape();
    info.decoded_size = v.nbytes();
    return push_owned(name, kind, C::id, std::move(*enc), info);
  }
  // A field of a parsed record, referenced (its payload stays in that record's buffer) with its stored
  // checksum: re-batching records costs no hashing.
  result<void> add_field(const field_view& f) {
    encoded_info info;
    info.dtype = f.dtype();
    info.shape = f.shape();
    info.decoded_size = f.decoded_size();
    info.shuffle = f.shuffle();
    return push(f.name(), f.kind(), f.codec(), f.payload(), info, f.checksum());  // 1.0 writes no entry flags
  }

  std::size_t size() const noexcept { return fields_.size(); }
  bool empty() const noexcept { return fields_.empty(); }
  void clear() noexcept { fields_.clear(); }

  // Bytes write() produces.
  std::size_t encoded_size() const noexcept {
    std::size_t total = align_up(meta_size());
    for (const auto& f : fields_) total += align_up(f.payload().size());
    return total;
  }

  // Writes the record into out (out.size() >= encoded_size()); returns the bytes written.
  result<std::size_t> write(mutable_bytes out) const {
    const std::size_t meta = meta_size();
    if (meta > std::numeric_limits<std::uint32_t>::max())
      return fail(errc::limit_exceeded, "record_builder: field table of " + std::to_string(meta) + " bytes > 4 GiB");
    const std::size_t total = encoded_size();
    if (out.size() < total)
      return fail(errc::buffer_too_small, "record_builder: output of " + std::to_string(out.size()) + " bytes < record of " +
                                              std::to_string(total));
    std::byte* o = out.data();
    std::vector<std::uint64_t> sums(fields_.size());
    std::size_t pos = align_up(meta);
    for (std::size_t i = 0; i < fields_.size(); ++i) {
      const auto& f = fields_[i];
      const bytes_view p = f.payload();
      if (f.checksum) {
        if (!p.empty()) std::memcpy(o + pos, p.data(), p.size());
        sums[i] = *f.checksum;
      } else {
        sums[i] = detail::copy_and_hash(o + pos, p);
      }
      const std::size_t end = pos + p.size();
      pos = align_up(end);
      std::memset(o + end, 0, pos - end);
    }
    write_meta(o, meta, total, sums);
    return total;
  }

  result<byte_buffer> finish() const {
    byte_buffer out(encoded_size());
    auto n = write(out);
    if (!n) return n.error();
    return out;
  }

  // The record as pieces: [header+table+padding][payload 0][padding]... Concatenated == write()'s bytes.
  // Payload pieces point into the caller's memory or into this builder: both must outlive the list.
  result<gather_list> gather() const {
    gather_list g;
    JITEMBED_TRY(gather_into(g));
    return g;
  }

  // Appends this record's pieces to g (used by batch_builder and shard_writer).
  result<void> gather_into(gather_list& g) const {
    const std::size_t meta = meta_size();
    if (meta > std::numeric_limits<std::uint32_t>::max())
      return fail(errc::limit_exceeded, "record_builder: field table of " + std::to_string(meta) + " bytes > 4 GiB");
    const std::size_t total = encoded_size();
    std::vector<std::uint64_t> sums(fields_.size());
    for (std::size_t i = 0; i < fields_.size(); ++i)
      sums[i] = fields_[i].checksum ? *fields_[i].checksum : detail::payload_hash(fields_[i].payload());
    byte_buffer head(align_up(meta));
    write_meta(head.data(), meta, total, sums);
    g.storage.push_back(std::move(head));
    g.pieces.push_back(g.storage.back());
    for (const auto& f : fields_) {
      const bytes_view p = f.payload();
      if (!p.empty()) g.pieces.push_back(p);
      const std::size_t pad = align_up(p.size()) - p.size();
      if (pad) g.pieces.push_back(bytes_view(detail::zero_padding(), pad));
    }
    g.size += total;
    return {};
  }

 private:
  struct pending {
    std::string name;
    field_kind kind = field_kind::bytes;
    codec::codec_id codec = codec::codec_id::raw;
    encoded_info info;
    bytes_view view;
    byte_buffer owned;
    bool is_owned = false;
    std::optional<std::uint64_t> checksum;
    bytes_view payload() const noexcept { return is_owned ? bytes_view(owned) : view; }
  };

  static decode_limits writer_limits() noexcept {
    decode_limits l;
    l.max_record_bytes = ~std::uint64_t{0};
    l.max_fields = ~std::uint32_t{0};
    l.max_dims = kMaxDims;
    l.max_elements = ~std::uint64_t{0};
    l.max_decoded_bytes = ~std::uint64_t{0};
    l.max_name_bytes = 0xffff;
    return l;
  }

  static error_info prefixed(std::string_view name, const error_info& e) {
    return fail(e.code, "record_builder: field '" + std::string(name) + "': " + e.message);
  }

  result<void> check_name(std::string_view name) const {
    if (name.empty()) return fail(errc::invalid_argument, "record_builder: empty field name");
    if (auto ok = codec::validate_utf8(name); !ok)
      return fail(errc::invalid_utf8, "record_builder: field name is not UTF-8: " + ok.error().message);
    if (name.size() > 0xffff)
      return fail(errc::invalid_argument, "record_builder: field name of " + std::to_string(name.size()) + " bytes > 65535");
    for (const auto& f : fields_)
      if (f.name == name) return fail(errc::invalid_argument, "record_builder: duplicate field name '" + std::string(name) + "'");
    if (fields_.size() >= std::numeric_limits<std::uint32_t>::max())
      return fail(errc::limit_exceeded, "record_builder: too many fields");
    return {};
  }

  result<byte_buffer> compress(std::string_view name, bytes_view data, int level, std::uint8_t shuffle) const {
    codec::zstd_options o;
    o.level = level;
    o.shuffle = shuffle;
    const codec::zstd_codec z(std::move(o));
    byte_buffer out(codec::zstd_codec::compress_bound(data.size()));
    auto n = z.compress(data, out);
    if (!n) return prefixed(name, n.error());
    out.resize(*n);
    return out;
  }

  result<void> add_bytes_as(std::string_view name, field_kind kind, bytes_view data, compression c, int level) {
    encoded_info info;
    info.decoded_size = data.size();
    if (c == compression::raw) return push(name, kind, codec::codec_id::raw, data, info, std::nullopt);
    JITEMBED_TRY(check_name(name));
    auto z = compress(name, data, level, 0);
    if (!z) return z.error();
    return push_owned(name, kind, codec::codec_id::zstd, std::move(*z), info);
  }

  result<void> push(std::string_view name, field_kind kind, codec::codec_id codec, bytes_view payload,
                    const encoded_info& info, std::optional<std::uint64_t> checksum) {
    JITEMBED_TRY(check_name(name));
    JITEMBED_TRY(check_meta(name, kind, codec, payload.size(), info));
    pending p;
    p.name = std::string(name);
    p.kind = kind;
    p.codec = codec;
    p.info = info;
    p.view = payload;
    p.checksum = checksum;
    fields_.push_back(std::move(p));
    return {};
  }

  result<void> push_owned(std::string_view name, field_kind kind, codec::codec_id codec, byte_buffer payload,
                          const encoded_info& info) {
    const std::uint64_t checksum = detail::payload_hash(payload);  // hot in cache right after encoding
    JITEMBED_TRY(push(name, kind, codec, payload, info, checksum));
    pending& p = fields_.back();
    p.owned = std::move(payload);  // the builder keeps the bytes; payload() reads them from here
    p.is_owned = true;
    p.view = {};
    return {};
  }

  result<void> check_meta(std::string_view name, field_kind kind, codec::codec_id codec, std::size_t payload_size,
                          const encoded_info& info) const {
    detail::field_meta m{static_cast<std::uint8_t>(kind), static_cast<std::uint8_t>(codec),
                         static_cast<std::uint8_t>(info.dtype), info.shuffle, info.shape, payload_size, info.decoded_size};
    if (auto ok = detail::check_field_meta(m, false, writer_limits()); !ok) return prefixed(name, ok.error());
    return {};
  }

  // Header + field table + names/shapes, before padding to 64.
  std::size_t meta_size() const noexcept {
    std::size_t n = detail::kRecordHeaderSize + fields_.size() * detail::kEntrySize;
    for (const auto& f : fields_) n += align_up(8 * f.info.shape.size() + f.name.size(), 8);
    return n;
  }

  // Writes header, table, names/shapes and the padding up to the first payload into o[0, align_up(meta)).
  void write_meta(std::byte* o, std::size_t meta, std::size_t total, const std::vector<std::uint64_t>& sums) const {
    using detail::store_le;
    std::memset(o, 0, detail::kRecordHeaderSize);
    std::memset(o + meta, 0, align_up(meta) - meta);
    std::size_t extra = detail::kRecordHeaderSize + fields_.size() * detail::kEntrySize;
    std::size_t pos = align_up(meta);
    for (std::size_t i = 0; i < fields_.size(); ++i) {
      const auto& f = fields_[i];
      std::byte* e = o + detail::kRecordHeaderSize + i * detail::kEntrySize;
      std::memset(e, 0, detail::kEntrySize);
      const std::size_t psize = f.payload().size();
      store_le<std::uint64_t>(e + detail::kEPayloadOffset, pos);
      store_le<std::uint64_t>(e + detail::kEPayloadSize, psize);
      store_le<std::uint64_t>(e + detail::kEDecodedSize, f.info.decoded_size);
      store_le<std::uint64_t>(e + detail::kEChecksum, sums[i]);
      store_le<std::uint32_t>(e + detail::kEExtraOffset, static_cast<std::uint32_t>(extra));
      store_le<std::uint16_t>(e + detail::kENameSize, static_cast<std::uint16_t>(f.name.size()));
      e[detail::kEKind] = static_cast<std::byte>(f.kind);
      e[detail::kECodec] = static_cast<std::byte>(f.codec);
      e[detail::kEDtype] = static_cast<std::byte>(f.info.dtype);
      e[detail::kERank] = static_cast<std::byte>(f.info.shape.size());
      e[detail::kEShuffle] = static_cast<std::byte>(f.info.shuffle);
      // entry flags (byte 43) and reserved bytes stay zero: 1.0 defines none
      const std::size_t rank = f.info.shape.size();
      for (std::size_t d = 0; d < rank; ++d) store_le<std::int64_t>(o + extra + 8 * d, f.info.shape[d]);
      std::memcpy(o + extra + 8 * rank, f.name.data(), f.name.size());
      const std::size_t end = extra + 8 * rank + f.name.size();
      extra = align_up(end, 8);
      std::memset(o + end, 0, extra - end);
      pos = align_up(pos + psize);
    }
    store_le<std::uint32_t>(o + detail::kHMagic, detail::kRecordMagic);
    store_le<std::uint16_t>(o + detail::kHMajor, kMajorVersion);
    store_le<std::uint16_t>(o + detail::kHMinor, kMinorVersion);
    store_le<std::uint16_t>(o + detail::kHHeaderSize, static_cast<std::uint16_t>(detail::kRecordHeaderSize));
    store_le<std::uint16_t>(o + detail::kHEntrySize, static_cast<std::uint16_t>(detail::kEntrySize));
    store_le<std::uint32_t>(o + detail::kHFieldCount, static_cast<std::uint32_t>(fields_.size()));
    store_le<std::uint32_t>(o + detail::kHFlags, 0);
    store_le<std::uint32_t>(o + detail::kHMetaSize, static_cast<std::uint32_t>(meta));
    store_le<std::uint64_t>(o + detail::kHRecordSize, total);
    detail::store_checksum(o, meta);
  }

  std::vector<pending> fields_;
};

}  // namespace jitembed::format
