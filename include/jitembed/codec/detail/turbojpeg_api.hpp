// The one place jitembed calls TurboJPEG (2.x tj* API): thread-local RAII handles, header read,
// decompress, compress, scaling factors. A 3.x (tj3*) backend replaces only this file.
#pragma once

#include <turbojpeg.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>

#include "jitembed/core/buffer.hpp"

namespace jitembed::codec::detail {

// Backend-neutral names for what the TurboJPEG enums mean; the mapping to TJ* lives below only.
enum class tj_pixel : std::uint8_t { rgb, bgr, gray };
enum class tj_samp : std::uint8_t { s444, s422, s420, gray, s440, s411, unknown };
enum class tj_colorspace : std::uint8_t { rgb, ycbcr, gray, cmyk, ycck, unknown };

struct tj_header {
  int width = 0;
  int height = 0;
  tj_samp samp = tj_samp::unknown;
  tj_colorspace colorspace = tj_colorspace::unknown;
};

struct tj_decode_flags {
  bool stop_on_warning = true;  // a libjpeg warning (corrupt data, premature end) aborts the decode
  bool limit_scans = true;      // progressive images with more than 500 scans are rejected
  bool fast_dct = false;
  bool fast_upsample = false;
};

// Outcome of one call. `warning`: libjpeg finished, with only warnings (corrupt or truncated entropy
// data, which it concealed); `fatal`: it stopped, the output is incomplete. The message is TurboJPEG's
// own, copied only when the call did not succeed.
struct tj_status {
  enum kind_t : std::uint8_t { ok, warning, fatal };
  kind_t kind = ok;
  std::string message;
  bool succeeded() const noexcept { return kind == ok; }
};

struct tj_scale {
  int num = 1;
  int denom = 1;
};

// TJSCALED: the output extent libjpeg produces for a DCT scaling factor (rounds up).
constexpr int tj_scaled(int dim, tj_scale s) noexcept {
  return static_cast<int>((static_cast<std::int64_t>(dim) * s.num + s.denom - 1) / s.denom);
}

// Largest image extent libjpeg accepts (JPEG_MAX_DIMENSION).
inline constexpr int kTjMaxDimension = 65500;

inline int to_tj(tj_pixel p) noexcept {
  switch (p) {
    case tj_pixel::rgb: return TJPF_RGB;
    case tj_pixel::bgr: return TJPF_BGR;
    case tj_pixel::gray: return TJPF_GRAY;
  }
  return TJPF_RGB;
}

inline int to_tj(tj_samp s) noexcept {
  switch (s) {
    case tj_samp::s444: return TJSAMP_444;
    case tj_samp::s422: return TJSAMP_422;
    case tj_samp::s420: return TJSAMP_420;
    case tj_samp::gray: return TJSAMP_GRAY;
    case tj_samp::s440: return TJSAMP_440;
    case tj_samp::s411: return TJSAMP_411;
    case tj_samp::unknown: break;
  }
  return -1;
}

inline tj_samp samp_from_tj(int s) noexcept {
  switch (s) {
    case TJSAMP_444: return tj_samp::s444;
    case TJSAMP_422: return tj_samp::s422;
    case TJSAMP_420: return tj_samp::s420;
    case TJSAMP_GRAY: return tj_samp::gray;
    case TJSAMP_440: return tj_samp::s440;
    case TJSAMP_411: return tj_samp::s411;
    default: return tj_samp::unknown;
  }
}

inline tj_colorspace colorspace_from_tj(int cs) noexcept {
  switch (cs) {
    case TJCS_RGB: return tj_colorspace::rgb;
    case TJCS_YCbCr: return tj_colorspace::ycbcr;
    case TJCS_GRAY: return tj_colorspace::gray;
    case TJCS_CMYK: return tj_colorspace::cmyk;
    case TJCS_YCCK: return tj_colorspace::ycck;
    default: return tj_colorspace::unknown;
  }
}

// The DCT scaling factors the library supports, largest first (2/1 ... 1/8 for libjpeg-turbo 2.x).
inline std::span<const tj_scale> tj_scaling_factors() {
  struct table {
    tj_scale factors[32];
    std::size_t count = 0;
    table() {
      int n = 0;
      const tjscalingfactor* sf = tjGetScalingFactors(&n);
      for (int i = 0; sf != nullptr && i < n && count < 32; ++i)
        if (sf[i].num > 0 && sf[i].denom > 0) factors[count++] = {sf[i].num, sf[i].denom};
      if (count == 0) factors[count++] = {1, 1};
    }
  };
  static const table t;
  return {t.factors, t.count};
}

// Owns one tjhandle. Not thread safe: use the per-thread instances from for_this_thread().
class tj_handle {
 public:
  tj_handle() noexcept = default;
  explicit tj_handle(tjhandle h) noexcept : h_(h) {}
  tj_handle(tj_handle&& o) noexcept : h_(o.h_) { o.h_ = nullptr; }
  tj_handle& operator=(tj_handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = o.h_;
      o.h_ = nullptr;
    }
    return *this;
  }
  tj_handle(const tj_handle&) = delete;
  tj_handle& operator=(const tj_handle&) = delete;
  ~tj_handle() { reset(); }

  tjhandle get() const noexcept { return h_; }
  explicit operator bool() const noexcept { return h_ != nullptr; }
  void reset() noexcept {
    if (h_) tjDestroy(h_);
    h_ = nullptr;
  }

