// record_view: zero-copy reader of one sample record. parse() checks the header, field table and names
// in time independent of payload size; payload checksums are checked lazily (on decode) or by verify().
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/codec/codec.hpp"
#include "jitembed/codec/text.hpp"
#include "jitembed/codec/zstd.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/format/detail/copy_hash.hpp"
#include "jitembed/format/detail/validate.hpp"
#include "jitembed/format/detail/wire.hpp"
#include "jitembed/format/field.hpp"

namespace jitembed::format {

class record_view;

namespace detail {
struct record_state;
}

// One field of a parsed record. Valid while its record_view (or a copy of it) lives; payload() points
// into the record's buffer.
class field_view {
 public:
  field_view() = default;
  field_view(const field_view& o) noexcept { *this = o; }
  field_view& operator=(const field_view& o) noexcept {
    rec_ = o.rec_;
    name_ = o.name_;
    payload_ = o.payload_;
    shape_ = o.shape_;
    decoded_size_ = o.decoded_size_;
    checksum_ = o.checksum_;
    index_ = o.index_;
    kind_ = o.kind_, codec_ = o.codec_, dtype_ = o.dtype_, shuffle_ = o.shuffle_, flags_ = o.flags_;
    verified_.store(o.verified_.load(std::memory_order_acquire), std::memory_order_relaxed);
    return *this;
  }

  std::string_view name() const noexcept { return name_; }
  field_kind kind() const noexcept { return static_cast<field_kind>(kind_); }
  codec::codec_id codec() const noexcept { return static_cast<codec::codec_id>(codec_); }
  jitembed::dtype dtype() const noexcept { return static_cast<jitembed::dtype>(dtype_); }
  const jitembed::shape& shape() const noexcept { return shape_; }  // rank 0 for non-tensor kinds
  std::uint8_t shuffle() const noexcept { return shuffle_; }
  std::uint8_t flags() const noexcept { return flags_; }
  std::uint64_t decoded_size() const noexcept { return decoded_size_; }
  std::uint64_t checksum() const noexcept { return checksum_; }  // stored XXH3-64 of payload()
  std::size_t index() const noexcept { return index_; }
  // Kind, codec and dtype are all known to this reader (false only for fields of a newer minor).
  bool is_known() const noexcept {
    return detail::kind_known(kind_) && detail::codec_known(codec_) && detail::dtype_known(dtype_);
  }

  // The stored bytes, pointing into the record's buffer; not checksummed (see checked_payload()).
  bytes_view payload() const noexcept { return payload_; }
  result<bytes_view> checked_payload() const;
  // Hashes the payload against its stored checksum (once per record_view).
  result<void> verify() const;

  // Decodes raw / zstd / text fields. A raw field is zero-copy: the tensor points into the record and
  // shares its keep_alive (copied only if the payload is not aligned to the element size). zstd and text
  // decode into a new 64-byte aligned tensor of exactly decoded_size() bytes. Tensor fields come back
  // with their dtype and shape, other kinds as 1-D u8.
  result<tensor> decode(const decode_limits& limits = {}, checksum_policy policy = checksum_policy::verify) const;

  // Decodes with any codec whose id matches the field's (image / video fields, or anything). If the
  // field declares a decoded shape, the result must match it.
  template <codec::codec C>
  result<tensor> decode_with(const C& c, const decode_limits& limits = {},
                             checksum_policy policy = checksum_policy::verify) const;

  // The UTF-8 text of a text / json / bytes field (validated).
  result<std::string> text(const decode_limits& limits = {}, checksum_policy policy = checksum_policy::verify) const;

 private:
  friend class record_view;

  error_info err(errc code, const std::string& msg) const {
    return fail(code, "record: field " + std::to_string(index_) + " '" + std::string(name_) + "': " + msg);
  }
  result<void> check_limits(const decode_limits& lim) const;
  result<void> maybe_verify(checksum_policy policy) const {
    if (policy == checksum_policy::skip) return {};
    return verify();
  }
  bool has_shape() const noexcept {
    return detail::dtype_known(dtype_) && (kind_ == static_cast<std::uint8_t>(field_kind::tensor) || shape_.size() > 0);
  }

