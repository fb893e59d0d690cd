// tensor_view (non-owning) and tensor (shared ownership, custom keep-alive) over strided storage.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/dtype.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/memory_account.hpp"

namespace jitembed {

enum class device_type : std::uint8_t { cpu = 0, cuda = 1 };

struct device {
  device_type type = device_type::cpu;
  int ordinal = 0;

  static constexpr device cpu() noexcept { return {}; }
  static constexpr device cuda(int ordinal) noexcept { return {device_type::cuda, ordinal}; }
  constexpr bool is_cpu() const noexcept { return type == device_type::cpu; }
  friend constexpr bool operator==(device, device) noexcept = default;
};

inline constexpr std::size_t kMaxDims = 8;

// A fixed-capacity list of extents (or strides); no heap allocation on hot paths.
class shape {
 public:
  constexpr shape() noexcept = default;
  shape(std::initializer_list<std::int64_t> dims) : shape(std::span<const std::int64_t>(dims.begin(), dims.size())) {}
  explicit shape(std::span<const std::int64_t> dims) {
    if (dims.size() > kMaxDims) throw error(errc::limit_exceeded, "shape rank " + std::to_string(dims.size()) + " > 8");
    rank_ = dims.size();
    std::copy(dims.begin(), dims.end(), dims_.begin());
  }

  constexpr std::size_t size() const noexcept { return rank_; }
  constexpr bool empty() const noexcept { return rank_ == 0; }
  constexpr std::int64_t operator[](std::size_t i) const noexcept { return dims_[i]; }
  constexpr std::int64_t& operator[](std::size_t i) noexcept { return dims_[i]; }
  constexpr const std::int64_t* begin() const noexcept { return dims_.data(); }
  constexpr const std::int64_t* end() const noexcept { return dims_.data() + rank_; }
  std::span<const std::int64_t> span() const noexcept { return {dims_.data(), rank_}; }
  void push_back(std::int64_t d) {
    if (rank_ == kMaxDims) throw error(errc::limit_exceeded, "shape rank > 8");
    dims_[rank_++] = d;
  }

  friend bool operator==(const shape& a, const shape& b) noexcept {
    return a.rank_ == b.rank_ && std::equal(a.begin(), a.end(), b.begin());
  }

  std::string to_string() const {
    std::string s = "[";
    for (std::size_t i = 0; i < rank_; ++i) {
      if (i) s.push_back(',');
      s.append(std::to_string(dims_[i]));
    }
    s.push_back(']');
    return s;
  }

 private:
  std::array<std::int64_t, kMaxDims> dims_{};
  std::size_t rank_ = 0;
};

// The one rule for products of untrusted extents (>= 0): the product of the non-zero extents (1 when
// there are none) must be at most 2^63 - 1, checked exactly, so neither the order of the extents nor a zero
// among them changes the verdict ([2^40, 2^40, 0] and [0, 2^40, 2^40] both overflow), and every stride and
// partial product of an accepted shape fits the signed 64-bit integers that extents, strides, DLPack and
// NumPy use (NumPy refuses np.empty((0, 2**40, 2**40)) the same way). docs/format.md states it for fields.
inline constexpr std::uint64_t kMaxShapeProduct = 0x7fffffffffffffffull;

struct extent_product {
  std::uint64_t nonzero = 1;         // product of the non-zero extents (valid when overflow_dim < 0)
  bool has_zero = false;             // a zero extent: numel() is 0
  std::ptrdiff_t overflow_dim = -1;  // the dim at which `nonzero` first passes kMaxShapeProduct, or -1
  std::uint64_t numel() const noexcept { return has_zero ? 0 : nonzero; }
};

// Extents must be >= 0 (the callers check that first).
inline extent_product product_of_extents(std::span<const std::int64_t> dims) noexcept {
  extent_product p;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const auto d = static_cast<std::uint64_t>(dims[i]);
    if (d == 0) {
      p.has_zero = true;
      continue;
    }
    if (p.nonzero > kMaxShapeProduct / d) {
      p.overflow_dim = static_cast<std::ptrdiff_t>(i);
      return p;
    }
    p.nonzero *= d;
  }
  return p;
}

// Product of extents with negativity (every dim first) and overflow checks (product_of_extents).
inline result<std::uint64_t> checked_numel(std::span<const std::int64_t> dims) {
  for (std::size_t i = 0; i < dims.size(); ++i)
    if (dims[i] < 0)
      return fail(errc::invalid_argument,
                  "negative extent " + std::to_string(dims[i]) + " at dim " + std::to_string(i));
  const extent_product p = product_of_extents(dims);
  if (p.overflow_dim >= 0)
    return fail(errc::shape_overflow, "shape product overflows at dim " + std::to_string(p.overflow_dim));
  return p.numel();
}

