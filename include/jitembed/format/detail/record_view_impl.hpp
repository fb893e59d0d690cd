// record_view's and field_view's out-of-line members: checksum verification, decoding and text of a field,
// and the parser of a record's header, field table and names.
// Included at the end of jitembed/format/record_view.hpp header-only, from format/src.hpp in separate
// compilation (core/config.hpp); users include record_view.hpp.
#pragma once

#include "jitembed/codec/text.hpp"
#include "jitembed/codec/zstd.hpp"
#include "jitembed/core/config.hpp"
#include "jitembed/format/detail/copy_hash.hpp"
#include "jitembed/format/record_view.hpp"

namespace jitembed::format {

// ---- field_view ---------------------------------------------------------------------------------

JITEMBED_DECL result<void> field_view::verify() const {
  if (verified_.load(std::memory_order_acquire)) return {};
  const std::uint64_t h = detail::payload_hash(payload_);
  if (h != checksum_) {
    char buf[80];
    std::snprintf(buf, sizeof buf, "payload checksum %016llx != stored %016llx", static_cast<unsigned long long>(h),
                  static_cast<unsigned long long>(checksum_));
    const auto off = rec_ ? static_cast<std::uint64_t>(payload_.data() - rec_->bytes.data()) : 0;
    return err(errc::checksum_mismatch, std::string(buf) + " (payload at offset " + std::to_string(off) + ", " +
                                            std::to_string(payload_.size()) + " bytes)");
  }
  verified_.store(true, std::memory_order_release);
  return {};
}

JITEMBED_DECL result<bytes_view> field_view::checked_payload() const {
  JITEMBED_TRY(verify());
  return payload_;
}

JITEMBED_DECL result<void> field_view::check_limits(const decode_limits& lim) const {
  if (shape_.size() > lim.max_dims)
    return err(errc::limit_exceeded, "rank " + std::to_string(shape_.size()) + " > max_dims " + std::to_string(lim.max_dims));
  if (decoded_size_ > lim.max_decoded_bytes)
    return err(errc::limit_exceeded, "decoded size " + std::to_string(decoded_size_) + " > max_decoded_bytes " +
                                         std::to_string(lim.max_decoded_bytes));
  const std::uint64_t elems = has_shape() ? (decoded_size_ / element_size(dtype())) : decoded_size_;
  if (elems > lim.max_elements)
    return err(errc::limit_exceeded, std::to_string(elems) + " elements > max_elements " + std::to_string(lim.max_elements));
  return {};
}

JITEMBED_DECL result<tensor> field_view::decode(const decode_limits& lim, checksum_policy policy) const {
  using codec::codec_id;
  if (!detail::codec_known(codec_))
    return err(errc::unsupported_codec, "codec byte " + std::to_string(codec_) + " is unknown to this reader");
  const auto cid = static_cast<codec_id>(codec_);
  if (cid == codec_id::jpeg || cid == codec_id::video)
    return err(errc::unsupported_codec, "codec " + std::string(codec::to_string(cid)) + " is decoded with decode_with(codec)");
  JITEMBED_TRY(check_limits(lim));
  JITEMBED_TRY(maybe_verify(policy));
  const bool shaped = has_shape();
  const jitembed::dtype dt = shaped ? dtype() : jitembed::dtype::u8;
  const jitembed::shape shp = shaped ? shape_ : jitembed::shape{static_cast<std::int64_t>(decoded_size_)};
  // Text and json fields hold UTF-8 whatever their codec (a field of an unknown kind is plain bytes).
  const bool utf8 = kind_ == static_cast<std::uint8_t>(field_kind::text) || kind_ == static_cast<std::uint8_t>(field_kind::json);
  if (cid == codec_id::raw) {
    if (utf8) {
      if (auto ok = codec::validate_utf8(payload_); !ok) return err(ok.code(), ok.error().message);
    }
    const auto addr = reinterpret_cast<std::uintptr_t>(payload_.data());
    if (addr % element_size(dt) == 0)
      return tensor::wrap(rec_ ? rec_->keep_alive : nullptr, tensor_view(payload_.data(), dt, shp));
    return tensor::copy_of(payload_, dt, shp);
  }
  tensor t = tensor::empty(shp, dt);
  codec::zstd_options o;
  o.shuffle = cid == codec_id::zstd ? shuffle_ : 0;
  auto n = codec::zstd_codec(std::move(o)).decompress_into(payload_, t.mutable_bytes_span(), lim);
  if (!n) return err(detail::stored_size_code(n.code()), n.error().message);
  if (utf8) {
    auto ok = codec::validate_utf8(t.bytes());
    if (!ok) return err(ok.code(), ok.error().message);
  }
  return t;
}

JITEMBED_DECL result<std::string> field_view::text(const decode_limits& lim, checksum_policy policy) const {
  using codec::codec_id;
  const auto k = kind();
  if (k != field_kind::text && k != field_kind::json && k != field_kind::bytes)
    return err(errc::invalid_argument, "kind " + std::string(to_string(k)) + " is not text");
  if (!detail::codec_known(codec_) || (codec() != codec_id::raw && codec() != codec_id::zstd && codec() != codec_id::text))
    return err(errc::unsupported_codec, "codec byte " + std::to_string(codec_) + " is not a text codec");
  JITEMBED_TRY(check_limits(lim));
  JITEMBED_TRY(maybe_verify(policy));
  std::string s;
  if (codec() == codec_id::raw) {
    s.assign(reinterpret_cast<const char*>(payload_.data()), payload_.size());
  } else {
    s.resize(static_cast<std::size_t>(decoded_size_));
    auto n = codec::zstd_codec().decompress_into(payload_, mutable_bytes(reinterpret_cast<std::byte*>(s.data()), s.size()), lim);
    if (!n) return err(detail::stored_size_code(n.code()), n.error().message);
  }
  auto ok = codec::validate_utf8(std::string_view(s));
  if (!ok) return err(ok.code(), ok.error().message);
  return s;
}

// ---- record_view::parse -------------------------------------------------------------------------

JITEMBED_DECL result<record_view> record_view::parse(bytes_view rec, const decode_limits& lim,
                                                     jitembed::keep_alive keep_alive) {
  using detail::load_le;
  const std::byte* b = rec.data();
  const std::size_t size = rec.size();
  if (size < detail::kRecordHeaderSize)
    return fail(errc::truncated, "record: " + std::to_string(size) + " bytes < the 64-byte header");
  if (load_le<std::uint32_t>(b + detail::kHMagic) != detail::kRecordMagic)
    return fail(errc::bad_magic, "record: magic at offset 0 is not 'JEMR'");
  const auto major = load_le<std::uint16_t>(b + detail::kHMajor);
  const auto minor = load_le<std::uint16_t>(b + detail::kHMinor);
  if (major != kMajorVersion)
    return fail(errc::unsupported_version, "record: major version " + std::to_string(major) + " (this reader reads " +
                                               std::to_string(kMajorVersion) + ".x)");
  const bool newer = minor > kMinorVersion;
  const std::size_t header_size = load_le<std::uint16_t>(b + detail::kHHeaderSize);
  const std::size_t entry_size = load_le<std::uint16_t>(b + detail::kHEntrySize);
  if (newer ? (header_size < detail::kRecordHeaderSize || header_size % 8 != 0) : header_size != detail::kRecordHeaderSize)
    return fail(errc::corrupt_data, "record: header_size " + std::to_string(header_size) + " at offset 8 (1." +
                                        std::to_string(minor) + " needs " + (newer ? ">= 64, a multiple of 8)" : "64)"));
  if (newer ? (entry_size < detail::kEntrySize || entry_size % 8 != 0) : entry_size != detail::kEntrySize)
    return fail(errc::corrupt_data, "record: entry_size " + std::to_string(entry_size) + " at offset 10 (1." +
                                        std::to_string(minor) + " needs " + (newer ? ">= 48, a multiple of 8)" : "48)"));
  const auto flags = load_le<std::uint32_t>(b + detail::kHFlags);
  if ((flags >> 16) != 0)
    return fail(errc::unsupported_version, "record: required flags 0x" + detail::hex(flags >> 16) +
                                               " (<< 16) at offset 16 are unknown to this reader");
  const auto record_size = load_le<std::uint64_t>(b + detail::kHRecordSize);
  if (record_size > lim.max_record_bytes)
    return fail(errc::limit_exceeded, "record: record_size " + std::to_string(record_size) + " > max_record_bytes " +
                                          std::to_string(lim.max_record_bytes));
  if (record_size > size)
    return fail(errc::truncated, "record: record_size " + std::to_string(record_size) + " but only " +
                                     std::to_string(size) + " bytes given");
  if (record_size < size)
    return fail(errc::corrupt_data, "record: record_size " + std::to_string(record_size) + " but " +
                                        std::to_string(size) + " bytes given (trailing bytes)");
  if (record_size % kPayloadAlignment != 0)
    return fail(errc::corrupt_data, "record: record_size " + std::to_string(record_size) + " is not a multiple of 64");
  const auto count = load_le<std::uint32_t>(b + detail::kHFieldCount);
  if (count > lim.max_fields)
    return fail(errc::limit_exceeded, "record: " + std::to_string(count) + " fields > max_fields " + std::to_string(lim.max_fields));
  const std::uint64_t table_end = header_size + std::uint64_t{count} * entry_size;
  const std::uint64_t meta_size = load_le<std::uint32_t>(b + detail::kHMetaSize);
  if (table_end > record_size)
    return fail(errc::corrupt_data, "record: field table of " + std::to_string(count) + " entries ends at " +
                                        std::to_string(table_end) + " > record_size " + std::to_string(record_size));
  if (meta_size < table_end || meta_size > record_size || meta_size % 8 != 0)
    return fail(errc::corrupt_data, "record: meta_size " + std::to_string(meta_size) + " at offset 20 outside [" +
                                        std::to_string(table_end) + ", " + std::to_string(record_size) +
                                        "] or not a multiple of 8");
  if (!detail::checksum_matches(b, static_cast<std::size_t>(meta_size)))
    return fail(errc::checksum_mismatch, "record: header checksum at offset 48 does not match bytes [0, " +
                                             std::to_string(meta_size) + ")");
  // What 1.0 defines as zero must be zero in a 1.0 record; a newer minor may give those bytes a meaning.
  if (!newer && (flags & 0xffffu) != 0)
    return fail(errc::corrupt_data, "record: optional flags 0x" + detail::hex(flags & 0xffffu) +
                                        " at offset 16 (1.0 defines none)");
  if (!newer && !detail::all_zero(b + detail::kHReserved, detail::kHReservedSize))
    return fail(errc::corrupt_data, "record: reserved header bytes [32, 48) are not zero");

  auto st = std::make_shared<detail::record_state>();
  st->bytes = rec;
  st->keep_alive = std::move(keep_alive);
  st->major = major;
  st->minor = minor;
  st->flags = flags;
  st->meta_size = static_cast<std::uint32_t>(meta_size);
  st->fields.resize(count);

  std::uint64_t next_extra = table_end;  // canonical position of the next dims+name block
  std::uint64_t next_payload = align_up(static_cast<std::size_t>(meta_size));
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::uint64_t eoff = header_size + std::uint64_t{i} * entry_size;
    const std::byte* e = b + eoff;
    auto bad = [&](errc code, const std::string& msg) {
      return fail(code, "record: field " + std::to_string(i) + " (entry at offset " + std::to_string(eoff) + "): " + msg);
    };
    field_view& f = st->fields[i];
    f.rec_ = st.get();
    f.index_ = i;
    f.kind_ = static_cast<std::uint8_t>(e[detail::kEKind]);
    f.codec_ = static_cast<std::uint8_t>(e[detail::kECodec]);
    f.dtype_ = static_cast<std::uint8_t>(e[detail::kEDtype]);
    f.shuffle_ = static_cast<std::uint8_t>(e[detail::kEShuffle]);
    f.flags_ = static_cast<std::uint8_t>(e[detail::kEFlags]);
    const std::size_t rank = static_cast<std::uint8_t>(e[detail::kERank]);
    const std::size_t name_size = load_le<std::uint16_t>(e + detail::kENameSize);
    const std::uint64_t extra = load_le<std::uint32_t>(e + detail::kEExtraOffset);
    if (rank > lim.max_dims || rank > kMaxDims)
      return bad(errc::limit_exceeded, "rank " + std::to_string(rank) + " > max_dims " +
                                           std::to_string(std::min<std::size_t>(lim.max_dims, kMaxDims)));
    if (name_size == 0) return bad(errc::corrupt_data, "empty name");
    if (name_size > lim.max_name_bytes)
      return bad(errc::limit_exceeded, "name of " + std::to_string(name_size) + " bytes > max_name_bytes " +
                                           std::to_string(lim.max_name_bytes));
    if (extra != next_extra)
      return bad(errc::corrupt_data, "name/shape offset " + std::to_string(extra) + " at entry byte 32, expected " +
                                         std::to_string(next_extra) + (extra % 8 ? " (misaligned)" : " (overlap or gap)"));
    const std::uint64_t extra_end = extra + 8 * rank + name_size;
    if (extra_end > meta_size)
      return bad(errc::corrupt_data, "name/shape [" + std::to_string(extra) + ", " + std::to_string(extra_end) +
                                         ") runs past the table end " + std::to_string(meta_size));
    next_extra = align_up(static_cast<std::size_t>(extra_end), 8);
    if (!detail::all_zero(b + extra_end, static_cast<std::size_t>(next_extra - extra_end)))
      return bad(errc::corrupt_data, "name padding [" + std::to_string(extra_end) + ", " + std::to_string(next_extra) +
                                         ") is not zero");
    for (std::size_t d = 0; d < rank; ++d) f.shape_.push_back(load_le<std::int64_t>(b + extra + 8 * d));
    f.name_ = std::string_view(reinterpret_cast<const char*>(b + extra + 8 * rank), name_size);
    if (auto ok = codec::validate_utf8(f.name_); !ok) return bad(errc::invalid_utf8, "name: " + ok.error().message);

    const auto poff = load_le<std::uint64_t>(e + detail::kEPayloadOffset);
    const auto psize = load_le<std::uint64_t>(e + detail::kEPayloadSize);
    f.decoded_size_ = load_le<std::uint64_t>(e + detail::kEDecodedSize);
    f.checksum_ = load_le<std::uint64_t>(e + detail::kEChecksum);
    if (poff % kPayloadAlignment != 0)
      return bad(errc::corrupt_data, "payload offset " + std::to_string(poff) + " is not a multiple of 64");
    if (poff != next_payload)
      return bad(errc::corrupt_data, "payload offset " + std::to_string(poff) + ", expected " + std::to_string(next_payload) +
                                         (poff < next_payload ? " (overlaps the previous payload or the table)" : " (gap)"));
    if (psize > record_size - poff)
      return bad(errc::corrupt_data, "payload [" + std::to_string(poff) + ", +" + std::to_string(psize) +
                                         ") runs past record_size " + std::to_string(record_size));
    next_payload = align_up(static_cast<std::size_t>(poff + psize));
    f.payload_ = bytes_view(b + poff, static_cast<std::size_t>(psize));
    if (!newer && f.flags_ != 0)
      return bad(errc::corrupt_data, "flags 0x" + detail::hex(f.flags_) + " at entry byte 43 (1.0 defines none)");
    if (!newer && !detail::all_zero(e + detail::kEReserved, detail::kEReservedSize))
      return bad(errc::corrupt_data, "reserved entry bytes [44, 48) are not zero");

    detail::field_meta m{f.kind_, f.codec_, f.dtype_, f.shuffle_, f.shape_, psize, f.decoded_size_};
    if (auto ok = detail::check_field_meta(m, newer, lim); !ok) return bad(ok.code(), "'" + std::string(f.name_) + "': " + ok.error().message);
  }
  if (align_up(static_cast<std::size_t>(next_extra), 8) != meta_size)
    return fail(errc::corrupt_data, "record: meta_size " + std::to_string(meta_size) + ", names and shapes end at " +
                                        std::to_string(next_extra));
  if (next_payload != record_size)
    return fail(errc::corrupt_data, "record: record_size " + std::to_string(record_size) + ", payloads end at " +
                                        std::to_string(next_payload));
  // Duplicate names: pairwise for small records, sorted otherwise.
  auto dup = [&](std::size_t a, std::size_t c) {
    return fail(errc::corrupt_data, "record: fields " + std::to_string(a) + " and " + std::to_string(c) +
                                        " share the name '" + std::string(st->fields[a].name_) + "'");
  };
  if (count <= 32) {
    for (std::size_t a = 0; a < count; ++a)
      for (std::size_t c = a + 1; c < count; ++c)
        if (st->fields[a].name_ == st->fields[c].name_) return dup(a, c);
  } else {
    std::vector<std::uint32_t> idx(count);
    for (std::uint32_t i = 0; i < count; ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](auto x, auto y) { return st->fields[x].name_ < st->fields[y].name_; });
    for (std::size_t k = 1; k < count; ++k)
      if (st->fields[idx[k - 1]].name_ == st->fields[idx[k]].name_)
        return dup(std::min(idx[k - 1], idx[k]), std::max(idx[k - 1], idx[k]));
  }
  record_view r;
  r.state_ = std::move(st);
  return r;
}

JITEMBED_DECL result<void> record_view::verify() const {
  if (!state_) return {};
  const std::byte* b = state_->bytes.data();
  std::size_t pos = state_->meta_size;
  auto pad_check = [&](std::size_t from, std::size_t to) -> result<void> {
    for (std::size_t k = from; k < to; ++k)
      if (b[k] != std::byte{0})
        return fail(errc::corrupt_data, "record: padding byte at offset " + std::to_string(k) + " is not zero");
    return {};
  };
  for (const auto& f : state_->fields) {
    const auto off = static_cast<std::size_t>(f.payload().data() - b);
    JITEMBED_TRY(pad_check(pos, off));
    JITEMBED_TRY(f.verify());
    pos = off + f.payload().size();
  }
  return pad_check(pos, state_->bytes.size());
}

}  // namespace jitembed::format
