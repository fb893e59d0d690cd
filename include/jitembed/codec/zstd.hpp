// zstd codec: plain zstd frames (optionally byte-shuffled, optionally with a trained dictionary), reusing
// one compression and one decompression context per thread, with bounded decoding of untrusted frames.
#pragma once

#include <zdict.h>
#include <zstd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/codec/codec.hpp"
#include "jitembed/codec/detail/zstd_context.hpp"
#include "jitembed/codec/detail/zstd_dictionary.hpp"
#include "jitembed/codec/shuffle.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::codec {

// A zstd dictionary: an immutable, cheap-to-copy handle (docs/api.md rule 2.4); copies refer to the same
// dictionary, which is freed with the last copy, and may be used from any thread. A default-constructed
// handle is empty: no dictionary.
class zstd_dictionary {
 public:
  zstd_dictionary() = default;

  // Trains a dictionary of at most capacity_bytes from samples (ZDICT_trainFromBuffer). zstd needs enough
  // samples (dozens at least, ~100x the capacity in total works best); too few fail with encode_failed.
  // Errors: invalid_argument (no samples, capacity < 256), encode_failed (training failed).
  static result<zstd_dictionary> create(std::span<const bytes_view> samples, std::size_t capacity_bytes) {
    if (samples.empty()) return fail(errc::invalid_argument, "zstd dictionary: no samples");
    if (capacity_bytes < 256)
      return fail(errc::invalid_argument, "zstd dictionary: capacity " + std::to_string(capacity_bytes) + " < 256 bytes");
    if (samples.size() > 0xffffffffu) return fail(errc::invalid_argument, "zstd dictionary: too many samples");
    std::size_t total = 0;
    for (auto s : samples) total += s.size();
    byte_buffer all;
    all.reserve(total);
    std::vector<std::size_t> sizes;
    sizes.reserve(samples.size());
    for (auto s : samples) {
      append(all, s);
      sizes.push_back(s.size());
    }
    byte_buffer dict(capacity_bytes);
    const std::size_t n = ZDICT_trainFromBuffer(dict.data(), dict.size(), all.data(), sizes.data(),
                                                static_cast<unsigned>(sizes.size()));
    if (ZDICT_isError(n))
      return fail(errc::encode_failed, std::string("zstd dictionary: training failed: ") + ZDICT_getErrorName(n) +
                                           " (" + std::to_string(samples.size()) + " samples, " +
                                           std::to_string(total) + " bytes)");
    dict.resize(n);
    return parse(dict);
  }

  // A dictionary from its bytes (a trained zstd dictionary, or raw content used as a prefix, which has
  // id 0); the bytes are copied. Errors: invalid_argument (empty), decode_failed (zstd refuses them).
  static result<zstd_dictionary> parse(bytes_view dict_bytes) {
    if (dict_bytes.empty()) return fail(errc::invalid_argument, "zstd dictionary: empty");
    std::unique_ptr<ZSTD_DDict, detail::ddict_deleter> dd(ZSTD_createDDict(dict_bytes.data(), dict_bytes.size()));
    if (!dd) return fail(errc::decode_failed, "zstd dictionary: invalid dictionary (" + std::to_string(dict_bytes.size()) + " bytes)");
    byte_buffer copy(dict_bytes.begin(), dict_bytes.end());
    const unsigned id = ZSTD_getDictID_fromDDict(dd.get());
    zstd_dictionary d;
    d.state_ = std::make_shared<const detail::zstd_dictionary_state>(std::move(copy), std::move(dd), id);
    return d;
  }

  explicit operator bool() const noexcept { return state_ != nullptr; }
  // The accessors below need a non-empty handle.
  bytes_view bytes() const noexcept { return state_->bytes(); }
  unsigned id() const noexcept { return state_->id(); }  // the zstd dictionary id (0 for raw content)
  const ZSTD_DDict* ddict() const noexcept { return state_->ddict(); }
  // The digested compression dictionary for `level`, built once per level (thread-safe).
  result<const ZSTD_CDict*> cdict(int level) const { return state_->cdict(level); }

  // Copies of one dictionary compare equal.
  friend bool operator==(const zstd_dictionary& a, const zstd_dictionary& b) noexcept { return a.state_ == b.state_; }

