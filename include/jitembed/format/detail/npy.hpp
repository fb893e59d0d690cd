// Minimal .npy header parser (NumPy format 1.0 / 2.0 / 3.0): dtype, C order, shape, data span.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/dtype.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/format/detail/wire.hpp"

namespace jitembed::format::detail {

struct npy_array {
  jitembed::dtype dtype = jitembed::dtype::u8;
  jitembed::shape shape{};
  bytes_view data;
};

inline std::optional<jitembed::dtype> npy_dtype(std::string_view d) {
  if (d.size() < 2) return std::nullopt;
  const char order = d[0];
  const std::string_view t = d.substr(1);
  const bool one_byte = t == "u1" || t == "i1" || t == "b1";
  if (!(order == '<' || order == '=' || (order == '|' && one_byte))) return std::nullopt;  // big-endian: not supported
  if (t == "u1") return jitembed::dtype::u8;
  if (t == "i1") return jitembed::dtype::i8;
  if (t == "b1") return jitembed::dtype::boolean;
  if (t == "i2") return jitembed::dtype::i16;
  if (t == "i4") return jitembed::dtype::i32;
  if (t == "i8") return jitembed::dtype::i64;
  if (t == "f2") return jitembed::dtype::f16;
  if (t == "f4") return jitembed::dtype::f32;
  if (t == "f8") return jitembed::dtype::f64;
  return std::nullopt;
}

// The value text after "'key':" in the header dict, or empty.
inline std::string_view npy_value(std::string_view h, std::string_view key) {
  const std::string k1 = "'" + std::string(key) + "'";
  auto p = h.find(k1);
  if (p == std::string_view::npos) return {};
  p = h.find(':', p + k1.size());
  if (p == std::string_view::npos) return {};
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  return h.substr(p);
}

// Parses `file`. Returns nullopt for a well-formed header this library cannot represent (big-endian or
// non-numeric dtype, Fortran order, rank > 8), an error for a malformed one or a data size mismatch.
inline result<std::optional<npy_array>> parse_npy(bytes_view file) {
  const auto* p = reinterpret_cast<const unsigned char*>(file.data());
  if (file.size() < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) return fail(errc::bad_magic, "npy: no \\x93NUMPY magic");
  const unsigned major = p[6];
  std::size_t header_len, start;
  if (major == 1) {
    header_len = load_le<std::uint16_t>(file.data() + 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) return fail(errc::truncated, "npy: header length cut off");
    header_len = load_le<std::uint32_t>(file.data() + 8);
    start = 12;
  } else {
    return fail(errc::unsupported_version, "npy: format version " + std::to_string(major));
  }
  if (header_len > file.size() - start)
    return fail(errc::truncated, "npy: header of " + std::to_string(header_len) + " bytes runs past the file");
  const std::string_view h(reinterpret_cast<const char*>(p + start), header_len);
  if (h.empty() || h.front() != '{') return fail(errc::corrupt_data, "npy: header is not a dict");
  npy_array a;
  auto descr = npy_value(h, "descr");
  if (descr.size() < 2 || descr.front() != '\'') return fail(errc::corrupt_data, "npy: no 'descr' string");
  const auto end = descr.find('\'', 1);
  if (end == std::string_view::npos) return fail(errc::corrupt_data, "npy: unterminated 'descr'");
  const auto dt = npy_dtype(descr.substr(1, end - 1));
  const auto fortran = npy_value(h, "fortran_order");
  if (fortran.substr(0, 5) != "False" && fortran.substr(0, 4) != "True")
    return fail(errc::corrupt_data, "npy: no 'fortran_order' boolean");
  auto shp = npy_value(h, "shape");
  if (shp.empty() || shp.front() != '(') return fail(errc::corrupt_data, "npy: no 'shape' tuple");
  const auto close = shp.find(')');
  if (close == std::string_view::npos) return fail(errc::corrupt_data, "npy: unterminated 'shape'");
  std::string_view dims = shp.substr(1, close - 1);
  bool representable = dt.has_value() && fortran.substr(0, 5) == "False";
  std::size_t rank = 0;
  std::int64_t ext[kMaxDims] = {};
  while (!dims.empty()) {
    while (!dims.empty() && (dims.front() == ' ' || dims.front() == ',')) dims.remove_prefix(1);
    if (dims.empty()) break;
    std::uint64_t v = 0;
    std::size_t digits = 0;
    while (!dims.empty() && dims.front() >= '0' && dims.front() <= '9') {
      if (v > (std::uint64_t{1} << 62) / 10) return fail(errc::shape_overflow, "npy: extent overflows");
      v = v * 10 + static_cast<std::uint64_t>(dims.front() - '0');
      dims.remove_prefix(1);
      ++digits;
    }
    if (digits == 0) return fail(errc::corrupt_data, "npy: bad character in 'shape'");
    if (rank == kMaxDims) {
      representable = false;
      ++rank;
      continue;
    }
    if (rank < kMaxDims) ext[rank] = static_cast<std::int64_t>(v);
    ++rank;
  }
  if (!representable) return std::optional<npy_array>{};
  a.dtype = *dt;
  a.shape = jitembed::shape(std::span<const std::int64_t>(ext, rank));
  auto nbytes = checked_nbytes(a.shape.span(), a.dtype);
  if (!nbytes) return nbytes.error();
  const std::size_t data_at = start + header_len;
  if (*nbytes != file.size() - data_at)
    return fail(errc::corrupt_data, "npy: " + std::string(to_string(a.dtype)) + a.shape.to_string() + " needs " +
                                        std::to_string(*nbytes) + " bytes, file has " + std::to_string(file.size() - data_at));
  a.data = file.subspan(data_at);
  return std::optional<npy_array>(a);
}

}  // namespace jitembed::format::detail
