// One Python exception class per errc, each subclassing jitembed.Error and the matching builtin; a thrown
// jitembed::error (and every failed result<T>, which the bindings unwrap into one) becomes its class.
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include <array>
#include <string>

#include "common.hpp"

namespace jitembed::python {
namespace {

struct errc_class {
  errc code;
  const char* name;  // Python class name
  const char* base;  // builtin base (Python expression)
};

// The table docs/python.md documents. Bad input: ValueError (TypeError for a wrong dtype, UnicodeError for
// bad UTF-8); not found: KeyError; the service's trouble: the builtin a Python caller already handles.
constexpr std::array<errc_class, 23> kClasses = {{
    {errc::invalid_argument, "InvalidArgumentError", "ValueError"},
    {errc::buffer_too_small, "BufferTooSmallError", "ValueError"},
    {errc::truncated, "TruncatedError", "ValueError"},
    {errc::bad_magic, "BadMagicError", "ValueError"},
    {errc::unsupported_version, "UnsupportedVersionError", "ValueError"},
    {errc::checksum_mismatch, "ChecksumMismatchError", "ValueError"},
    {errc::corrupt_data, "CorruptDataError", "ValueError"},
    {errc::limit_exceeded, "LimitExceededError", "ValueError"},
    {errc::shape_overflow, "ShapeOverflowError", "ValueError"},
    {errc::unsupported_format, "UnsupportedFormatError", "ValueError"},
    {errc::unsupported_codec, "UnsupportedCodecError", "ValueError"},
    {errc::decode_failed, "DecodeFailedError", "ValueError"},
    {errc::encode_failed, "EncodeFailedError", "RuntimeError"},
    {errc::invalid_utf8, "InvalidUtf8Error", "UnicodeError"},
    {errc::dtype_mismatch, "DtypeMismatchError", "TypeError"},
    {errc::io_error, "IoError", "OSError"},
    {errc::not_found, "NotFoundError", "KeyError"},
    {errc::internal, "InternalError", "RuntimeError"},
    {errc::comm_failed, "CommFailedError", "ConnectionError"},
    {errc::timeout, "TimeoutError", "_builtins.TimeoutError"},
    {errc::unavailable, "UnavailableError", "ConnectionError"},
    {errc::cancelled, "CancelledError", "_futures.CancelledError"},
    {errc::resource_exhausted, "ResourceExhaustedError", "MemoryError"},
}};

std::array<PyObject*, 24> g_classes{};  // indexed by errc value; strong references held by the module too

}  // namespace

nb::object make_exception(const error_info& e) {
  const auto i = static_cast<std::size_t>(e.code);
  PyObject* cls = i < g_classes.size() && g_classes[i] ? g_classes[i] : g_classes[static_cast<std::size_t>(errc::internal)];
  return nb::borrow(cls)(nb::str(e.message.c_str()));
}

void register_errors(nb::module_& m) {
  std::string src =
      "import builtins as _builtins\n"
      "import concurrent.futures as _futures\n"
      "class Error(Exception):\n"
      "    \"\"\"Base of every jitembed error. The class says which errc failed (.errc: its name, .code: its\n"
      "    value); .message is the C++ message, str() is '<errc>: <message>' like jitembed::error::what().\"\"\"\n"
      "    errc = 'internal'\n"
      "    code = 18\n"
      "    def __init__(self, message=''):\n"
      "        super().__init__(message)\n"
      "        self.message = message\n"
      "    def __str__(self):\n"
      "        return f'{self.errc}: {self.message}'\n"
      "    def __reduce__(self):\n"
      "        return (type(self), (self.message,))\n"
      "_errc_classes = {}\n";
  for (const auto& c : kClasses) {
    const std::string name(to_string(c.code));
    src += "class " + std::string(c.name) + "(Error, " + c.base + "):\n";
    src += "    \"\"\"errc::" + name + "\"\"\"\n";
    src += "    errc = '" + name + "'\n";
    src += "    code = " + std::to_string(static_cast<int>(c.code)) + "\n";
    src += "_errc_classes['" + name + "'] = " + c.name + "\n";
  }
  src += "del _builtins\n";
  nb::dict globals = nb::borrow<nb::dict>(PyModule_GetDict(m.ptr()));
  PyObject* r = PyRun_String(src.c_str(), Py_file_input, globals.ptr(), globals.ptr());
  if (!r) throw nb::python_error();
  Py_DECREF(r);
  for (const auto& c : kClasses) {
    PyObject* cls = PyDict_GetItemString(globals.ptr(), c.name);
    if (!cls) throw std::runtime_error(std::string("jitembed: exception class ") + c.name + " missing");
    Py_INCREF(cls);  // kept for the life of the process (the translator may run at any time)
    g_classes[static_cast<std::size_t>(c.code)] = cls;
  }

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const jitembed::error& e) {
      const auto i = static_cast<std::size_t>(e.code());
      PyObject* cls = i < g_classes.size() && g_classes[i] ? g_classes[i] : g_classes[static_cast<std::size_t>(errc::internal)];
      PyErr_SetString(cls, e.message().c_str());
    }
  });

  m.def(
      "error_class",
      [](std::string_view errc_name) -> nb::object {
        auto c = errc_from_string(errc_name);
        if (!c || *c == errc::ok) raise(errc::not_found, "no errc named '" + std::string(errc_name) + "'");
        return nb::borrow(g_classes[static_cast<std::size_t>(*c)]);
      },
      nb::arg("errc"), "The exception class of an errc name (e.g. 'not_found' -> NotFoundError).");
  m.def("is_retryable", [](std::string_view errc_name) {
    auto c = errc_from_string(errc_name);
    if (!c) raise(errc::not_found, "no errc named '" + std::string(errc_name) + "'");
    return is_retryable(*c);
  }, nb::arg("errc"), "Whether a failure with this errc may succeed when retried (jitembed::is_retryable).");
  m.def("_raise", [](std::string_view errc_name, std::string message) {
    auto c = errc_from_string(errc_name);
    if (!c || *c == errc::ok) raise(errc::invalid_argument, "no errc named '" + std::string(errc_name) + "'");
    throw jitembed::error(*c, std::move(message));
  }, nb::arg("errc"), nb::arg("message"), "Throws jitembed::error(errc, message) from C++ (tests the translation).");
}

}  // namespace jitembed::python
