// LibTorch <-> jitembed plumbing for the torch adapter: dtype and device mapping, batch assembly (one copy),
// module outputs (Tensor / tuple / list / dict) to per-item jitembed tensors via DLPack, parameter hashing.
#pragma once

#include <ATen/DLConvertor.h>
#include <c10/util/Exception.h>
#include <torch/script.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/dlpack.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/models/model.hpp"

namespace jitembed::models::detail {

inline c10::ScalarType to_torch_dtype(dtype t) noexcept {
  switch (t) {
    case dtype::u8: return c10::ScalarType::Byte;
    case dtype::i8: return c10::ScalarType::Char;
    case dtype::i16: return c10::ScalarType::Short;
    case dtype::i32: return c10::ScalarType::Int;
    case dtype::i64: return c10::ScalarType::Long;
    case dtype::f16: return c10::ScalarType::Half;
    case dtype::bf16: return c10::ScalarType::BFloat16;
    case dtype::f32: return c10::ScalarType::Float;
    case dtype::f64: return c10::ScalarType::Double;
    case dtype::boolean: return c10::ScalarType::Bool;
  }
  return c10::ScalarType::Undefined;
}

inline c10::Device to_torch_device(device d) noexcept {
  return d.is_cpu() ? c10::Device(c10::DeviceType::CPU) : c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(d.ordinal));
}

