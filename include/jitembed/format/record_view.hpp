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
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/config.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"
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
  jitembed::keep_alive keep_alive;
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
                                   jitembed::keep_alive keep_alive = {});

  std::uint16_t major() const noexcept { return state_ ? state_->major : 0; }
  std::uint16_t minor() const noexcept { return state_ ? state_->minor : 0; }
  std::uint32_t flags() const noexcept { return state_ ? state_->flags : 0; }
  bytes_view bytes() const noexcept { return state_ ? state_->bytes : bytes_view{}; }
  const jitembed::keep_alive& keep_alive() const noexcept {
    static const jitembed::keep_alive none;
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

// A template, so here for every codec a program brings.
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

}  // namespace jitembed::format

// The other member functions, defined out of line: here header-only, in format/src.hpp with
// JITEMBED_SEPARATE_COMPILATION (core/config.hpp), so a program's other TUs parse neither zstd nor the parser.
#if defined(JITEMBED_HEADER_ONLY)
#include "jitembed/format/detail/record_view_impl.hpp"
#endif
