// Shared helpers of the jitembed Python bindings: result<T> unwrapping, Python buffers as keep-alive owners,
// tensors <-> numpy arrays without copies, and the registration entry points of each binding file.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::python {

namespace nb = nanobind;

// Whether the interpreter is shutting down (then the GIL must not be taken from other threads).
inline bool python_finalizing() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// Throws the result's error as jitembed::error (the translator in errors.cpp maps it to the errc's class).
template <class T>
T unwrap(result<T>&& r) {
  if (!r) throw jitembed::error(std::move(r).error());
  return std::move(*r);
}
inline void unwrap(result<void>&& r) {
  if (!r) throw jitembed::error(r.error());
}
[[noreturn]] inline void raise(errc code, std::string message) { throw jitembed::error(code, std::move(message)); }

// A Python object exporting a contiguous buffer (bytes, bytearray, memoryview, numpy array, mmap), held
// with its Py_buffer. Released under the GIL, whatever thread drops the last reference.
struct py_buffer {
  Py_buffer view{};
  bool held = false;
  py_buffer() = default;
  py_buffer(const py_buffer&) = delete;
  py_buffer& operator=(const py_buffer&) = delete;
  ~py_buffer();
  bytes_view bytes() const noexcept { return {static_cast<const std::byte*>(view.buf), static_cast<std::size_t>(view.len)}; }
};
// Gets a C-contiguous read-only buffer of `o` (TypeError for objects without the buffer protocol).
std::shared_ptr<py_buffer> get_buffer(nb::handle o);

// `t` (CPU) as a numpy array sharing its storage: the array owns a copy of the tensor handle, so the
// storage (a mapped shard, a cache value, a response buffer) lives while the array does. read_only arrays
// cannot be written through (mapped files are read-only; cached values are shared).
nb::object to_numpy(const tensor& t, bool read_only);
// The same as a framework-neutral DLPack-capable array (nanobind ndarray: __dlpack__, buffer protocol);
// keeps bf16 as bf16 (numpy has no bf16: to_numpy gives uint16 for it).
nb::object to_dlpack_array(const tensor& t, bool read_only);
// The same as a torch.Tensor (through DLPack, sharing the storage); needs torch importable.
nb::object to_torch(const tensor& t);
// Bytes that stay alive while `owner` does, as a read-only 1-D uint8 array (zero copy).
nb::object bytes_array(bytes_view b, std::shared_ptr<const void> owner);

// A CPU array from Python as a tensor_view (no copy); `keep` receives the object that keeps it alive.
using array_in = nb::ndarray<nb::ro, nb::device::cpu>;
tensor_view to_view(const array_in& a);
tensor to_tensor(const array_in& a);  // shares the array (keeps a reference) -- acquires the GIL to release it

dtype to_dtype(const nb::dlpack::dtype& d);
dtype dtype_from_name(std::string_view name);

// decode_limits from an optional Python DecodeLimits (None: defaults).
inline decode_limits limits_or_default(const std::optional<decode_limits>& l) { return l ? *l : decode_limits{}; }

nb::bytes to_bytes(bytes_view b);

// The Python exception (an instance of the errc's class) for `e`; needs the GIL.
nb::object make_exception(const error_info& e);

void register_errors(nb::module_& m);
void register_arrays(nb::module_& m);
void register_format(nb::module_& m);
void register_codecs(nb::module_& m);
void register_caches(nb::module_& m);
void register_client(nb::module_& m);
void register_model(nb::module_& m);
void register_server(nb::module_& m);

}  // namespace jitembed::python