  const detail::record_state* rec_ = nullptr;
  std::string_view name_;
  bytes_view payload_;
  jitembed::shape shape_{};
  std::uint64_t decoded_size_ = 0;
  std::uint64_t checksum_ = 0;
  std::uint32_t index_ = 0;
  std::uint8_t kind_ = 0, codec_ = 0, dtype_ = 0, shuffle_ = 0, flags_ = 0;
  mutable std::atomic<bool> verified_{false};  // payload checksum already checked
};

namespace detail {
struct record_state {
  bytes_view bytes;
  std::shared_ptr<const void> keep_alive;
  std::vector<field_view> fields;
  std::uint16_t major = 0, minor = 0;
  std::uint32_t flags = 0;
  std::uint32_t meta_size = 0;
};
}  // namespace detail

// A parsed record. Cheap to copy (shared state). Holds keep_alive, so the buffer stays alive while any
// copy of the record_view, or any zero-copy tensor decoded from it, lives.
class record_view {
 public:
  record_view() = default;

  // Checks magic, version, sizes, the header checksum, every table entry (kinds, codecs, dtypes, shapes,
  // names: UTF-8, unique, zero-padded; payload offsets: 64-byte aligned, in order, non-overlapping, inside
  // the record) against `limits`, and in a record of its own minor that reserved and flag bytes are zero,
  // before allocating anything that depends on them (docs/format.md, "Order of checks: record").
  // `record` must be exactly the record.
  static result<record_view> parse(bytes_view record, const decode_limits& limits = {},
                                   std::shared_ptr<const void> keep_alive = {});

  std::uint16_t major() const noexcept { return state_ ? state_->major : 0; }
  std::uint16_t minor() const noexcept { return state_ ? state_->minor : 0; }
  std::uint32_t flags() const noexcept { return state_ ? state_->flags : 0; }
  bytes_view bytes() const noexcept { return state_ ? state_->bytes : bytes_view{}; }
  const std::shared_ptr<const void>& keep_alive() const noexcept {
    static const std::shared_ptr<const void> none;
    return state_ ? state_->keep_alive : none;
  }

  std::size_t size() const noexcept { return state_ ? state_->fields.size() : 0; }
  bool empty() const noexcept { return size() == 0; }
  std::span<const field_view> fields() const noexcept {
    return state_ ? std::span<const field_view>(state_->fields) : std::span<const field_view>{};
  }
  const field_view& field(std::size_t i) const { return fields()[i]; }
  const field_view& operator[](std::size_t i) const { return fields()[i]; }
  const field_view* begin() const noexcept { return fields().data(); }
  const field_view* end() const noexcept { return fields().data() + size(); }

  // The field named `name`, or nullptr.
  const field_view* find(std::string_view name) const noexcept {
    for (const auto& f : fields())
      if (f.name() == name) return &f;
    return nullptr;
  }
  // The field named `name`, or errc::not_found.
  result<const field_view*> get(std::string_view name) const {
    if (const auto* f = find(name)) return f;
    return fail(errc::not_found, "record: no field named '" + std::string(name) + "'");
  }

  // Checks every payload checksum and that all padding bytes are zero.
  result<void> verify() const;

 private:
  std::shared_ptr<const detail::record_state> state_;
};

// ---- field_view ---------------------------------------------------------------------------------

inline result<void> field_view::verify() const {
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

inline result<bytes_view> field_view::checked_payload() const {
  JITEMBED_TRY(verify());
  return payload_;
}

inline result<void> field_view::check_limits(const decode_limits& lim) const {
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

inline result<tensor> field_view::decode(const decode_limits& lim, checksum_policy policy) const {
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

template <codec::codec C>
result<tensor> field_view::decode_with(const C& c, const decode_limits& lim, checksum_policy policy) const {
  if (static_cast<std::uint8_t>(C::id) != codec_)
    return err(errc::unsupported_codec, "stored codec byte " + std::to_string(codec_) + " (" +
                                            std::string(codec::to_string(codec())) + "), decode_with got " +
                                            std::string(codec::to_string(C::id)));
  JITEMBED_TRY(check_limits(lim));
  JITEMBED_TRY(maybe_verify(policy));
  auto t = c.decode(payload_, lim);
  if (!t) return err(t.code(), t.error().message);
  if (!has_shape()) return t;
  if (t->dtype() == dtype() && t->shape() == shape_) return t;
  if (t->dtype() == jitembed::dtype::u8 && t->rank() == 1 && t->nbytes() == decoded_size_)
    return t->reinterpret(dtype(), shape_);
  return err(errc::corrupt_data, "decoded " + std::string(jitembed::to_string(t->dtype())) + t->shape().to_string() +
                                     " != declared " + std::string(jitembed::to_string(dtype())) + shape_.to_string());
}

inline result<std::string> field_view::text(const decode_limits& lim, checksum_policy policy) const {
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

inline result<record_view> record_view::parse(bytes_view rec, const decode_limits& lim,
                                              std::shared_ptr<const void> keep_alive) {
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

inline result<void> record_view::verify() const {
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