 private:
  std::shared_ptr<const detail::zstd_dictionary_state> state_;
};

struct zstd_options {
  int level = 3;                                      // zstd level (negative = fast modes, up to ZSTD_maxCLevel())
  std::size_t shuffle = 0;                            // 0 = none, else element size 2, 4 or 8 (1 = none)
  zstd_dictionary dictionary;                         // empty: none; the decoder must use the same one
  bool checksum = false;                              // zstd's own 32-bit content checksum in the frame
};

namespace detail {

// zstd accepts windowLogMax only within [10, 31] (64-bit); a smaller limit means its minimum, 1 KiB.
inline unsigned clamp_window_log(std::uint32_t wlog) noexcept {
  const ZSTD_bounds b = ZSTD_dParam_getBounds(ZSTD_d_windowLogMax);
  if (ZSTD_isError(b.error)) return wlog;
  return static_cast<unsigned>(std::clamp<long long>(wlog, b.lowerBound, b.upperBound));
}

// Streams every frame of `in` (concatenated frames and skippable frames are accepted, as by
// ZSTD_decompress) into `ob`. When ob is full and the decoder still has output, `grow(ob)` either enlarges
// ob (returns nullopt) or returns the error to report. Returns the bytes written to ob.
// Every frame's window is checked against 2^wlog from its header before it is decoded (check_frame_window).
template <class Grow>
result<std::size_t> stream_decompress(ZSTD_DCtx* dctx, bytes_view in, ZSTD_outBuffer& ob, unsigned wlog, Grow&& grow) {
  ZSTD_inBuffer ib{in.data(), in.size(), 0};
  std::byte probe{};
  JITEMBED_TRY(check_frame_window(in, 0, wlog));
  for (;;) {
    // With ob full, decode into a one-byte probe: that tells "more output is coming" from "frame ends here"
    // without ever writing past the caller's buffer.
    ZSTD_outBuffer pb{&probe, 1, 0};
    ZSTD_outBuffer& target = ob.pos == ob.size ? pb : ob;
    const std::size_t in_before = ib.pos;
    const std::size_t out_before = target.pos;
    const std::size_t r = ZSTD_decompressStream(dctx, &target, &ib);
    if (ZSTD_isError(r)) return zstd_decode_error(r, ib.pos, wlog);
    if (pb.pos != 0) {
      if (std::optional<error_info> err = grow(ob)) return std::move(*err);
      if (ob.pos >= ob.size) return fail(errc::internal, "zstd: output did not grow");
      static_cast<std::byte*>(ob.dst)[ob.pos++] = probe;
    }
    if (r == 0) {  // a frame ended exactly here
      if (ib.pos == ib.size) return ob.pos;
      JITEMBED_TRY(check_frame_window(in, ib.pos, wlog));
      continue;  // another frame follows
    }
    if (ib.pos == in_before && target.pos == out_before) {
      if (ib.pos == ib.size)
        return fail(errc::truncated, "zstd: frame truncated: input ends at offset " + std::to_string(ib.pos) +
                                         " with the frame incomplete");
      return fail(errc::decode_failed, "zstd: decoder made no progress at input offset " + std::to_string(ib.pos));
    }
  }
}

// The first frame's declared content size, if the header declares one (a hint only: it may lie).
inline std::optional<std::uint64_t> declared_size(bytes_view in) noexcept {
  const unsigned long long s = ZSTD_getFrameContentSize(in.data(), in.size());
  if (s == ZSTD_CONTENTSIZE_UNKNOWN || s == ZSTD_CONTENTSIZE_ERROR) return std::nullopt;
  return static_cast<std::uint64_t>(s);
}

inline result<void> check_zstd(std::size_t code, const char* what, errc on_error) {
  if (ZSTD_isError(code)) return fail(on_error, std::string("zstd: ") + what + ": " + ZSTD_getErrorName(code));
  return {};
}

}  // namespace detail

// Encodes tensors as one zstd frame of their bytes (after an optional byte shuffle); models codec::codec.
// Output without shuffle is a plain zstd frame any zstd decoder reads. Decoding accepts concatenated frames.
class zstd_codec {
 public:
  static constexpr codec_id id = codec_id::zstd;
  zstd_options options;

