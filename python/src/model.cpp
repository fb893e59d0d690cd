// Binding of Python encoders: jitembed._Model (the base of jitembed.Model, python/jitembed/_model.py) is a
// Python callable served as a models::model by jitembed.Server: HTTP, admission, preprocessing (the model
// repository's built-in specs), batching and cache identity stay in C++; the callable gets one batch as a
// torch tensor through DLPack (numpy without torch), holding the GIL only for the call.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "jitembed/core/detail/capture.hpp"
#include "jitembed/core/tensor_stack.hpp"
#include "jitembed/models/any_model.hpp"
#include "jitembed/models/preprocess.hpp"
#include "jitembed/models/preprocess_function.hpp"
#include "model.hpp"

namespace jitembed::python {

namespace {

std::string dims_text(dtype t, std::span<const std::int64_t> dims) {
  std::string s = std::string(to_string(t)) + " [";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// What the served model shares between its copies (any_model copies the handle, not the callable).
struct callable_state {
  std::string name, fingerprint;
  models::modality modality = models::modality::image;
  std::vector<models::tensor_meta> inputs, outputs;
  std::size_t max_batch_size = 1;
  jitembed::device dev = device::cpu();
  std::string torch_device;  // "" (CPU) or the torch device string the batch is moved to before the call
  models::preprocess_function preprocess;
  bool pass_torch = true;
  PyObject* fn = nullptr;             // a strong reference, dropped under the GIL
  PyObject* preprocess_fn = nullptr;  // the same for a Python preprocessing callable (preprocess.run calls it)

  callable_state() = default;
  callable_state(const callable_state&) = delete;
  callable_state& operator=(const callable_state&) = delete;
  ~callable_state() {
    if (!fn || !Py_IsInitialized() || python_finalizing()) return;  // at exit the interpreter frees everything
    nb::gil_scoped_acquire gil;
    Py_DECREF(fn);
    Py_XDECREF(preprocess_fn);
  }
};

// The output `v` of the callable (a torch tensor on any device, a numpy array, anything numpy accepts) as a
// C-contiguous CPU array: GPU tensors are copied to the host here, once.
nb::object host_array(nb::handle v) {
  if (nb::hasattr(v, "detach") && nb::hasattr(v, "device")) {  // torch.Tensor
    nb::object t = v.attr("detach")();
    if (nb::cast<std::string>(t.attr("device").attr("type")) != "cpu") t = t.attr("cpu")();
    return t.attr("contiguous")();
  }
  return nb::module_::import_("numpy").attr("ascontiguousarray")(v);
}

// "Type: message" of the Python exception being handled (the type alone when its __str__ fails).
std::string exception_text(nb::python_error& e) {
  std::string type = "Exception", message;
  try {
    type = nb::cast<std::string>(e.type().attr("__name__"));
    message = nb::cast<std::string>(nb::str(e.value()));
  } catch (...) {  // a broken __str__: the type alone
    PyErr_Clear();
  }
  return message.empty() ? type : type + ": " + message;
}

// A Python preprocessing callable as a models::preprocess_function: one raw field (bytes; str for text models)
// to the model's one input item, run on the server's preprocessing threads with the GIL taken for the call only.
// Its cache key is the identity the user gives (name, version): Python code cannot be hashed reliably, and a
// new version must give new cache keys.
models::preprocess_function python_preprocess(PyObject* fn, std::string who, models::modality modality, models::tensor_meta in,
                                              const std::string& name, const std::string& version) {
  models::preprocess_function f;
  std::string dims;
  for (auto d : in.shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
  f.key = "python-preprocess:" + name + "@" + version + ";" + std::string(models::to_string(modality)) + ";" +
          std::string(to_string(in.type)) + "[" + dims + "]";
  f.run = [fn, who = std::move(who), modality, in = std::move(in)](bytes_view raw, const decode_limits&) -> result<tensor> {
    if (!Py_IsInitialized() || python_finalizing()) return fail(errc::unavailable, who + ": the Python interpreter is shutting down");
    nb::gil_scoped_acquire gil;
    try {
      nb::object arg;
      if (modality == models::modality::text) {
        PyObject* u = PyUnicode_DecodeUTF8(reinterpret_cast<const char*>(raw.data()), static_cast<Py_ssize_t>(raw.size()), "strict");
        if (!u) {
          PyErr_Clear();
          return fail(errc::invalid_utf8, who + ": the text is not valid UTF-8");
        }
        arg = nb::steal(u);
      } else {
        arg = nb::bytes(reinterpret_cast<const char*>(raw.data()), raw.size());
      }
      nb::object out;
      try {
        out = nb::borrow(fn)(arg);
      } catch (nb::python_error& e) {
        return fail(errc::invalid_argument, who + ": preprocess raised " + exception_text(e));
      }
      const std::string expected = "input '" + in.name + "' is " + dims_text(in.type, in.shape);
      nb::object host;
      array_in a;
      try {
        host = host_array(out);
      } catch (nb::python_error& e) {
        PyErr_Clear();
      }
      if (!host.is_valid() || !nb::try_cast(host, a))
        return fail(errc::invalid_argument, who + ": preprocess returned a " + std::string(nb::type_name(out.type()).c_str()) +
                                                ", not an array (" + expected + ")");
      std::vector<std::int64_t> got;
      for (std::size_t d = 0; d < a.ndim(); ++d) got.push_back(static_cast<std::int64_t>(a.shape(d)));
      const auto got_type = core_detail::capture("preprocess", [&] { return to_dtype(a.dtype()); });
      if (!got_type || *got_type != in.type)
        return fail(errc::dtype_mismatch, who + ": preprocess returned " +
                                              (got_type ? dims_text(*got_type, got) : std::string("an array of an unsupported dtype")) +
                                              ", " + expected);
      bool shape_ok = got.size() == in.shape.size();
      for (std::size_t d = 0; shape_ok && d < got.size(); ++d) shape_ok = in.shape[d] < 0 || in.shape[d] == got[d];
      if (!shape_ok) return fail(errc::invalid_argument, who + ": preprocess returned " + dims_text(*got_type, got) + ", " + expected);
      // Copied into C++ storage: the item is released by the server's threads without taking the GIL.
      return tensor::copy_of(bytes_view(static_cast<const std::byte*>(a.data()), a.nbytes()), *got_type,
                             shape(std::span<const std::int64_t>(got)));
    } catch (nb::python_error& e) {
      return fail(errc::invalid_argument, who + ": preprocess: " + exception_text(e));
    } catch (const jitembed::error& e) {
      return e.info();
    } catch (const std::exception& e) {
      return fail(errc::internal, who + ": preprocess: " + e.what());
    }
  };
  return f;
}

class python_callable_model {
 public:
  explicit python_callable_model(std::shared_ptr<const callable_state> s) : s_(std::move(s)) {}

  std::string_view name() const noexcept { return s_->name; }
  std::string_view version() const noexcept { return s_->fingerprint; }
  std::string_view preprocess_key() const noexcept { return s_->preprocess.key; }
  models::modality input_modality() const noexcept { return s_->modality; }
  std::span<const models::tensor_meta> inputs() const noexcept { return s_->inputs; }
  std::span<const models::tensor_meta> outputs() const noexcept { return s_->outputs; }
  std::size_t max_batch_size() const noexcept { return s_->max_batch_size; }
  jitembed::device device() const noexcept { return s_->dev; }
  result<tensor> preprocess(bytes_view raw, const decode_limits& limits) const {
    if (!s_->preprocess.run)
      return fail(errc::invalid_argument, "model '" + s_->name + "' has no preprocessing: send its input '" + s_->inputs.front().name + "'");
    return s_->preprocess.run(raw, limits);
  }
  bool has_preprocess() const noexcept { return static_cast<bool>(s_->preprocess.run); }

  result<std::vector<named_tensors>> run(std::span<const tensor> batch) const {
    const std::string who = "model '" + s_->name + "'";
    if (batch.empty()) return std::vector<named_tensors>{};
    if (batch.size() > s_->max_batch_size)
      return fail(errc::limit_exceeded, who + ": batch of " + std::to_string(batch.size()) + " > max_batch_size " +
                                            std::to_string(s_->max_batch_size));
    const auto& in = s_->inputs.front();
    std::vector<const tensor*> rows;
    rows.reserve(batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const tensor& t = batch[i];
      if (t.dtype() != in.type)
        return fail(errc::dtype_mismatch, who + ": item " + std::to_string(i) + " is " + std::string(to_string(t.dtype())) +
                                              ", input '" + in.name + "' is " + std::string(to_string(in.type)));
      bool shape_ok = t.rank() == in.shape.size();
      for (std::size_t d = 0; shape_ok && d < in.shape.size(); ++d) shape_ok = in.shape[d] < 0 || in.shape[d] == t.shape()[d];
      if (!shape_ok)
        return fail(errc::invalid_argument, who + ": item " + std::to_string(i) + " is " + dims_text(t.dtype(), t.shape().span()) +
                                                ", input '" + in.name + "' is " + dims_text(in.type, in.shape));
      rows.push_back(&t);
    }
    JITEMBED_ASSIGN_OR_RETURN(tensor stacked, stack(rows));  // the batch's one copy
    if (!Py_IsInitialized() || python_finalizing()) return fail(errc::unavailable, who + ": the Python interpreter is shutting down");
    nb::gil_scoped_acquire gil;
    try {
      nb::object arg = s_->pass_torch ? to_torch(stacked) : to_numpy(stacked, /*read_only=*/false);
      if (s_->pass_torch && !s_->torch_device.empty()) arg = arg.attr("to")(s_->torch_device);
      nb::object out = nb::borrow(s_->fn)(arg);
      return outputs_of(out, batch.size(), who);
    } catch (nb::python_error& e) {
      return fail(errc::internal, who + ": the callable raised " + exception_text(e));
    } catch (const jitembed::error& e) {
      return e.info();
    } catch (const std::exception& e) {
      return fail(errc::internal, who + ": " + e.what());
    }
  }

 private:
  // One named_tensors per item from what the callable returned: one array (one output), a tuple / list
  // in outputs() order, or a dict by output name. Shape [batch, declared dims...] and the declared dtype.
  result<std::vector<named_tensors>> outputs_of(nb::handle out, std::size_t n, const std::string& who) const {
    const auto& metas = s_->outputs;
    std::vector<nb::object> values;
    if (nb::isinstance<nb::dict>(out)) {
      nb::dict d = nb::borrow<nb::dict>(out);
      for (const auto& m : metas) {
        if (!d.contains(m.name.c_str())) return fail(errc::internal, who + ": the callable's dict has no output '" + m.name + "'");
        values.push_back(nb::borrow(d[m.name.c_str()]));
      }
      if (d.size() != metas.size())
        return fail(errc::internal, who + ": the callable returned " + std::to_string(d.size()) + " outputs, declared " +
                                        std::to_string(metas.size()));
    } else if (nb::isinstance<nb::tuple>(out) || nb::isinstance<nb::list>(out)) {
      for (nb::handle h : out) values.push_back(nb::borrow(h));
      if (values.size() != metas.size())
        return fail(errc::internal, who + ": the callable returned " + std::to_string(values.size()) + " outputs, declared " +
                                        std::to_string(metas.size()));
    } else {
      if (metas.size() != 1)
        return fail(errc::internal, who + ": the callable returned one output, declared " + std::to_string(metas.size()) +
                                        " (return a tuple or a dict)");
      values.push_back(nb::borrow(out));
    }
    std::vector<named_tensors> rows(n);
    for (auto& r : rows) r.reserve(metas.size());
    for (std::size_t k = 0; k < metas.size(); ++k) {
      const auto& m = metas[k];
      nb::object host = host_array(values[k]);
      array_in a;
      if (!nb::try_cast(host, a))
        return fail(errc::internal, who + ": output '" + m.name + "' is a " + std::string(nb::type_name(values[k].type()).c_str()) +
                                        ", not an array");
      std::vector<std::int64_t> got;
      for (std::size_t d = 0; d < a.ndim(); ++d) got.push_back(static_cast<std::int64_t>(a.shape(d)));
      const dtype got_type = to_dtype(a.dtype());
      std::vector<std::int64_t> want{static_cast<std::int64_t>(n)};
      want.insert(want.end(), m.shape.begin(), m.shape.end());
      bool ok = got_type == m.type && got.size() == want.size();
      for (std::size_t d = 0; ok && d < want.size(); ++d) ok = want[d] < 0 || want[d] == got[d];
      if (!ok)
        return fail(errc::internal, who + ": output '" + m.name + "' is " + dims_text(got_type, got) + ", declared " +
                                        dims_text(m.type, want) + " (batch " + std::to_string(n) + ")");
      shape item(std::span<const std::int64_t>(got).subspan(1));
      // Copied into C++ storage (outputs are small next to inputs: a latent row is 16 KiB) rather than shared
      // with the Python array (to_tensor): the rows are then released by the pipeline's threads without
      // taking the GIL, which the next batch's call holds.
      tensor all = tensor::copy_of(bytes_view(static_cast<const std::byte*>(a.data()), a.nbytes()), got_type,
                                   shape(std::span<const std::int64_t>(got)));
      const std::size_t row_bytes = n ? a.nbytes() / n : 0;
      for (std::size_t i = 0; i < n; ++i)
        rows[i].emplace_back(m.name, tensor::wrap(all.owner(), tensor_view(static_cast<std::byte*>(all.data()) + i * row_bytes,
                                                                          got_type, item)));
    }
    return rows;
  }

  std::shared_ptr<const callable_state> s_;
};

static_assert(models::model<python_callable_model>);

std::shared_ptr<const callable_state> state_of(const py_model_handle& h) {
  if (!h.state) raise(errc::invalid_argument, "jitembed.Model: cleared (collected)");
  return std::static_pointer_cast<const callable_state>(h.state);
}

// Garbage-collector support: the handle holds a strong reference to the callable (inside its state).
int model_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(nb::handle(self))) return 0;
  const auto* h = nb::inst_ptr<py_model_handle>(nb::handle(self));
  if (h->state && h->state.use_count() == 1) {  // served copies: not ours to report
    if (h->fn) Py_VISIT(h->fn);
    if (h->preprocess_fn) Py_VISIT(h->preprocess_fn);
  }
  return 0;
}

int model_clear(PyObject* self) {
  if (!nb::inst_ready(nb::handle(self))) return 0;
  auto* h = nb::inst_ptr<py_model_handle>(nb::handle(self));
  if (h->state && h->state.use_count() == 1) {
    h->fn = nullptr;
    h->preprocess_fn = nullptr;
    h->state.reset();  // drops the callable (callable_state's destructor, under the GIL the collector holds)
  }
  return 0;
}

PyType_Slot model_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(model_traverse)},
                             {Py_tp_clear, reinterpret_cast<void*>(model_clear)},
                             {0, nullptr}};