 protected:
  // Reads the outcome of the call that just returned rc on this handle. After any failure the handle is
  // destroyed (the next for_this_thread() makes a fresh one): TurboJPEG 2.x leaves the libjpeg state
  // mid-header when tjDecompressHeader3 fails, and the next call on that handle would misparse.
  // TJERR_WARNING only says a warning happened during the call; a fatal error may have followed it.
  tj_status status_of(int rc) {
    if (rc == 0) return {};
    tj_status s;
    const bool warned = tjGetErrorCode(h_) == TJERR_WARNING;
    const char* msg = tjGetErrorStr2(h_);
    s.message = msg ? msg : "unknown TurboJPEG error";
    // libjpeg formats only the first warning; a later fatal error overwrites it. So the call ended on
    // warnings alone exactly when the message left is a libjpeg warning.
    s.kind = warned && is_libjpeg_warning(s.message) ? tj_status::warning : tj_status::fatal;
    reset();
    return s;
  }

  // The fixed text of libjpeg's JWRN_* messages (jerror.h; unchanged since libjpeg 6b).
  static bool is_libjpeg_warning(const std::string& m) {
    static constexpr const char* kWarnings[] = {
        "Corrupt JPEG data:",  // bad Huffman/arithmetic code, extraneous bytes, premature end of segment, RST, ICC
        "Premature end of JPEG file",
        "Inconsistent progression sequence",
        "Invalid SOS parameters for sequential JPEG",
        "Unknown Adobe color transform code",
        "Warning: unknown JFIF revision number",
        "Application transferred too many scanlines",
    };
    for (const char* w : kWarnings)
      if (m.rfind(w, 0) == 0) return true;
    return false;
  }

 private:
  tjhandle h_ = nullptr;
};

class tj_decompressor : public tj_handle {
 public:
  using tj_handle::tj_handle;

  // This thread's decompressor, created on first use and reused; nullptr if TurboJPEG cannot create one.
  static tj_decompressor* for_this_thread() {
    thread_local tj_decompressor d;
    if (!d) d = tj_decompressor(tjInitDecompress());
    return d ? &d : nullptr;
  }

  // Parses the markers up to the first SOF/SOS; allocates no pixel memory.
  tj_status read_header(bytes_view jpeg, tj_header& out) {
    out = {};
    if (jpeg.empty() || jpeg.size() > std::numeric_limits<unsigned long>::max())
      return {tj_status::fatal, "invalid input size"};
    int w = 0, h = 0, samp = -1, cs = -1;
    const int rc = tjDecompressHeader3(get(), reinterpret_cast<const unsigned char*>(jpeg.data()),
                                       static_cast<unsigned long>(jpeg.size()), &w, &h, &samp, &cs);
    tj_status s = status_of(rc);
    // A tables-only stream returns success without touching the outputs: keep 0x0 so callers reject it.
    out.width = w;
    out.height = h;
    out.samp = samp_from_tj(samp);
    out.colorspace = colorspace_from_tj(cs);
    return s;
  }

  // Decodes into dst: `height` rows of `width` pixels, `pitch` bytes apart. width/height must be the
  // scaled size of a supported factor (tj_scaled of the header size); the caller sized dst for them.
  tj_status decompress(bytes_view jpeg, std::uint8_t* dst, int width, int pitch, int height, tj_pixel format,
                       const tj_decode_flags& f) {
    if (jpeg.empty() || jpeg.size() > std::numeric_limits<unsigned long>::max())
      return {tj_status::fatal, "invalid input size"};
    int flags = 0;
    if (f.stop_on_warning) flags |= TJFLAG_STOPONWARNING;
    if (f.limit_scans) flags |= TJFLAG_LIMITSCANS;
    if (f.fast_dct) flags |= TJFLAG_FASTDCT;
    if (f.fast_upsample) flags |= TJFLAG_FASTUPSAMPLE;
    const int rc = tjDecompress2(get(), reinterpret_cast<const unsigned char*>(jpeg.data()),
                                 static_cast<unsigned long>(jpeg.size()), dst, width, pitch, height, to_tj(format),
                                 flags);
    return status_of(rc);
  }
};

class tj_compressor : public tj_handle {
 public:
  using tj_handle::tj_handle;

  static tj_compressor* for_this_thread() {
    thread_local tj_compressor c;
    if (!c) c = tj_compressor(tjInitCompress());
    return c ? &c : nullptr;
  }

  // Worst-case JPEG size for an image (tjBufSize); 0 for invalid arguments.
  static std::size_t buf_size(int width, int height, tj_samp samp) {
    const unsigned long n = tjBufSize(width, height, to_tj(samp));
    if (n == static_cast<unsigned long>(-1)) return 0;
    return static_cast<std::size_t>(n);
  }

  // Compresses into `out`, which must hold at least buf_size(width, height, samp) bytes (TurboJPEG
  // writes up to that bound without checking, TJFLAG_NOREALLOC). Returns the bytes written in *written.
  tj_status compress(const std::uint8_t* src, int width, int pitch, int height, tj_pixel format, mutable_bytes out,
                     tj_samp samp, int quality, std::size_t* written) {
    *written = 0;
    const std::size_t need = buf_size(width, height, samp);
    if (need == 0) return {tj_status::fatal, "invalid image size"};
    if (out.size() < need) return {tj_status::fatal, "output buffer below tjBufSize"};
    auto* buf = reinterpret_cast<unsigned char*>(out.data());
    unsigned long size = static_cast<unsigned long>(out.size());
    const int rc = tjCompress2(get(), src, width, pitch, height, to_tj(format), &buf, &size, to_tj(samp), quality,
                               TJFLAG_NOREALLOC);
    tj_status s = status_of(rc);
    if (s.succeeded()) *written = static_cast<std::size_t>(size);
    return s;
  }
};

}  // namespace jitembed::codec::detail
