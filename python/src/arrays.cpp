// Tensors <-> numpy / DLPack arrays without copies, Python buffers as keep-alive owners, DecodeLimits.
#include <nanobind/stl/string.h>

#include <cstring>

// numpy arrays are made with numpy's C API (a third of nanobind's generic DLPack route per array: the
// hot path of RecordView.to_dict and Loader steps); only this file uses it.
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL jitembed_numpy_api
#include <numpy/arrayobject.h>

#include "common.hpp"
#include "jitembed/core/dlpack.hpp"
#include "jitembed/core/dtype.hpp"
#include "jitembed/core/hash.hpp"

namespace jitembed::python {

py_buffer::~py_buffer() {
  if (!held || !Py_IsInitialized() || python_finalizing()) return;  // at exit: the interpreter frees everything
  nb::gil_scoped_acquire gil;
  PyBuffer_Release(&view);
}

std::shared_ptr<py_buffer> get_buffer(nb::handle o) {
  auto b = std::make_shared<py_buffer>();
  if (PyObject_GetBuffer(o.ptr(), &b->view, PyBUF_C_CONTIGUOUS) != 0) {
    PyErr_Clear();
    throw nb::type_error(("expected a contiguous bytes-like object (bytes, bytearray, memoryview, numpy array), got " +
                          std::string(nb::type_name(o.type()).c_str())).c_str());
  }
  b->held = true;
  return b;
}

namespace {

nb::dlpack::dtype nb_dtype(dtype t, bool numpy) {
  const DLDataType d = detail::to_dl_dtype(t);
  nb::dlpack::dtype r;
  r.code = d.code;
  r.bits = d.bits;
  r.lanes = d.lanes;
  if (numpy && t == dtype::bf16) r.code = static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt);  // numpy has no bf16
  return r;
}

template <class Framework>
nb::object make_array(const tensor& t, bool read_only) {
  if (!t.device().is_cpu()) raise(errc::invalid_argument, "tensor is not on the CPU");
  auto* keep = new tensor(t);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<tensor*>(p); });
  std::size_t shape[kMaxDims];
  std::int64_t strides[kMaxDims];
  for (std::size_t i = 0; i < t.rank(); ++i) {
    shape[i] = static_cast<std::size_t>(t.shape()[i]);
    strides[i] = t.strides()[i];
  }
  const auto dt = nb_dtype(t.dtype(), std::is_same_v<Framework, nb::numpy>);
  if (read_only)
    return nb::ndarray<Framework, nb::ro>(t.data(), t.rank(), shape, owner, strides, dt, nb::device::cpu::value).cast();
  return nb::ndarray<Framework>(t.data(), t.rank(), shape, owner, strides, dt, nb::device::cpu::value).cast();
}

}  // namespace

int numpy_type(dtype t) {
  switch (t) {
    case dtype::u8: return NPY_UINT8;
    case dtype::i8: return NPY_INT8;
    case dtype::i16: return NPY_INT16;
    case dtype::i32: return NPY_INT32;
    case dtype::i64: return NPY_INT64;
    case dtype::f16: return NPY_HALF;
    case dtype::bf16: return NPY_UINT16;  // numpy has no bf16: the bits (to_dlpack_array keeps bf16)
    case dtype::f32: return NPY_FLOAT32;
    case dtype::f64: return NPY_FLOAT64;
    case dtype::boolean: return NPY_BOOL;
  }
  raise(errc::dtype_mismatch, "no numpy type for dtype " + std::string(to_string(t)));
}

nb::object to_numpy(const tensor& t, bool read_only) {
  if (!t.device().is_cpu()) raise(errc::invalid_argument, "tensor is not on the CPU");
  npy_intp dims[kMaxDims], strides[kMaxDims];
  const auto item = static_cast<npy_intp>(element_size(t.dtype()));
  for (std::size_t i = 0; i < t.rank(); ++i) {
    dims[i] = static_cast<npy_intp>(t.shape()[i]);
    strides[i] = static_cast<npy_intp>(t.strides()[i]) * item;
  }
  nb::capsule owner(new tensor(t), [](void* p) noexcept { delete static_cast<tensor*>(p); });
  PyObject* a = PyArray_New(&PyArray_Type, static_cast<int>(t.rank()), dims, numpy_type(t.dtype()), strides, t.data(), 0,
                            read_only ? 0 : NPY_ARRAY_WRITEABLE, nullptr);
  if (!a) throw nb::python_error();
  nb::object arr = nb::steal(a);
  if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject*>(a), owner.release().ptr()) != 0) throw nb::python_error();
  return arr;
}