// numel * element size, overflow-checked: the product of the non-zero extents times the element size is at
// most kMaxShapeProduct (so the byte strides of a shape with a zero extent fit too).
inline result<std::uint64_t> checked_nbytes(std::span<const std::int64_t> dims, dtype t) {
  auto n = checked_numel(dims);
  if (!n) return n;
  const std::uint64_t es = element_size(t);
  if (es == 0) return fail(errc::invalid_argument, "invalid dtype");
  if (product_of_extents(dims).nonzero > kMaxShapeProduct / es)
    return fail(errc::shape_overflow, "byte size overflows");
  return *n * es;
}

inline shape contiguous_strides(const shape& s) {
  shape st = s;
  std::int64_t acc = 1;
  for (std::size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<std::int64_t>(s[i], 1);
  }
  return st;
}

// Non-owning view: pointer, dtype, shape, strides in elements, device. Cheap to copy.
class tensor_view {
 public:
  tensor_view() = default;
  tensor_view(void* data, dtype t, const shape& s, device dev = device::cpu())
      : data_(data), dtype_(t), shape_(s), strides_(contiguous_strides(s)), device_(dev) {}
  tensor_view(void* data, dtype t, const shape& s, const shape& strides, jitembed::device dev)
      : data_(data), dtype_(t), shape_(s), strides_(strides), device_(dev) {
    if (strides.size() != s.size()) throw error(errc::invalid_argument, "strides rank != shape rank");
  }
  tensor_view(const void* data, dtype t, const shape& s, device dev = device::cpu())
      : tensor_view(const_cast<void*>(data), t, s, dev) {}

  void* data() const noexcept { return data_; }
  template <class T>
  T* data() const noexcept {
    return static_cast<T*>(data_);
  }
  jitembed::dtype dtype() const noexcept { return dtype_; }
  const jitembed::shape& shape() const noexcept { return shape_; }
  const jitembed::shape& strides() const noexcept { return strides_; }
  jitembed::device device() const noexcept { return device_; }
  std::size_t rank() const noexcept { return shape_.size(); }
  std::int64_t size(std::size_t dim) const noexcept { return shape_[dim]; }
  std::uint64_t numel() const noexcept {
    std::uint64_t n = 1;
    for (auto d : shape_) n *= static_cast<std::uint64_t>(d);
    return n;
  }
  std::size_t itemsize() const noexcept { return element_size(dtype_); }
  std::size_t nbytes() const noexcept { return static_cast<std::size_t>(numel()) * itemsize(); }

  // An empty tensor (a zero extent) is contiguous whatever its strides, as in PyTorch.
  bool is_contiguous() const noexcept {
    for (auto d : shape_) {
      if (d == 0) return true;
    }
    std::int64_t expect = 1;
    for (std::size_t i = shape_.size(); i-- > 0;) {
      if (shape_[i] != 1 && strides_[i] != expect) return false;
      expect *= shape_[i];
    }
    return true;
  }

  // The bytes of a contiguous CPU view; throws for strided views.
  bytes_view bytes() const {
    if (!is_contiguous()) throw error(errc::invalid_argument, "bytes() of a non-contiguous view");
    return {static_cast<const std::byte*>(data_), nbytes()};
  }
  mutable_bytes mutable_bytes_span() const {
    if (!is_contiguous()) throw error(errc::invalid_argument, "bytes() of a non-contiguous view");
    return {static_cast<std::byte*>(data_), nbytes()};
  }

 private:
  void* data_ = nullptr;
  jitembed::dtype dtype_ = dtype::u8;
  jitembed::shape shape_{};
  jitembed::shape strides_{};
  jitembed::device device_{};
};

// Owning tensor: a view plus a shared keep-alive. The keep-alive may be aligned heap storage, a mapped
// file, a network buffer or a DLPack producer; its deleter runs when the last tensor sharing it goes.
class tensor {
 public:
  tensor() = default;