// The message of a LibTorch exception without its C++ backtrace (stable enough to show a client).
inline std::string torch_what(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

inline std::string shape_string(std::span<const std::int64_t> dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

inline bool shape_matches(std::span<const std::int64_t> want, std::span<const std::int64_t> got) noexcept {
  if (want.size() != got.size()) return false;
  for (std::size_t d = 0; d < want.size(); ++d)
    if (want[d] >= 0 && want[d] != got[d]) return false;
  return true;
}

// Items (already checked against the input meta: same dtype, contiguous, CPU) -> one [N, item...] tensor on
// `dev`. Each item is copied exactly once: memcpy into CPU storage (page-locked with `pinned`: the staging
// buffer of a host-to-device copy, torch_cuda_staging.hpp), or one host-to-device copy per item (a CUDA
// device without JITEMBED_TORCH_CUDA). Variable extents (-1) must agree across the batch.
inline result<torch::Tensor> stack_items(std::string_view model, std::span<const tensor> batch, const tensor_meta& in,
                                         c10::Device dev, bool pinned = false) {
  const tensor& first = batch.front();
  for (std::size_t i = 1; i < batch.size(); ++i)
    if (!(batch[i].shape() == first.shape()))
      return fail(errc::invalid_argument, std::string(model) + ": batch[" + std::to_string(i) + "] '" + in.name +
                                              "' has shape " + batch[i].shape().to_string() + ", batch[0] has " +
                                              first.shape().to_string() + " (items of one batch must agree)");
  std::vector<std::int64_t> sizes{static_cast<std::int64_t>(batch.size())};
  sizes.insert(sizes.end(), first.shape().begin(), first.shape().end());
  auto opts = torch::TensorOptions().dtype(to_torch_dtype(in.type)).device(dev);
  if (pinned && dev.is_cpu()) opts = opts.pinned_memory(true);
  torch::Tensor x = torch::empty(sizes, opts);
  const std::size_t item_bytes = first.nbytes();
  if (item_bytes == 0) return x;
  if (dev.is_cpu()) {
    auto* dst = static_cast<std::byte*>(x.data_ptr());
    for (std::size_t i = 0; i < batch.size(); ++i) std::memcpy(dst + i * item_bytes, batch[i].data(), item_bytes);
    return x;
  }
  const std::vector<std::int64_t> item_sizes(first.shape().begin(), first.shape().end());
  const auto host = torch::TensorOptions().dtype(to_torch_dtype(in.type));
  for (std::size_t i = 0; i < batch.size(); ++i)
    x[static_cast<std::int64_t>(i)].copy_(torch::from_blob(batch[i].data(), item_sizes, host));
  return x;
}

// What forward returned -> one batch tensor per declared output, in outputs order. A Tensor fills a single
// output; a tuple or list fills them by position; a Dict[str, Tensor] by name (extra keys are ignored).
inline result<std::vector<torch::Tensor>> unpack_outputs(std::string_view model, const c10::IValue& v,
                                                         std::span<const tensor_meta> outs) {
  const std::string who(model);
  std::vector<torch::Tensor> r;
  auto by_position = [&](std::size_t n, auto&& at) -> result<std::vector<torch::Tensor>> {
    if (n != outs.size())
      return fail(errc::internal, who + ": forward returned " + std::to_string(n) + " values, " +
                                      std::to_string(outs.size()) + " outputs are declared");
    for (std::size_t i = 0; i < n; ++i) {
      c10::IValue e = at(i);
      if (!e.isTensor())
        return fail(errc::internal, who + ": forward value " + std::to_string(i) + " ('" + outs[i].name + "') is a " +
                                        e.tagKind() + ", not a Tensor");
      r.push_back(std::move(e).toTensor());
    }
    return std::move(r);
  };
  if (v.isTensor()) return by_position(1, [&](std::size_t) { return v; });
  if (v.isTuple()) {
    const auto& el = v.toTupleRef().elements();
    return by_position(el.size(), [&](std::size_t i) { return el[i]; });
  }
  if (v.isList()) {
    const auto l = v.toList();
    return by_position(l.size(), [&](std::size_t i) { return c10::IValue(l.get(i)); });
  }
  if (v.isGenericDict()) {
    const auto d = v.toGenericDict();
    for (const auto& o : outs) {
      auto it = d.find(c10::IValue(o.name));
      if (it == d.end()) return fail(errc::internal, who + ": forward's dict has no output '" + o.name + "'");
      if (!it->value().isTensor()) return fail(errc::internal, who + ": forward's dict value '" + o.name + "' is not a Tensor");
      r.push_back(it->value().toTensor());
    }
    return r;
  }
  return fail(errc::internal, who + ": forward returned a " + v.tagKind() +
                                  " (expected a Tensor, a tuple or list of Tensors, or a Dict[str, Tensor])");
}

// One output's [N, item...] batch tensor -> N jitembed tensors sharing its storage (exported once through
// DLPack; the keep-alive holds the torch tensor). Casts to the declared dtype, and copies to the CPU when
// `to_cpu`, first; a shape that disagrees with the meta is errc::internal (the module and its declared
// outputs disagree).
inline result<std::vector<tensor>> split_output(std::string_view model, torch::Tensor y, const tensor_meta& meta,
                                                std::size_t n, bool to_cpu) {
  const std::string where = std::string(model) + ": output '" + meta.name + "'";
  const auto got = y.sizes();
  if (got.empty() || got[0] != static_cast<std::int64_t>(n))
    return fail(errc::internal, where + " has shape " + shape_string({got.data(), got.size()}) + ", expected batch dim " +
                                    std::to_string(n));
  if (!shape_matches(meta.shape, {got.data() + 1, got.size() - 1}))
    return fail(errc::internal, where + " has item shape " + shape_string({got.data() + 1, got.size() - 1}) +
                                    ", declared " + shape_string(meta.shape) + " (batch " + shape_string({got.data(), got.size()}) + ")");
  if (y.scalar_type() != to_torch_dtype(meta.type)) {
    // Between floating types (f64/f32/f16/bf16) the declared dtype is a cast; any other disagreement (an
    // integer or bool output declared floating, or the reverse) means the module and its config disagree.
    if (!c10::isFloatingType(y.scalar_type()) || !c10::isFloatingType(to_torch_dtype(meta.type)))
      return fail(errc::internal, where + " has dtype " + std::string(c10::toString(y.scalar_type())) + " " +
                                      shape_string({got.data(), got.size()}) + ", declared " + std::string(to_string(meta.type)) + " " +
                                      shape_string(meta.shape) + " (only floating outputs are cast)");
    y = y.to(to_torch_dtype(meta.type));
  }
  if (to_cpu && !y.device().is_cpu()) y = y.to(c10::Device(c10::DeviceType::CPU));
  y = y.contiguous();
  auto whole = try_from_dlpack(at::toDLPack(y));
  if (!whole) return fail(whole.code(), where + ": " + whole.error().message);
  shape item;
  for (std::size_t d = 1; d < got.size(); ++d) item.push_back(got[d]);
  std::vector<tensor> items;
  items.reserve(n);
  const std::size_t item_bytes = static_cast<std::size_t>(y.numel() / static_cast<std::int64_t>(std::max<std::size_t>(n, 1))) *
                                 element_size(meta.type);
  auto* base = static_cast<std::byte*>(whole->data());
  for (std::size_t i = 0; i < n; ++i)
    items.push_back(tensor::wrap(whole->owner(), tensor_view(base + i * item_bytes, meta.type, item, whole->device())));
  return items;
}

using named_torch_tensors = std::vector<std::pair<std::string, torch::Tensor>>;

// XXH3-128 over the names, dtypes, shapes and bytes of named tensors (parameters and buffers), in order.
inline std::string hash_named_tensors(const named_torch_tensors& named) {
  hasher128 h(0x746f726368ull);
  auto put = [&](const void* p, std::size_t n) { h.update({static_cast<const std::byte*>(p), n}); };
  for (const auto& [name, value] : named) {
    const std::uint64_t len = name.size();
    put(&len, sizeof len);
    put(name.data(), name.size());
    if (!value.defined()) continue;
    const torch::Tensor t = value.detach().to(c10::Device(c10::DeviceType::CPU)).contiguous();
    const auto st = static_cast<std::int32_t>(t.scalar_type());
    put(&st, sizeof st);
    const std::uint64_t rank = static_cast<std::uint64_t>(t.dim());
    put(&rank, sizeof rank);
    put(t.sizes().data(), t.sizes().size() * sizeof(std::int64_t));
    put(t.data_ptr(), static_cast<std::size_t>(t.numel()) * t.element_size());
  }
  return h.digest().to_hex();
}

}  // namespace jitembed::models::detail