models::tensor_meta meta_of(const std::tuple<std::string, std::string, std::vector<std::int64_t>>& t) {
  return {std::get<0>(t), dtype_from_name(std::get<1>(t)), std::get<2>(t)};
}

}  // namespace

models::any_model py_model_handle::served() const { return models::any_model(python_callable_model(state_of(*this))); }

void register_model(nb::module_& m) {
  nb::class_<py_model_handle>(m, "_Model", nb::type_slots(model_slots),
                              "The C++ half of jitembed.Model (python/jitembed/_model.py): use jitembed.Model.")
      .def(
          "__init__",
          [](py_model_handle* self, nb::object fn, std::string name, std::string version, std::string fingerprint,
             std::vector<std::tuple<std::string, std::string, std::vector<std::int64_t>>> inputs,
             std::vector<std::tuple<std::string, std::string, std::vector<std::int64_t>>> outputs, std::size_t max_batch_size,
             std::map<std::string, std::string> preprocess, std::string base_dir, std::string device, bool pass_torch,
             std::size_t instances, std::int64_t max_queue_delay_us, std::vector<std::size_t> preferred_batch_sizes,
             nb::object preprocess_fn, std::string preprocess_name, std::string preprocess_version, std::string modality) {
            const std::string who = "jitembed.Model '" + name + "'";
            if (!PyCallable_Check(fn.ptr())) raise(errc::invalid_argument, who + ": fn is not callable");
            if (name.empty()) raise(errc::invalid_argument, "jitembed.Model: name is empty");
            if (inputs.size() != 1) raise(errc::invalid_argument, who + ": exactly one input, got " + std::to_string(inputs.size()));
            if (outputs.empty()) raise(errc::invalid_argument, who + ": no outputs declared");
            if (max_batch_size < 1) raise(errc::invalid_argument, who + ": max_batch_size must be >= 1");
            if (instances < 1) raise(errc::invalid_argument, who + ": instances must be >= 1");
            auto s = std::make_shared<callable_state>();
            s->name = name;
            s->fingerprint = std::move(fingerprint);
            s->inputs.push_back(meta_of(inputs.front()));
            for (const auto& o : outputs) {
              auto meta = meta_of(o);
              for (const auto& prev : s->outputs)
                if (prev.name == meta.name) raise(errc::invalid_argument, who + ": output '" + meta.name + "' declared twice");
              s->outputs.push_back(std::move(meta));
            }
            s->max_batch_size = max_batch_size;
            s->pass_torch = pass_torch;
            if (device.empty() || device == "cpu") {
              s->dev = device::cpu();
            } else if (device.starts_with("cuda")) {
              int ordinal = 0;
              if (device.size() > 5 && device[4] == ':') ordinal = std::stoi(device.substr(5));
              s->dev = device::cuda(ordinal);
              s->torch_device = device;
            } else {
              raise(errc::invalid_argument, who + ": device '" + device + "' is not cpu or cuda[:N]");
            }
            const auto& in = s->inputs.front();
            if (!preprocess_fn.is_none()) {  // a Python callable instead of the built-in preprocessing
              if (!PyCallable_Check(preprocess_fn.ptr())) raise(errc::invalid_argument, who + ": preprocess is not callable");
              if (!preprocess.empty())
                raise(errc::invalid_argument, who + ": preprocess is a callable: preprocessing parameters do not apply");
              if (preprocess_name.empty() || preprocess_version.empty())
                raise(errc::invalid_argument, who + ": a preprocess callable needs preprocess_name and preprocess_version "
                                                    "(its identity in the cache keys)");
              if (modality == "image")
                s->modality = models::modality::image;
              else if (modality == "video")
                s->modality = models::modality::video;
              else if (modality == "text")
                s->modality = models::modality::text;
              else
                raise(errc::invalid_argument, who + ": modality '" + modality + "' is not image, video or text");
              s->preprocess = python_preprocess(preprocess_fn.ptr(), who, s->modality, in, preprocess_name, preprocess_version);
              s->preprocess_fn = preprocess_fn.inc_ref().ptr();
            } else {
              auto spec = unwrap(models::preprocess_spec::parse(preprocess, in.type, in.shape, std::filesystem::path(base_dir), who));
              // Without preprocess={'modality': ...} the model is served through its declared input tensor only.
              if (!spec.active && preprocess.count("modality"))
                raise(errc::invalid_argument, who + ": input '" + in.name + "' " + dims_text(in.type, in.shape) +
                                                  " gets no built-in preprocessing: image f32 [3, H, W], video f32 [3, T, H, W] or "
                                                  "text i64 [2, L] with preprocess={'modality': 'text', 'tokenizer': ...}, "
                                                  "or give a preprocess callable");
              s->modality = spec.input_modality;
              if (spec.active) s->preprocess = unwrap(models::make_preprocess_function(spec, who));
              else s->preprocess.key = preprocess_params{}.set("preprocess", "none").str();
            }
            s->fn = fn.inc_ref().ptr();
            new (self) py_model_handle{};
            self->fn = s->fn;
            self->preprocess_fn = s->preprocess_fn;
            self->state = std::move(s);
            self->config.name = std::move(name);
            self->config.version = std::move(version);
            self->config.instances = instances;
            self->config.max_batch_size = max_batch_size;
            self->config.max_queue_delay_us = max_queue_delay_us;
            self->config.preferred_batch_sizes = std::move(preferred_batch_sizes);
          },
          nb::arg("fn"), nb::arg("name"), nb::arg("version"), nb::arg("fingerprint"), nb::arg("inputs"), nb::arg("outputs"),
          nb::arg("max_batch_size"), nb::arg("preprocess"), nb::arg("base_dir"), nb::arg("device"), nb::arg("pass_torch"),
          nb::arg("instances"), nb::arg("max_queue_delay_us"), nb::arg("preferred_batch_sizes"),
          nb::arg("preprocess_fn").none() = nb::none(), nb::arg("preprocess_name") = "", nb::arg("preprocess_version") = "",
          nb::arg("modality") = "")
      .def_prop_ro("name", [](const py_model_handle& h) { return h.config.name; })
      .def_prop_ro("version", [](const py_model_handle& h) { return h.config.version; }, "The served version label (URLs, metadata).")
      .def_prop_ro("fingerprint", [](const py_model_handle& h) { return state_of(h)->fingerprint; },
                   "The cache identity's model fingerprint: the user's version and the weights' hash.")
      .def_prop_ro("preprocess_key", [](const py_model_handle& h) { return state_of(h)->preprocess.key; })
      .def_prop_ro("modality", [](const py_model_handle& h) { return std::string(models::to_string(state_of(h)->modality)); })
      .def_prop_ro("instances", [](const py_model_handle& h) { return h.config.instances; })
      .def_prop_ro("max_batch_size", [](const py_model_handle& h) { return state_of(h)->max_batch_size; })
      .def(
          "preprocess",
          [](const py_model_handle& h, nb::handle raw, std::optional<decode_limits> limits) {
            const models::any_model model = h.served();
            auto buf = get_buffer(raw);
            result<tensor> t = fail(errc::internal, "");
            {
              nb::gil_scoped_release nogil;
              t = model.preprocess(buf->bytes(), limits_or_default(limits));
            }
            return to_numpy(unwrap(std::move(t)), /*read_only=*/false);
          },
          nb::arg("raw"), nb::arg("limits") = nb::none(),
          "The preprocessing of one raw field (JPEG, video container, UTF-8 caption) as the server runs it: the "
          "built-in one, or the model's preprocess callable.")
      .def(
          "__call__",
          [](const py_model_handle& h, const std::vector<nb::object>& raws) {
            const models::any_model model = h.served();
            std::vector<std::shared_ptr<py_buffer>> bufs;
            for (const auto& r : raws) bufs.push_back(get_buffer(r));
            result<std::vector<named_tensors>> out = fail(errc::internal, "");
            {
              nb::gil_scoped_release nogil;
              std::vector<tensor> items;
              for (const auto& b : bufs) {
                auto t = model.preprocess(b->bytes(), decode_limits{});
                if (!t) {
                  out = t.error();
                  break;
                }
                items.push_back(std::move(*t));
              }
              if (items.size() == bufs.size()) out = model.run(items);
            }
            auto rows = unwrap(std::move(out));
            nb::dict d;
            for (const auto& meta : model.outputs()) {
              std::vector<const tensor*> col;
              for (const auto& r : rows) col.push_back(find_tensor(r, meta.name));
              d[meta.name.c_str()] = to_numpy(unwrap(stack(col)), /*read_only=*/false);
            }
            return d;
          },
          nb::arg("raws"),
          "Runs raw fields through the preprocessing and the callable in this process, exactly as the server does "
          "(one batch): {output: array [n, ...]}.");
}

}  // namespace jitembed::python