  zstd_codec() = default;
  explicit zstd_codec(zstd_options o) : options(std::move(o)) {}

  // ZSTD_compressBound(n): the largest frame compress() can write for n input bytes (0 if n is too large).
  static std::size_t compress_bound(std::size_t n) noexcept {
    const std::size_t b = ZSTD_compressBound(n);
    return ZSTD_isError(b) ? 0 : b;
  }

  result<std::size_t> max_encoded_size(const tensor_view& v) const {
    JITEMBED_TRY(check_view(v));
    const std::size_t b = compress_bound(v.nbytes());
    if (b == 0 && v.nbytes() != 0) return fail(errc::limit_exceeded, "zstd: " + std::to_string(v.nbytes()) + " bytes exceed zstd's input size limit");
    return b;
  }

  // Encodes the bytes of a contiguous CPU view (any dtype/shape; the format records those).
  result<std::size_t> encode(const tensor_view& v, mutable_bytes out) const {
    JITEMBED_TRY(check_view(v));
    return compress(v.bytes(), out);
  }

  // Decodes into a new 1-D u8 tensor of the decoded bytes.
  result<tensor> decode(bytes_view in, const decode_limits& limits) const { return decompress(in, limits); }

  // Compresses `in` into `out`; errc::buffer_too_small if the frame does not fit (compress_bound always fits).
  result<std::size_t> compress(bytes_view in, mutable_bytes out) const {
    JITEMBED_TRY(check_shuffle());
    ZSTD_CCtx* cctx = detail::thread_cctx();
    if (!cctx) return fail(errc::encode_failed, "zstd: cannot create a compression context");
    // Drops the dictionary reference and parameters when done, so the thread's context never points at a
    // dictionary that may be freed later.
    struct reset_guard {
      ZSTD_CCtx* c;
      ~reset_guard() { ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters); }
    } guard{cctx};
    ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
    JITEMBED_TRY(detail::check_zstd(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, options.level),
                                    "compression level", errc::invalid_argument));
    JITEMBED_TRY(detail::check_zstd(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, options.checksum ? 1 : 0),
                                    "checksum flag", errc::invalid_argument));
    if (options.dictionary) {
      JITEMBED_ASSIGN_OR_RETURN(auto cd, options.dictionary.cdict(options.level));
      JITEMBED_TRY(detail::check_zstd(ZSTD_CCtx_refCDict(cctx, cd), "dictionary", errc::encode_failed));
    }
    bytes_view src = in;
    std::optional<detail::scratch_lease> scratch;
    if (shuffles() && !in.empty()) {
      scratch.emplace(in.size());
      detail::shuffle_dispatch<true>(in, scratch->bytes(), options.shuffle);
      src = scratch->bytes();
    }
    if (scratch && src.size() >= kPlaneBlocksMin) return compress_planes(cctx, src, out);
    const std::size_t n = ZSTD_compress2(cctx, out.data(), out.size(), src.data(), src.size());
    if (ZSTD_isError(n)) {
      if (ZSTD_getErrorCode(n) == ZSTD_error_dstSize_tooSmall) return too_small(in.size(), out.size());
      return fail(errc::encode_failed, std::string("zstd: ") + ZSTD_getErrorName(n));
    }
    return n;
  }

  // Decompresses into exactly out.size() bytes: errc::buffer_too_small if more would come out,
  // errc::corrupt_data if fewer do, errc::limit_exceeded if out.size() > limits.max_decoded_bytes or a
  // frame's window > 2^max_zstd_window_log (checked first for each frame, as docs/format.md orders it).
  result<std::size_t> decompress_into(bytes_view in, mutable_bytes out, const decode_limits& limits) const {
    JITEMBED_TRY(check_shuffle());
    if (out.size() > limits.max_decoded_bytes)
      return fail(errc::limit_exceeded, "zstd: output size " + std::to_string(out.size()) + " > max_decoded_bytes " +
                                            std::to_string(limits.max_decoded_bytes));
    const unsigned wlog = detail::clamp_window_log(limits.max_zstd_window_log);
    JITEMBED_TRY(detail::check_frame_window(in, 0, wlog));
    if (auto declared = detail::declared_size(in); declared && *declared > out.size())
      return fail(errc::buffer_too_small, "zstd: frame declares " + std::to_string(*declared) +
                                              " content bytes > output buffer of " + std::to_string(out.size()));
    std::optional<detail::scratch_lease> scratch;
    mutable_bytes target = out;
    if (shuffles() && !out.empty()) {
      scratch.emplace(out.size());
      target = scratch->bytes();
    }
    JITEMBED_ASSIGN_OR_RETURN(auto dctx, prepare_dctx(wlog));
    ZSTD_outBuffer ob{target.data(), target.size(), 0};
    auto n = detail::stream_decompress(dctx, in, ob, wlog, [&](ZSTD_outBuffer&) -> std::optional<error_info> {
      return fail(errc::buffer_too_small,
                  "zstd: decoded data exceeds the output buffer of " + std::to_string(out.size()) + " bytes");
    });
    release_dctx(dctx);
    JITEMBED_ASSIGN_OR_RETURN(const std::size_t got, std::move(n));
    if (got != out.size())
      return fail(errc::corrupt_data, "zstd: decoded " + std::to_string(got) + " bytes, expected " + std::to_string(out.size()));
    if (scratch) detail::shuffle_dispatch<false>(target, out, options.shuffle);
    return got;
  }

  // Decompresses a payload of unknown size into a new 1-D u8 tensor. The output grows geometrically and
  // stops with errc::limit_exceeded at min(max_decoded_bytes, max_elements); a declared content size is
  // only a hint for the first allocation, never trusted beyond a small multiple of the input size.
  result<tensor> decompress(bytes_view in, const decode_limits& limits) const {
    JITEMBED_TRY(check_shuffle());
    const std::uint64_t cap64 = std::min<std::uint64_t>(limits.max_decoded_bytes, limits.max_elements);
    const std::size_t cap = static_cast<std::size_t>(std::min<std::uint64_t>(cap64, SIZE_MAX / 2));
    const auto declared = detail::declared_size(in);
    if (declared && *declared > cap)
      return fail(errc::limit_exceeded, "zstd: frame declares " + std::to_string(*declared) +
                                            " content bytes > limit " + std::to_string(cap) +
                                            " (max_decoded_bytes/max_elements)");
    constexpr std::size_t kMinChunk = std::size_t{64} << 10;
    const std::size_t trusted = std::max<std::size_t>(std::size_t{1} << 20, in.size() * 32);
    std::size_t initial = declared ? std::min<std::size_t>(static_cast<std::size_t>(*declared), trusted)
                                   : std::max<std::size_t>(kMinChunk, in.size() * 4);
    initial = std::min(initial, cap);

    std::shared_ptr<std::byte> storage = allocate_shared_aligned(initial);
    ZSTD_outBuffer ob{storage.get(), initial, 0};
    const unsigned wlog = detail::clamp_window_log(limits.max_zstd_window_log);
    JITEMBED_ASSIGN_OR_RETURN(auto dctx, prepare_dctx(wlog));
    auto n = detail::stream_decompress(dctx, in, ob, wlog, [&](ZSTD_outBuffer& o) -> std::optional<error_info> {
      if (o.size >= cap)
        return fail(errc::limit_exceeded, "zstd: decoded data exceeds limit " + std::to_string(cap) +
                                              " bytes (max_decoded_bytes/max_elements)");
      const std::size_t grown = std::min(cap, std::max(kMinChunk, o.size > cap / 2 ? cap : o.size * 2));
      std::shared_ptr<std::byte> bigger = allocate_shared_aligned(grown);
      if (o.pos) std::memcpy(bigger.get(), storage.get(), o.pos);
      storage = std::move(bigger);
      o.dst = storage.get();
      o.size = grown;
      return std::nullopt;
    });
    release_dctx(dctx);
    JITEMBED_ASSIGN_OR_RETURN(const std::size_t got, std::move(n));
    const auto len = static_cast<std::int64_t>(got);
    if (shuffles() && got) {
      tensor t = tensor::empty({len}, dtype::u8);
      detail::shuffle_dispatch<false>(bytes_view(storage.get(), got), t.mutable_bytes_span(), options.shuffle);
      return t;
    }
    std::byte* p = storage.get();
    return tensor::wrap(std::move(storage), tensor_view(p, dtype::u8, shape{len}));
  }

 private:
  // Shuffled inputs at least this large end a zstd block at every byte-plane boundary (see compress_planes).
  static constexpr std::size_t kPlaneBlocksMin = 4096;

  bool shuffles() const noexcept { return options.shuffle > 1; }

  static error_info too_small(std::size_t in_size, std::size_t out_size) {
    return fail(errc::buffer_too_small, "zstd: output buffer of " + std::to_string(out_size) +
                                            " bytes too small for the frame of " + std::to_string(in_size) +
                                            " input bytes (bound " + std::to_string(compress_bound(in_size)) + ")");
  }

  // zstd codes all literals of a block with one Huffman table. A block that straddles two byte planes (say
  // the low-entropy exponent bytes and the near-random mantissa bytes of bf16) mixes their statistics and
  // loses most of what the shuffle gained, so each plane is flushed into blocks of its own. The output is
  // still one ordinary frame with its content size.
  result<std::size_t> compress_planes(ZSTD_CCtx* cctx, bytes_view src, mutable_bytes out) const {
    JITEMBED_TRY(detail::check_zstd(ZSTD_CCtx_setPledgedSrcSize(cctx, src.size()), "pledged size", errc::encode_failed));
    const std::size_t es = options.shuffle;
    const std::size_t plane = src.size() / es;
    ZSTD_outBuffer ob{out.data(), out.size(), 0};
    std::size_t pos = 0;
    for (std::size_t b = 0; b < es; ++b) {
      const bool last = b + 1 == es;
      const std::size_t end = last ? src.size() : pos + plane;  // the last plane carries the tail
      ZSTD_inBuffer ib{src.data() + pos, end - pos, 0};
      for (;;) {
        const std::size_t r = ZSTD_compressStream2(cctx, &ob, &ib, last ? ZSTD_e_end : ZSTD_e_flush);
        if (ZSTD_isError(r)) {
          if (ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall) return too_small(src.size(), out.size());
          return fail(errc::encode_failed, std::string("zstd: ") + ZSTD_getErrorName(r));
        }
        if (r == 0 && ib.pos == ib.size) break;
        if (ob.pos == ob.size) return too_small(src.size(), out.size());
      }
      pos = end;
    }
    return ob.pos;
  }

  result<void> check_shuffle() const {
    const auto s = options.shuffle;
    if (s != 0 && s != 1 && s != 2 && s != 4 && s != 8)
      return fail(errc::invalid_argument, "zstd: shuffle element size " + std::to_string(s) + " not in {0,1,2,4,8}");
    return {};
  }

  static result<void> check_view(const tensor_view& v) {
    if (!v.device().is_cpu()) return fail(errc::invalid_argument, "zstd: tensor is not on the CPU");
    if (!v.is_contiguous()) return fail(errc::invalid_argument, "zstd: tensor is not contiguous");
    if (!is_valid(v.dtype())) return fail(errc::dtype_mismatch, "zstd: invalid dtype");
    return {};
  }

  result<ZSTD_DCtx*> prepare_dctx(unsigned wlog) const {
    ZSTD_DCtx* d = detail::thread_dctx();
    if (!d) return fail(errc::decode_failed, "zstd: cannot create a decompression context");
    ZSTD_DCtx_reset(d, ZSTD_reset_session_and_parameters);
    JITEMBED_TRY(detail::check_zstd(ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, static_cast<int>(wlog)),
                                    "window log limit", errc::invalid_argument));
    if (options.dictionary)
      JITEMBED_TRY(detail::check_zstd(ZSTD_DCtx_refDDict(d, options.dictionary.ddict()), "dictionary", errc::decode_failed));
    return d;
  }

  // Drops the dictionary reference so the thread's context never points at a freed dictionary.
  static void release_dctx(ZSTD_DCtx* d) noexcept { ZSTD_DCtx_reset(d, ZSTD_reset_session_and_parameters); }
};

static_assert(codec<zstd_codec>);

}  // namespace jitembed::codec
