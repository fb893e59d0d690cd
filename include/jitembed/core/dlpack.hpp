// DLPack interop: export a tensor as DLManagedTensor (sharing storage) and import one (taking ownership).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <string>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed {

namespace detail {
// DLPack 0.6 (Debian 12) has no kDLBool; later versions define it as 6, which is what producers send.
inline constexpr std::uint8_t kDLBoolCode = 6;

struct dlpack_context {
  tensor keep;  // keeps the storage alive while the consumer holds the DLManagedTensor
  std::int64_t shape[kMaxDims];
  std::int64_t strides[kMaxDims];
};

inline DLDataType to_dl_dtype(dtype t) {
  DLDataType d{};
  d.lanes = 1;
  d.bits = static_cast<std::uint8_t>(element_size(t) * 8);
  switch (t) {
    case dtype::u8: d.code = kDLUInt; break;
    case dtype::i8:
    case dtype::i16:
    case dtype::i32:
    case dtype::i64: d.code = kDLInt; break;
    case dtype::f16:
    case dtype::f32:
    case dtype::f64: d.code = kDLFloat; break;
    case dtype::bf16: d.code = kDLBfloat; break;
    case dtype::boolean: d.code = kDLBoolCode; break;
  }
  return d;
}

inline result<dtype> from_dl_dtype(DLDataType d) {
  if (d.lanes != 1) return fail(errc::dtype_mismatch, "DLPack: vector lanes " + std::to_string(d.lanes) + " unsupported");
  switch (d.code) {
    case kDLUInt:
      if (d.bits == 8) return dtype::u8;
      if (d.bits == 1) return dtype::boolean;
      break;
    case kDLInt:
      if (d.bits == 8) return dtype::i8;
      if (d.bits == 16) return dtype::i16;
      if (d.bits == 32) return dtype::i32;
      if (d.bits == 64) return dtype::i64;
      break;
    case kDLFloat:
      if (d.bits == 16) return dtype::f16;
      if (d.bits == 32) return dtype::f32;
      if (d.bits == 64) return dtype::f64;
      break;
    case kDLBfloat:
      if (d.bits == 16) return dtype::bf16;
      break;
    case kDLBoolCode:
      if (d.bits == 8) return dtype::boolean;
      break;
    default: break;
  }
  return fail(errc::dtype_mismatch,
              "DLPack: dtype code " + std::to_string(d.code) + " bits " + std::to_string(d.bits) + " unsupported");
}
}  // namespace detail

// Exports `t` without copying. The returned tensor keeps `t`'s storage alive until the consumer calls
// its deleter.
inline DLManagedTensor* to_dlpack(const tensor& t) {
  auto ctx = std::make_unique<detail::dlpack_context>();
  ctx->keep = t;
  for (std::size_t i = 0; i < t.rank(); ++i) {
    ctx->shape[i] = t.shape()[i];
    ctx->strides[i] = t.strides()[i];
  }
  auto m = std::make_unique<DLManagedTensor>();
  m->dl_tensor.data = t.data();
  m->dl_tensor.device = DLDevice{t.device().is_cpu() ? kDLCPU : kDLCUDA, t.device().ordinal};
  m->dl_tensor.ndim = static_cast<std::int32_t>(t.rank());
  m->dl_tensor.dtype = detail::to_dl_dtype(t.dtype());
  m->dl_tensor.shape = ctx->shape;
  m->dl_tensor.strides = ctx->strides;
  m->dl_tensor.byte_offset = 0;
  m->manager_ctx = ctx.release();
  m->deleter = [](DLManagedTensor* self) {
    delete static_cast<detail::dlpack_context*>(self->manager_ctx);
    delete self;
  };
  return m.release();
}

// Imports a DLManagedTensor, taking ownership: its deleter runs when the last tensor sharing it goes.
// On failure the deleter is called before returning (ownership was passed in either way).
inline result<tensor> try_from_dlpack(DLManagedTensor* m) {
  if (m == nullptr) return fail(errc::invalid_argument, "DLPack: null tensor");
  std::shared_ptr<DLManagedTensor> owner(m, [](DLManagedTensor* p) {
    if (p->deleter) p->deleter(p);
  });
  const DLTensor& d = m->dl_tensor;
  if (d.ndim < 0 || static_cast<std::size_t>(d.ndim) > kMaxDims)
    return fail(errc::limit_exceeded, "DLPack: ndim " + std::to_string(d.ndim) + " outside [0, 8]");
  device dev;
  if (d.device.device_type == kDLCPU || d.device.device_type == kDLCUDAHost) {
    dev = device::cpu();
  } else if (d.device.device_type == kDLCUDA) {
    dev = device::cuda(d.device.device_id);
  } else {
    return fail(errc::invalid_argument, "DLPack: device type " + std::to_string(d.device.device_type) + " unsupported");
  }
  JITEMBED_ASSIGN_OR_RETURN(auto t, detail::from_dl_dtype(d.dtype));
  shape s, st;
  for (std::int32_t i = 0; i < d.ndim; ++i) s.push_back(d.shape[i]);
  JITEMBED_TRY(checked_numel(s.span()));  // the element count fits in 64 bits
  if (d.strides) {
    for (std::int32_t i = 0; i < d.ndim; ++i) st.push_back(d.strides[i]);
  } else {
    st = contiguous_strides(s);  // DLPack: null strides mean compact row-major
  }
  void* data = static_cast<std::byte*>(d.data) + d.byte_offset;
  return tensor::wrap(std::move(owner), tensor_view(data, t, s, st, dev));
}

inline tensor from_dlpack(DLManagedTensor* m) { return try_from_dlpack(m).value(); }

}  // namespace jitembed