  // Uninitialised, 64-byte aligned CPU storage. Throws on a negative or overflowing shape, and
  // resource_exhausted when the calling thread's memory_scope (core/memory_account.hpp) has a host budget
  // this allocation would pass; the bytes count against that scope's tag until the storage goes.
  static tensor empty(const jitembed::shape& s, jitembed::dtype t) {
    const auto n = static_cast<std::size_t>(checked_nbytes(s.span(), t).value());
    auto charged = memory_account::charge_current(n, memory_kind::host);
    if (!charged) throw error(charged.error());
    auto storage = allocate_shared_aligned(n);
    void* p = storage.get();
    if (charged->counted()) {  // the charge is released with the storage
      struct counted {
        std::shared_ptr<std::byte> mem;
        memory_account::charge charge;
      };
      auto holder = std::make_shared<counted>(counted{std::move(storage), std::move(*charged)});
      return tensor(std::shared_ptr<void>(holder, p), tensor_view(p, t, s));
    }
    return tensor(std::move(storage), tensor_view(p, t, s));
  }
  static tensor zeros(const jitembed::shape& s, jitembed::dtype t) {
    tensor r = empty(s, t);
    std::memset(r.data(), 0, r.nbytes());
    return r;
  }
  // Shares ownership with `owner` (any shared_ptr converts: its deleter is the custom deleter).
  static tensor wrap(jitembed::keep_alive owner, const tensor_view& view) {
    return tensor(std::const_pointer_cast<void>(std::move(owner)), view);
  }
  // Deep copy of a contiguous CPU byte range into new aligned storage.
  static tensor copy_of(bytes_view b, jitembed::dtype t, const jitembed::shape& s) {
    tensor r = empty(s, t);
    if (r.nbytes() != b.size()) throw error(errc::invalid_argument, "copy_of: byte count does not match shape");
    if (!b.empty()) std::memcpy(r.data(), b.data(), b.size());
    return r;
  }

  const tensor_view& view() const noexcept { return view_; }
  operator const tensor_view&() const noexcept { return view_; }  // NOLINT: a tensor is usable as a view
  const std::shared_ptr<void>& owner() const noexcept { return owner_; }
  bool defined() const noexcept { return owner_ != nullptr || view_.data() != nullptr; }

  void* data() const noexcept { return view_.data(); }
  template <class T>
  T* data() const noexcept {
    return view_.data<T>();
  }
  jitembed::dtype dtype() const noexcept { return view_.dtype(); }
  const jitembed::shape& shape() const noexcept { return view_.shape(); }
  const jitembed::shape& strides() const noexcept { return view_.strides(); }
  jitembed::device device() const noexcept { return view_.device(); }
  std::size_t rank() const noexcept { return view_.rank(); }
  std::int64_t size(std::size_t d) const noexcept { return view_.size(d); }
  std::uint64_t numel() const noexcept { return view_.numel(); }
  std::size_t nbytes() const noexcept { return view_.nbytes(); }
  bool is_contiguous() const noexcept { return view_.is_contiguous(); }
  bytes_view bytes() const { return view_.bytes(); }
  mutable_bytes mutable_bytes_span() const { return view_.mutable_bytes_span(); }

  // Same storage, new dtype/shape; the byte count must match exactly (no copy).
  result<tensor> reinterpret(jitembed::dtype t, const jitembed::shape& s) const {
    if (!is_contiguous()) return fail(errc::invalid_argument, "reinterpret of a non-contiguous tensor");
    JITEMBED_ASSIGN_OR_RETURN(auto n, checked_nbytes(s.span(), t));
    if (n != nbytes())
      return fail(errc::corrupt_data, "reinterpret: " + std::to_string(nbytes()) + " bytes cannot hold " +
                                          std::string(to_string(t)) + s.to_string());
    return tensor(owner_, tensor_view(data(), t, s, device()));
  }

  // A contiguous deep copy (CPU only).
  tensor clone() const {
    if (!device().is_cpu()) throw error(errc::invalid_argument, "clone of a non-CPU tensor");
    tensor r = empty(shape(), dtype());
    if (is_contiguous()) {
      if (nbytes()) std::memcpy(r.data(), data(), nbytes());
      return r;
    }
    // Strided gather, one element at a time (rare path: DLPack imports of transposed tensors).
    const std::size_t es = view_.itemsize();
    const std::size_t n = static_cast<std::size_t>(numel());
    std::array<std::int64_t, kMaxDims> idx{};
    auto* dst = static_cast<std::byte*>(r.data());
    const auto* src = static_cast<const std::byte*>(data());
    for (std::size_t i = 0; i < n; ++i) {
      std::int64_t off = 0;
      for (std::size_t d = 0; d < rank(); ++d) off += idx[d] * strides()[d];
      std::memcpy(dst + i * es, src + off * static_cast<std::int64_t>(es), es);
      for (std::size_t d = rank(); d-- > 0;) {
        if (++idx[d] < shape()[d]) break;
        idx[d] = 0;
      }
    }
    return r;
  }

 private:
  tensor(std::shared_ptr<void> owner, const tensor_view& v) : owner_(std::move(owner)), view_(v) {}

  std::shared_ptr<void> owner_;
  tensor_view view_;
};

}  // namespace jitembed
