// Shard layout (torch.chunk's uneven rule) and copies of a slab along one dimension of a CPU tensor.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/parallel/copy2d.hpp"

namespace jitembed::parallel {

// torch.chunk: every part has ceil(n / parts) elements except the tail, which may be smaller or empty
// (n = 5, parts = 4 → 2 2 1 0). PyTorch DTensor uses the same rule for uneven shards.
inline std::vector<std::int64_t> chunk_sizes(std::int64_t n, int parts) {
  if (parts <= 0) throw error(errc::invalid_argument, "chunk_sizes: " + std::to_string(parts) + " parts");
  if (n < 0) throw error(errc::invalid_argument, "chunk_sizes: negative size " + std::to_string(n));
  const std::int64_t chunk = (n + parts - 1) / parts;
  std::vector<std::int64_t> out(static_cast<std::size_t>(parts));
  for (int i = 0; i < parts; ++i) out[static_cast<std::size_t>(i)] = std::clamp<std::int64_t>(n - chunk * i, 0, chunk);
  return out;
}

inline std::int64_t chunk_offset(std::int64_t n, int parts, int index) {
  if (parts <= 0 || index < 0 || index > parts) {
    throw error(errc::invalid_argument, "chunk_offset: index " + std::to_string(index) + " of " + std::to_string(parts));
  }
  const std::int64_t chunk = (n + parts - 1) / parts;
  return std::min<std::int64_t>(chunk * index, n);
}

inline std::int64_t chunk_size(std::int64_t n, int parts, int index) {
  return chunk_offset(n, parts, index + 1) - chunk_offset(n, parts, index);
}

namespace detail {

// The slab of a contiguous CPU tensor around `dim` (copy2d.hpp), with the checks of the CPU helpers here.
inline slab slab_of(const tensor_view& x, std::size_t dim, const char* what) {
  if (dim >= x.rank()) {
    throw error(errc::invalid_argument, std::string(what) + ": dim " + std::to_string(dim) + " of a rank-" +
                                            std::to_string(x.rank()) + " tensor");
  }
  if (!x.is_contiguous()) throw error(errc::invalid_argument, std::string(what) + ": tensor is not contiguous");
  if (!x.device().is_cpu()) throw error(errc::invalid_argument, std::string(what) + ": CPU tensors only");
  return slab_around(x.shape(), dim, x.itemsize());
}

// Copies rows [src_start, src_start+len) of src's dim into rows [dst_start, ...) of dst's dim; the other
// dims must agree (checked by the callers). One host copy2d.
inline void copy_slab(const tensor_view& dst, const slab& gd, std::int64_t dst_start, const tensor_view& src,
                      const slab& gs, std::int64_t src_start, std::int64_t len) {
  host_copy2d(slab_copy(dst.data(), gd, dst_start, src.data(), gs, src_start, len));
}

inline void check_same_except(const tensor_view& a, const tensor_view& b, std::size_t dim, const char* what) {
  bool ok = a.rank() == b.rank() && a.dtype() == b.dtype();
  for (std::size_t i = 0; ok && i < a.rank(); ++i) ok = (i == dim) || a.size(i) == b.size(i);
  if (!ok) {
    throw error(errc::invalid_argument, std::string(what) + ": " + a.shape().to_string() + " " +
                                            std::string(to_string(a.dtype())) + " and " + b.shape().to_string() + " " +
                                            std::string(to_string(b.dtype())) + " differ outside dim " +
                                            std::to_string(dim));
  }
}

}  // namespace detail

// A contiguous copy of x[..., start:start+len, ...] along `dim`.
inline tensor narrow(const tensor_view& x, std::size_t dim, std::int64_t start, std::int64_t len) {
  const auto g = detail::slab_of(x, dim, "narrow");
  if (start < 0 || len < 0 || start + len > g.extent) {
    throw error(errc::invalid_argument, "narrow: [" + std::to_string(start) + ", " + std::to_string(start + len) +
                                            ") outside dim " + std::to_string(dim) + " of " + x.shape().to_string());
  }
  shape s = x.shape();
  s[dim] = len;
  tensor out = tensor::empty(s, x.dtype());
  detail::copy_slab(out.view(), detail::slab_of(out.view(), dim, "narrow"), 0, x, g, start, len);
  return out;
}

// dst[..., start:start+src.size(dim), ...] = src.
inline void copy_into(const tensor_view& dst, std::size_t dim, std::int64_t start, const tensor_view& src) {
  const auto gd = detail::slab_of(dst, dim, "copy_into");
  const auto gs = detail::slab_of(src, dim, "copy_into");
  detail::check_same_except(dst, src, dim, "copy_into");
  if (start < 0 || start + gs.extent > gd.extent) {
    throw error(errc::invalid_argument, "copy_into: rows [" + std::to_string(start) + ", " +
                                            std::to_string(start + gs.extent) + ") outside dim " + std::to_string(dim) +
                                            " of " + dst.shape().to_string());
  }
  detail::copy_slab(dst, gd, start, src, gs, 0, gs.extent);
}

// Concatenation along `dim` (torch.cat).
inline tensor concat(std::span<const tensor_view> parts, std::size_t dim) {
  if (parts.empty()) throw error(errc::invalid_argument, "concat: no parts");
  shape s = parts[0].shape();
  if (dim >= s.size()) throw error(errc::invalid_argument, "concat: dim " + std::to_string(dim) + " out of range");
  std::int64_t total = 0;
  for (const auto& p : parts) {
    detail::check_same_except(parts[0], p, dim, "concat");
    total += p.size(dim);
  }
  s[dim] = total;
  tensor out = tensor::empty(s, parts[0].dtype());
  std::int64_t at = 0;
  for (const auto& p : parts) {
    copy_into(out.view(), dim, at, p);
    at += p.size(dim);
  }
  return out;
}

// Rank `index`'s chunk of x along dim (torch.chunk layout), as a contiguous copy.
inline tensor local_chunk(const tensor_view& x, std::size_t dim, int parts, int index) {
  if (dim >= x.rank()) throw error(errc::invalid_argument, "local_chunk: dim " + std::to_string(dim) + " out of range");
  const std::int64_t n = x.size(dim);
  return narrow(x, dim, chunk_offset(n, parts, index), chunk_size(n, parts, index));
}

}  // namespace jitembed::parallel
