// The one copy primitive under the dim collectives and redistribute: a strided 2-D copy (cudaMemcpy2D's
// arguments), the slab arithmetic that turns "rows [a, a+len) of dim d" into one, and the device-memory
// operations a communicator provides so those functions also take tensors on its device.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::parallel {

// `height` rows of `width` bytes: row i goes from src + i·spitch to dst + i·dpitch (pitches ≥ width, so
// rows never overlap within one side). A contiguous copy is height 1, or pitches equal to the width.
struct copy2d_desc {
  void* dst = nullptr;
  std::size_t dpitch = 0;
  const void* src = nullptr;
  std::size_t spitch = 0;
  std::size_t width = 0;
  std::size_t height = 0;

  constexpr bool empty() const noexcept { return width == 0 || height == 0; }
  constexpr bool contiguous() const noexcept { return height <= 1 || (dpitch == width && spitch == width); }
  constexpr std::size_t bytes() const noexcept { return width * height; }
};

// The host implementation (memcpy per row; one memcpy when both sides are contiguous).
inline void host_copy2d(const copy2d_desc& d) noexcept {
  if (d.empty()) return;
  if (d.contiguous()) {
    std::memcpy(d.dst, d.src, d.bytes());
    return;
  }
  auto* dst = static_cast<std::byte*>(d.dst);
  const auto* src = static_cast<const std::byte*>(d.src);
  for (std::size_t i = 0; i < d.height; ++i) std::memcpy(dst + i * d.dpitch, src + i * d.spitch, d.width);
}

// A contiguous tensor seen as [outer, extent, inner] elements around one dim.
struct slab {
  std::int64_t outer = 1, extent = 0, inner = 1;
  std::size_t itemsize = 0;

  constexpr std::size_t row_bytes() const noexcept { return static_cast<std::size_t>(inner) * itemsize; }
};

// The slab of a shape around `dim` (dim < s.size(), checked by the callers).
inline slab slab_around(const shape& s, std::size_t dim, std::size_t itemsize) noexcept {
  slab g;
  for (std::size_t i = 0; i < dim; ++i) g.outer *= s[i];
  g.extent = s[dim];
  for (std::size_t i = dim + 1; i < s.size(); ++i) g.inner *= s[i];
  g.itemsize = itemsize;
  return g;
}

// The copy of rows [src_start, src_start+len) of src's dim to rows [dst_start, ...) of dst's dim, for
// two slabs that agree outside that dim (outer, inner, itemsize): `outer` rows of len·inner elements,
// pitched by each side's extent·inner. With outer == 1 (or full extents on both sides) it is contiguous.
inline copy2d_desc slab_copy(void* dst, const slab& gd, std::int64_t dst_start, const void* src, const slab& gs,
                             std::int64_t src_start, std::int64_t len) noexcept {
  copy2d_desc d;
  const std::size_t row = gd.row_bytes();
  if (len <= 0 || gd.outer <= 0 || row == 0) return d;
  d.dst = static_cast<std::byte*>(dst) + static_cast<std::size_t>(dst_start) * row;
  d.src = static_cast<const std::byte*>(src) + static_cast<std::size_t>(src_start) * row;
  d.width = static_cast<std::size_t>(len) * row;
  d.height = static_cast<std::size_t>(gd.outer);
  d.dpitch = static_cast<std::size_t>(gd.extent) * row;
  d.spitch = static_cast<std::size_t>(gs.extent) * row;
  if (d.height == 1) d.dpitch = d.spitch = d.width;
  return d;
}

// What a communicator whose buffers live on a device provides, so that the dim collectives, the TP
// mappings and redistribute can stage tensors on that device (communicator.device()): allocation,
// strided copies and zero fill, all ordered on the communicator's stream before and after its
// collectives (so none of them synchronizes the host). A CPU communicator (gloo_communicator) has none of
// it; those functions then take CPU tensors only.
template <class C>
concept device_memory = requires(C& c, const shape& s, dtype t, const copy2d_desc& d, const tensor_view& v) {
  { c.empty_tensor(s, t) } -> std::same_as<tensor>;  // uninitialised, on c.device()
  c.copy2d(d);                                       // both sides on c.device()
  c.zero_fill(v);                                    // v contiguous, on c.device()
};

namespace detail {

// Every tensor a function touches is on the CPU, or on the communicator's device when it has device memory.
template <class C>
result<void> check_memory(const C& comm, const tensor_view& x, const char* what) {
  if (x.device().is_cpu()) return {};
  if constexpr (device_memory<C>) {
    if (x.device() == comm.device()) return {};
    return fail(errc::invalid_argument, std::string(what) + ": tensor on CUDA device " + std::to_string(x.device().ordinal) +
                                            ", the communicator's buffers are on device " +
                                            std::to_string(comm.device().ordinal));
  } else {
    return fail(errc::invalid_argument,
                std::string(what) + ": CPU tensors only (this communicator has no device memory)");
  }
}

template <class C>
tensor mem_empty(C& comm, const shape& s, dtype t, device dev) {
  if constexpr (device_memory<C>) {
    if (!dev.is_cpu()) return comm.empty_tensor(s, t);
  }
  return tensor::empty(s, t);
}

template <class C>
tensor mem_zeros(C& comm, const shape& s, dtype t, device dev) {
  if constexpr (device_memory<C>) {
    if (!dev.is_cpu()) {
      tensor out = comm.empty_tensor(s, t);
      comm.zero_fill(out.view());
      return out;
    }
  }
  return tensor::zeros(s, t);
}

template <class C>
void mem_copy2d(C& comm, device dev, const copy2d_desc& d) {
  if (d.empty()) return;
  if constexpr (device_memory<C>) {
    if (!dev.is_cpu()) {
      comm.copy2d(d);
      return;
    }
  }
  host_copy2d(d);
}

// A contiguous copy of x[..., start:start+len, ...] along dim, on x's device.
template <class C>
tensor mem_narrow(C& comm, const tensor_view& x, std::size_t dim, std::int64_t start, std::int64_t len) {
  shape s = x.shape();
  s[dim] = len;
  tensor out = mem_empty(comm, s, x.dtype(), x.device());
  const slab gx = slab_around(x.shape(), dim, x.itemsize());
  mem_copy2d(comm, x.device(), slab_copy(out.data(), slab_around(s, dim, x.itemsize()), 0, x.data(), gx, start, len));
  return out;
}

// A contiguous copy of x on x's device.
template <class C>
tensor mem_clone(C& comm, const tensor_view& x) {
  tensor out = mem_empty(comm, x.shape(), x.dtype(), x.device());
  mem_copy2d(comm, x.device(), copy2d_desc{out.data(), x.nbytes(), x.data(), x.nbytes(), x.nbytes(), 1});
  return out;
}

}  // namespace detail

}  // namespace jitembed::parallel