// DLPack (array API) export of a CPU tensor: shares its memory, keeps bf16 as bf16.
nb::object to_dlpack_array(const tensor& t, bool read_only) { return make_array<nb::array_api>(t, read_only); }

nb::object to_torch(const tensor& t) { return make_array<nb::pytorch>(t, /*read_only=*/false); }

nb::object bytes_array(bytes_view b, std::shared_ptr<const void> owner) {
  const tensor t = tensor::wrap(std::move(owner), tensor_view(b.data(), dtype::u8, shape{static_cast<std::int64_t>(b.size())}));
  return to_numpy(t, /*read_only=*/true);
}

dtype to_dtype(const nb::dlpack::dtype& d) {
  DLDataType dl{};
  dl.code = d.code;
  dl.bits = d.bits;
  dl.lanes = d.lanes;
  return unwrap(detail::from_dl_dtype(dl));
}

dtype dtype_from_name(std::string_view name) {
  static const std::pair<std::string_view, dtype> numpy_names[] = {
      {"uint8", dtype::u8},     {"int8", dtype::i8},       {"int16", dtype::i16},     {"int32", dtype::i32},
      {"int64", dtype::i64},    {"float16", dtype::f16},   {"bfloat16", dtype::bf16}, {"float32", dtype::f32},
      {"float64", dtype::f64},  {"bool", dtype::boolean},  {"boolean", dtype::boolean}};
  for (auto [n, t] : numpy_names)
    if (n == name) return t;
  if (auto t = dtype_from_string(name)) return *t;
  raise(errc::invalid_argument, "unknown dtype '" + std::string(name) + "'");
}

tensor_view to_view(const array_in& a) {
  if (a.ndim() > kMaxDims) raise(errc::limit_exceeded, "array of rank " + std::to_string(a.ndim()) + " > 8");
  shape s, st;
  for (std::size_t i = 0; i < a.ndim(); ++i) {
    s.push_back(static_cast<std::int64_t>(a.shape(i)));
    st.push_back(a.stride(i));
  }
  return tensor_view(const_cast<void*>(a.data()), to_dtype(a.dtype()), s, st, device::cpu());
}

tensor to_tensor(const array_in& a) {
  const tensor_view v = to_view(a);
  auto* keep = new array_in(a);
  std::shared_ptr<const void> owner(keep, [](const void* p) {
    if (!Py_IsInitialized() || python_finalizing()) return;
    nb::gil_scoped_acquire gil;
    delete static_cast<const array_in*>(p);
  });
  return tensor::wrap(std::move(owner), v);
}

nb::bytes to_bytes(bytes_view b) { return nb::bytes(reinterpret_cast<const char*>(b.data()), b.size()); }

void register_arrays(nb::module_& m) {
  if (_import_array() < 0) throw nb::python_error();
  nb::class_<decode_limits>(m, "DecodeLimits",
                            "Upper bounds every decoder checks before it allocates (jitembed::decode_limits).")
      .def(nb::init<>())
      .def_rw("max_record_bytes", &decode_limits::max_record_bytes)
      .def_rw("max_fields", &decode_limits::max_fields)
      .def_rw("max_dims", &decode_limits::max_dims)
      .def_rw("max_elements", &decode_limits::max_elements)
      .def_rw("max_decoded_bytes", &decode_limits::max_decoded_bytes)
      .def_rw("max_image_pixels", &decode_limits::max_image_pixels)
      .def_rw("max_video_frames", &decode_limits::max_video_frames)
      .def_rw("max_zstd_window_log", &decode_limits::max_zstd_window_log)
      .def_rw("max_name_bytes", &decode_limits::max_name_bytes);

  m.def(
      "_address",
      [](nb::handle o) -> std::uintptr_t {
        auto b = get_buffer(o);
        return reinterpret_cast<std::uintptr_t>(b->view.buf);
      },
      nb::arg("obj"), "The address of the first byte of a bytes-like object (tests check zero-copy with it).");
  m.def(
      "xxh3_128",
      [](nb::handle o) {
        auto b = get_buffer(o);
        return xxh3_128(b->bytes()).to_hex();
      },
      nb::arg("data"), "XXH3-128 of the bytes as 32 hex digits, high word first (what jitembed-inspect prints).");
  m.def(
      "xxh3_64",
      [](nb::handle o) {
        auto b = get_buffer(o);
        return xxh3_64(b->bytes());
      },
      nb::arg("data"), "XXH3-64 of the bytes (the sample format's payload checksum).");
}

}  // namespace jitembed::python
