// Bindings of the JIT client (Client: embed() blocks, embed_async() returns a concurrent.futures.Future) and
// the prefetching loader (Loader: an iterator of step dicts). Blocking calls release the GIL; completion
// callbacks run on the client's threads and take the GIL only to complete the Python future.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "caches.hpp"
#include "common.hpp"
#include "format_types.hpp"
#include "jitembed/client/endpoints.hpp"
#include "jitembed/client/jit_client.hpp"
#include "jitembed/client/options.hpp"
#include "jitembed/client/request.hpp"
#include "jitembed/client/stats.hpp"
#include "jitembed/loader.hpp"
#include "jitembed/net/kserve/datatype.hpp"
#include "jitembed/models/factory.hpp"
#include "jitembed/models/reference_factory.hpp"
#include "jitembed/server/model_spec.hpp"

namespace jitembed::python {

using namespace jitembed::client;
using namespace jitembed::loader;

namespace {

struct py_client {
  std::optional<jit_client> c;
  jit_client& get() {
    if (!c) raise(errc::cancelled, "client: closed");
    return *c;
  }
  void close() {
    if (!c) return;
    nb::gil_scoped_release nogil;  // close() joins threads whose callbacks may wait for the GIL
    c->close();
  }
  ~py_client() {
    if (!c) return;
    if (Py_IsInitialized() && !python_finalizing() && PyGILState_Check()) {
      nb::gil_scoped_release nogil;
      c.reset();
    } else {
      c.reset();
    }
  }
};

// A local model from a "NAME[:k=v,...]" spec: a reference model (params work, text_dim, ...), slowed down
// as sleep_us / sleep_us_per_row ask.
models::any_model local_model(std::string_view spec) {
  const server::model_config cfg = unwrap(server::parse_model_spec(spec));
  auto m = unwrap(models::reference_factory(cfg.name, cfg.params));
  return unwrap(models::with_latency_params(std::move(m), cfg.params));
}

struct py_embed_result {
  std::string model_name, model_version, endpoint;
  int attempts = 1;
  nb::dict outputs;
  nb::list row_errors;  // [] or one (errc, message) / None per row
};

py_embed_result convert(embed_result&& r) {
  py_embed_result out;
  out.model_name = std::move(r.model_name);
  out.model_version = std::move(r.model_version);
  out.endpoint = std::move(r.endpoint);
  out.attempts = r.attempts;
  for (auto& [name, t] : r.outputs) out.outputs[nb::str(name.c_str())] = to_numpy(t, /*read_only=*/true);
  for (const auto& e : r.row_errors) {
    if (e.code == errc::ok)
      out.row_errors.append(nb::none());
    else
      out.row_errors.append(nb::make_tuple(std::string(to_string(e.code)), e.message));
  }
  return out;
}

// The rows of a request (bytes-like objects or RecordViews), held while embed() serializes them.
struct request_rows {
  std::vector<std::shared_ptr<py_buffer>> bufs;
  std::vector<format::record_view> records;
};

// A numpy array of signed integers or floats with at least 2 dims ([N, L] token ids): its rows as typed rows
// (datatype and row_shape from the array, little-endian, C order); nullopt for anything else (rows of bytes).
std::optional<std::string> typed_rows(nb::handle rows, embed_request& req, request_rows& hold) {
  if (!nb::hasattr(rows, "dtype") || !nb::hasattr(rows, "ndim") || nb::cast<int>(rows.attr("ndim")) < 2)
    return std::nullopt;
  const nb::object dt = rows.attr("dtype");
  const std::string kind = nb::cast<std::string>(dt.attr("kind"));
  const auto size = nb::cast<std::size_t>(dt.attr("itemsize"));
  static const std::map<std::pair<std::string, std::size_t>, std::string> types = {
      {{"i", 1}, "INT8"}, {{"i", 2}, "INT16"}, {{"i", 4}, "INT32"}, {{"i", 8}, "INT64"},
      {{"f", 2}, "FP16"}, {{"f", 4}, "FP32"},  {{"f", 8}, "FP64"}};
  const auto it = types.find({kind, size});
  if (it == types.end()) return std::nullopt;  // unsigned / bool arrays stay rows of bytes
  nb::object np = nb::module_::import_("numpy");
  nb::object a = np.attr("ascontiguousarray")(rows, nb::arg("dtype") = dt.attr("newbyteorder")("<"));
  hold.bufs.push_back(get_buffer(a));
  const bytes_view all = hold.bufs.back()->bytes();
  const auto shape = nb::cast<std::vector<std::int64_t>>(a.attr("shape"));
  req.datatype = it->second;
  req.row_shape.assign(shape.begin() + 1, shape.end());
  const auto n = static_cast<std::size_t>(shape[0]);
  const std::size_t row = n ? all.size() / n : 0;
  for (std::size_t i = 0; i < n; ++i) req.rows.push_back(all.subspan(i * row, row));
  return kind;
}

embed_request make_request(std::string model, nb::handle rows, std::optional<std::string> input, std::string version,
                           std::optional<std::vector<std::string>> outputs, std::optional<double> timeout_ms,
                           request_rows& hold) {
  embed_request req;
  req.model = std::move(model);
  req.version = std::move(version);
  if (outputs) req.outputs = std::move(*outputs);
  if (timeout_ms) req.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(*timeout_ms));
  if (const auto kind = typed_rows(rows, req, hold)) {
    if (!input && *kind != "i")
      raise(errc::invalid_argument,
            "embed: a " + req.datatype + " array needs input= (the model's input name; integer ids default to 'input_ids')");
    req.input = input ? std::move(*input) : std::string("input_ids");
    return req;
  }
  req.input = input ? std::move(*input) : std::string("sample");
  for (const auto& r : nb::cast<std::vector<nb::object>>(rows)) {
    if (nb::isinstance<py_record>(r)) {
      hold.records.push_back(nb::cast<const py_record&>(r).rec);
      req.rows.push_back(hold.records.back().bytes());
    } else {
      hold.bufs.push_back(get_buffer(r));
      req.rows.push_back(hold.bufs.back()->bytes());
    }
  }
  return req;
}

nb::dict client_stats_dict(const client_stats& s) {
  nb::dict d;
  d["requests"] = s.requests;
  d["completed"] = s.completed;
  d["failed"] = s.failed;
  d["cancelled"] = s.cancelled;
  d["in_flight"] = s.in_flight;
  d["attempts"] = s.attempts;
  d["retries"] = s.retries;
  d["hedges"] = s.hedges;
  d["coalesced"] = s.coalesced;
  d["latency_p50_ms"] = s.latency_p50_ms;
  d["latency_p99_ms"] = s.latency_p99_ms;
  nb::list eps;
  for (const auto& e : s.endpoints) {
    nb::dict x;
    x["url"] = e.url;
    x["requests"] = e.requests;
    x["successes"] = e.successes;
    x["failures"] = e.failures;
    x["outstanding"] = e.outstanding;
    x["draining"] = e.draining;
    x["circuit_open"] = e.circuit_open;
    eps.append(x);
  }
  d["endpoints"] = eps;
  return d;
}

models::modality kind_of(std::string_view k) {
  if (k == "image") return models::modality::image;
  if (k == "video") return models::modality::video;
  if (k == "text") return models::modality::text;
  raise(errc::invalid_argument, "embedding kind '" + std::string(k) + "' is not image, video or text");
}

// A field's item when no sample of a step has it (a short rank's last step, every sample failed): the
// dtype and item shape of the model output it comes from (the client's metadata: the server's or the local
// model's), so that an empty step's field is a typed [0, ...] array. Extents the model leaves open (-1) are 0.
struct empty_item {
  dtype type = dtype::f32;
  shape item;
};

struct py_loader {
  nb::object client;  // the Python Client the loader borrows (kept alive, never moved)
  std::optional<jit_loader> l;
  std::vector<std::string> names;
  std::vector<embedding_spec> specs;  // in names' order
  std::map<std::string, std::optional<empty_item>> empty_items;  // asked once per field (nullopt: unknown)
  bool stack = true;
  jit_loader& get() {
    if (!l) raise(errc::cancelled, "loader: closed");
    return *l;
  }
  void close() {
    if (!l) return;
    nb::gil_scoped_release nogil;
    l->close();
  }
  ~py_loader() {
    if (!l) return;
    if (Py_IsInitialized() && !python_finalizing() && PyGILState_Check()) {
      nb::gil_scoped_release nogil;
      l.reset();
    } else {
      l.reset();
    }
  }
};

// The field's empty_item from the model's metadata, asked once (GIL released); nullopt when the client cannot
// say (no endpoint answers, the output is not declared, a datatype without a dtype).
const std::optional<empty_item>& empty_item_of(py_loader& pl, std::size_t field) {
  const std::string& name = pl.names[field];
  if (auto it = pl.empty_items.find(name); it != pl.empty_items.end()) return it->second;
  std::optional<empty_item> out;
  auto& pc = nb::cast<py_client&>(pl.client);
  if (pc.c) {
    const embedding_spec& spec = pl.specs[field];
    result<model_metadata> md = fail(errc::internal, "");
    {
      nb::gil_scoped_release nogil;
      md = pc.c->metadata(spec.model);
    }
    if (md)
      if (const served_tensor* t = md->output(spec.output); t && !t->shape.empty())
        if (auto kd = net::kserve::datatype_from_string(t->datatype))
          if (auto dt = net::kserve::to_dtype(*kd)) {
            empty_item e;
            e.type = *dt;
            for (std::size_t d = 1; d < t->shape.size(); ++d) e.item.push_back(std::max<std::int64_t>(t->shape[d], 0));
            out = std::move(e);
          }
  }
  return pl.empty_items.emplace(name, std::move(out)).first->second;
}

nb::dict batch_dict(py_loader& pl, step&& b) {
  nb::dict d;
  nb::list ids, failed;
  std::vector<std::int64_t> indices;
  std::vector<const embedded_sample*> ok;
  for (const auto& s : b.samples) {
    if (s.ok()) {
      ok.push_back(&s);
      ids.append(s.id);
      indices.push_back(static_cast<std::int64_t>(s.index));
    } else {
      nb::dict f;
      f["id"] = s.id;
      f["index"] = s.index;
      f["errc"] = std::string(to_string(s.error->code));
      f["message"] = s.error->message;
      failed.append(f);
    }
  }
  nb::dict dtypes;  // each field's element type ("bf16" fields are uint16 arrays of the same bits: numpy has no bf16)
  for (std::size_t field = 0; field < pl.names.size(); ++field) {
    const std::string& name = pl.names[field];
    // The C++ collate (loader::step::collate: one copy, the failed samples' rows left out). Per-sample
    // arrays instead when stack=False, or when collate cannot stack: a sample without the field (not_found),
    // rows of differing dtype / shape or no row at all (invalid_argument), rows of the highest rank
    // (limit_exceeded). Any other error (an impossible size) is raised.
    std::optional<tensor> stacked;
    if (pl.stack) {
      result<tensor> r = fail(errc::internal, "");
      {
        nb::gil_scoped_release nogil;
        r = b.collate(name);
      }
      if (r)
        stacked = std::move(*r);
      else if (const errc c = r.error().code;
               c != errc::not_found && c != errc::invalid_argument && c != errc::limit_exceeded)
        throw jitembed::error(std::move(r).error());
    }
    if (!stacked && pl.stack && ok.empty())  // no row at all: a typed [0, ...] array when the model's metadata says
      if (const auto& e = empty_item_of(pl, field)) {
        jitembed::shape sh{0};
        for (auto x : e->item.span()) sh.push_back(x);
        stacked = tensor::empty(sh, e->type);
      }
    if (stacked) {
      dtypes[nb::str(name.c_str())] = std::string(to_string(stacked->dtype()));
      d[nb::str(name.c_str())] = to_numpy(*stacked, false);
    } else {
      nb::list l;
      for (const auto* s : ok) {
        const tensor* t = s->find(name);
        l.append(t ? to_numpy(*t, true) : nb::none());
      }
      d[nb::str(name.c_str())] = l;
    }
  }
  for (const auto& name : pl.names)
    if (!dtypes.contains(name.c_str()))
      for (const auto* smp : ok)
        if (const tensor* t = smp->find(name)) {
          dtypes[nb::str(name.c_str())] = std::string(to_string(t->dtype()));
          break;
        }
  d["dtypes"] = dtypes;
  d["ids"] = ids;
  const tensor idx = tensor::copy_of(bytes_view(reinterpret_cast<const std::byte*>(indices.data()), indices.size() * 8),
                                     dtype::i64, shape{static_cast<std::int64_t>(indices.size())});
  d["indices"] = to_numpy(idx, false);
  d["failed"] = failed;
  d["epoch"] = b.epoch;
  d["step"] = b.index;
  return d;
}

nb::dict loader_stats_dict(const loader_stats& s) {
  nb::dict d;
  d["epoch"] = s.epoch;
  d["step"] = s.step;
  d["steps_per_epoch"] = s.steps_per_epoch;
  d["batches"] = s.batches;
  d["samples_delivered"] = s.samples_delivered;
  d["samples_failed"] = s.samples_failed;
  d["wait_s"] = s.wait_s;
  d["max_wait_s"] = s.max_wait_s;
  d["buffered"] = s.buffered;
  d["requests"] = s.requests;
  d["rows_requested"] = s.rows_requested;
  d["resubmits"] = s.resubmits;
  d["cache_hits"] = s.cache_hits;
  d["cache_misses"] = s.cache_misses;
  d["cache_puts"] = s.cache_puts;
  d["client"] = client_stats_dict(s.client);
  nb::list epochs;
  for (const auto& e : s.epochs) {
    nb::dict ed;
    ed["epoch"] = e.epoch;
    ed["steps"] = e.steps;
    ed["samples_delivered"] = e.samples_delivered;
    ed["samples_failed"] = e.samples_failed;
    ed["wait_s"] = e.wait_s;
    ed["max_wait_s"] = e.max_wait_s;
    ed["wall_s"] = e.wall_s;
    ed["ended"] = e.ended;
    ed["samples_per_s"] = e.samples_per_s();
    ed["stall"] = e.stall();
    ed["requests"] = e.requests;
    ed["rows_requested"] = e.rows_requested;
    ed["resubmits"] = e.resubmits;
    ed["cache_hits"] = e.cache_hits;
    ed["cache_misses"] = e.cache_misses;
    epochs.append(ed);
  }
  d["epochs"] = epochs;
  return d;
}

}  // namespace

void register_client(nb::module_& m) {
  nb::class_<py_embed_result>(m, "EmbedResult", "The outputs of one embed request, stacked over its rows.")
      .def_ro("model_name", &py_embed_result::model_name)
      .def_ro("model_version", &py_embed_result::model_version)
      .def_ro("endpoint", &py_embed_result::endpoint)
      .def_ro("attempts", &py_embed_result::attempts)
      .def_ro("outputs", &py_embed_result::outputs,
              "{output name: array [N, ...]} (read-only, sharing the response buffer)")
      .def_ro("row_errors", &py_embed_result::row_errors,
              "[] when every row succeeded, else one entry per row: None, or (errc, message) for a row that failed")
      .def("__getitem__", [](const py_embed_result& r, nb::handle name) { return r.outputs[name]; })
      .def("keys", [](const py_embed_result& r) { return r.outputs.attr("keys")(); })
      .def("__repr__", [](const py_embed_result& r) {
        return "<jitembed.EmbedResult " + r.model_name + " v" + r.model_version + " from " + r.endpoint + ">";
      });

  nb::class_<py_client>(
      m, "Client", nb::is_weak_referenceable(),
      "The JIT client (jitembed::client::jit_client): embeddings from KServe v2 servers (jitembed-server, "
      "Triton, jitembed.Server) with balancing, retries and hedging, or from in-process reference models.")
      .def(
          "__init__",
          [](py_client* self, std::optional<std::vector<std::string>> endpoints, std::string endpoints_file,
             std::string endpoints_url, std::optional<std::vector<std::string>> local_models, std::size_t local_threads,
             double request_timeout_ms, double connect_timeout_ms, int io_threads, int max_attempts, bool hedge,
             std::string auth_token,
             std::optional<std::map<std::string, std::map<std::string, std::string>>> identities,
             std::size_t max_in_flight, std::string tls_ca_file, bool offer_compression, bool compress_on_loopback,
             bool compress_inputs, int compression_level, double compression_min_saving,
             std::size_t compression_min_bytes, bool shared_memory, std::size_t shared_memory_pool_bytes) {
            if (!(compression_min_saving >= 0.0 && compression_min_saving <= 1.0))
              raise(errc::invalid_argument, "client: compression_min_saving " + std::to_string(compression_min_saving) +
                                                " not in [0, 1] (1: never compress)");
            client_options o;
            if (endpoints) o.endpoints.list = std::move(*endpoints);
            o.endpoints.file = std::move(endpoints_file);
            o.endpoints.url = std::move(endpoints_url);
            if (local_models)
              for (const auto& spec : *local_models) o.local_models.push_back(local_model(spec));
            o.local_threads = local_threads;
            o.request_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(request_timeout_ms));
            o.connect_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(connect_timeout_ms));
            o.io_threads = io_threads;
            o.retry.max_attempts = max_attempts;
            o.hedge.enabled = hedge;
            o.auth_token = std::move(auth_token);
            o.max_in_flight = max_in_flight;
            o.tls_ca_file = std::move(tls_ca_file);
            o.offer_compression = offer_compression;
            o.compress_on_loopback = compress_on_loopback;
            o.compress_inputs = compress_inputs;
            o.compression.level = compression_level;
            o.compression.min_saving = compression_min_saving;
            o.compression.min_bytes = compression_min_bytes;
            o.shared_memory.enabled = shared_memory;
            o.shared_memory.pool_bytes = shared_memory_pool_bytes;
            if (identities)
              for (auto& [model, kv] : *identities) {
                model_identity id;
                if (auto it = kv.find("fingerprint"); it != kv.end()) id.fingerprint = it->second;
                if (auto it = kv.find("preprocess_key"); it != kv.end()) id.preprocess_key = it->second;
                if (auto it = kv.find("input"); it != kv.end()) id.input = it->second;
                o.identities[model] = std::move(id);
              }
            result<jit_client> c = fail(errc::internal, "");
            {
              nb::gil_scoped_release nogil;
              c = jit_client::create(std::move(o));
            }
            auto client = unwrap(std::move(c));
            new (self) py_client{};
            self->c.emplace(std::move(client));
          },
          nb::arg("endpoints") = nb::none(), nb::arg("endpoints_file") = "", nb::arg("endpoints_url") = "",
          nb::arg("local_models") = nb::none(), nb::arg("local_threads") = 0, nb::arg("request_timeout_ms") = 30000.0,
          nb::arg("connect_timeout_ms") = 2000.0, nb::arg("io_threads") = 1, nb::arg("max_attempts") = 5,
          nb::arg("hedge") = true, nb::arg("auth_token") = "", nb::arg("identities") = nb::none(),
          nb::arg("max_in_flight") = 4096, nb::arg("tls_ca_file") = "",
          nb::arg("offer_compression") = client_options{}.offer_compression,
          nb::arg("compress_on_loopback") = client_options{}.compress_on_loopback,
          nb::arg("compress_inputs") = client_options{}.compress_inputs,
          nb::arg("compression_level") = codec::wire_compression_options{}.level,
          nb::arg("compression_min_saving") = codec::wire_compression_options{}.min_saving,
          nb::arg("compression_min_bytes") = codec::wire_compression_options{}.min_bytes,
          nb::arg("shared_memory") = shared_memory_options{}.enabled,
          nb::arg("shared_memory_pool_bytes") = shared_memory_options{}.pool_bytes,
          "Exactly one endpoint source (a list of http://host:port, https://host:port, grpc://host:port or "
          "grpcs://host:port URLs, a file, or a URL serving the list), or local_models: reference-model specs "
          "'NAME[:k=v,...]' (the jitembed-server --model syntax) run in this process. request_timeout_ms: the default "
          "deadline of one request, every attempt and retry together: 30000 (30 s); a request to endpoints that are "
          "all down fails after it (or after max_attempts), so use wait_ready() or Loader(fail_fast=True) to fail "
          "fast at start; connect_timeout_ms (2000): one connection attempt. tls_ca_file: the PEM CA bundle "
          "https:// / grpcs:// endpoints' certificates must chain to (empty: the system's CA paths). "
          "offer_compression: ask jitembed servers for zstd-compressed outputs (when that saves the server's fraction; "
          "Triton ignores it), not on loopback endpoints unless compress_on_loopback (there compressing costs more "
          "than it saves); compress_inputs: send input rows compressed (level compression_level) when at least "
          "compression_min_bytes and that saves compression_min_saving (jitembed servers only). shared_memory: "
          "endpoints on this host get a POSIX shared-memory region of shared_memory_pool_bytes, registered with "
          "Triton's system shared-memory extension, and rows and outputs go through it instead of the socket "
          "(docs/client.md, Shared memory for same-host endpoints).")
      .def(
          "embed",
          [](py_client& self, std::string model, nb::object rows, std::optional<std::string> input, std::string version,
             std::optional<std::vector<std::string>> outputs, std::optional<double> timeout_ms) {
            request_rows hold;
            embed_request req = make_request(std::move(model), rows, std::move(input), std::move(version),
                                             std::move(outputs), timeout_ms, hold);
            jit_client& c = self.get();
            result<embed_result> r = fail(errc::internal, "");
            {
              nb::gil_scoped_release nogil;
              r = c.embed(std::move(req)).get();
            }
            return convert(unwrap(std::move(r)));
          },
          nb::arg("model"), nb::arg("rows"), nb::arg("input") = nb::none(), nb::arg("version") = "",
          nb::arg("outputs") = nb::none(), nb::arg("timeout_ms") = nb::none(),
          "Embeds rows (bytes-like objects: encoded records for input 'sample', the default, raw field bytes for "
          "'image' / 'video' / 'text'; or RecordViews) with `model`; blocks (GIL released) and raises the errc's "
          "exception on failure. A numpy array of signed integers or floats of 2 or more dims is one typed row per "
          "item of its first dim (token ids [N, L] int64 / int32 go to input 'input_ids' by default; a float array "
          "needs input=, the model's declared input name).")
      .def(
          "embed_async",
          [](nb::handle self_h, std::string model, nb::object rows, std::optional<std::string> input,
             std::string version, std::optional<std::vector<std::string>> outputs, std::optional<double> timeout_ms) {
            py_client& self = nb::cast<py_client&>(self_h);
            request_rows hold;
            embed_request req = make_request(std::move(model), rows, std::move(input), std::move(version),
                                             std::move(outputs), timeout_ms, hold);
            jit_client& c = self.get();
            nb::object future = nb::module_::import_("concurrent.futures").attr("Future")();
            PyObject* fut = future.ptr();
            Py_INCREF(fut);  // released by the callback (which runs exactly once)
            auto done = [fut](result<embed_result> r) {
              if (!Py_IsInitialized() || python_finalizing()) return;  // the interpreter is going away: nothing waits
              nb::gil_scoped_acquire gil;
              nb::object f = nb::steal(fut);
              try {
                if (nb::cast<bool>(f.attr("cancelled")())) return;
                if (r)
                  f.attr("set_result")(nb::cast(convert(std::move(*r))));
                else
                  f.attr("set_exception")(make_exception(r.error()));
              } catch (nb::python_error& e) {
                e.discard_as_unraisable("jitembed.Client.embed_async callback");
              } catch (const std::exception& e) {
                PyErr_WarnEx(PyExc_RuntimeWarning, e.what(), 1);
              }
            };
            jit_client::request_id id;
            {
              nb::gil_scoped_release nogil;
              id = c.embed(std::move(req), std::move(done));
            }
            // Future.cancel() cancels the request (it completes with errc::cancelled, which the callback ignores).
            // A weak reference: a future (kept by the caller, or by a callback that never ran at exit) does not
            // keep the client alive.
            nb::weakref client_ref(self_h);
            future.attr("add_done_callback")(nb::cpp_function([client_ref, id](nb::handle f) {
              if (!nb::cast<bool>(f.attr("cancelled")())) return;
              nb::object client = client_ref();
              if (client.is_none()) return;
              auto& pc = nb::cast<py_client&>(client);
              if (pc.c) pc.c->cancel(id);
            }));
            return future;
          },
          nb::arg("model"), nb::arg("rows"), nb::arg("input") = nb::none(), nb::arg("version") = "",
          nb::arg("outputs") = nb::none(), nb::arg("timeout_ms") = nb::none(),
          "Like embed(), but returns a concurrent.futures.Future of the EmbedResult at once (its exception on failure; "
          "Future.cancel() cancels the request).")
      .def(
          "identity",
          [](py_client& self, const std::string& model) {
            jit_client& c = self.get();
            result<model_identity> r = fail(errc::internal, "");
            {
              nb::gil_scoped_release nogil;
              r = c.identity(model);
            }
            auto id = unwrap(std::move(r));
            nb::dict d;
            d["fingerprint"] = id.fingerprint;
            d["preprocess_key"] = id.preprocess_key;
            d["input"] = id.input;
            return d;
          },
          nb::arg("model"), "The cache-key identity of `model` (fingerprint, preprocess_key, input).")
      .def(
          "wait_ready",
          [](py_client& self, nb::handle models, double timeout_s) {
            std::vector<std::string> names;
            if (nb::isinstance<nb::str>(models))
              names.push_back(nb::cast<std::string>(models));
            else
              for (auto h : models) names.push_back(nb::cast<std::string>(h));
            if (!(timeout_s > 0.0)) raise(errc::invalid_argument, "client: wait_ready timeout_s must be positive");
            jit_client& c = self.get();
            result<void> r = fail(errc::internal, "");
            {
              nb::gil_scoped_release nogil;
              r = c.wait_ready(names, std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000.0 + 0.5)));
            }
            unwrap(std::move(r));
          },
          nb::arg("models"), nb::arg("timeout_s") = 10.0,
          "Blocks (GIL released) until, for each model (a name or a list), at least one endpoint answers ready "
          "(local models: at once). Raises UnavailableError when no endpoint could be reached within timeout_s, "
          "TimeoutError when one answered but the model never became ready; the message names the endpoints and the "
          "last error.")
      .def("stats", [](py_client& self) { return client_stats_dict(self.get().stats()); })
      .def("endpoints", [](py_client& self) { return self.get().endpoints(); })
      .def_prop_ro("local", [](py_client& self) { return self.get().local(); })
      .def("close", &py_client::close, "Cancels what is in flight and joins the client's threads (idempotent).")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](py_client& self, nb::args) { self.close(); });

  nb::class_<py_loader>(
      m, "Loader",
      "The prefetching JIT loader (jitembed::loader::jit_loader): an iterator of steps over a Dataset; "
      "each epoch is one pass of `for batch in loader` (the next pass starts the next epoch).")
      .def(
          "__init__",
          [](py_loader* self, nb::handle data, nb::handle client, const std::vector<nb::object>& embeddings,
             std::size_t batch_size, std::size_t samples_per_request, std::size_t requests_in_flight,
             std::size_t workers, std::size_t max_buffered, std::size_t rank, std::size_t world_size,
             std::uint64_t seed, bool shuffle, std::string_view order, std::optional<const py_cache*> cache,
             std::string_view cache_compression, std::optional<double> request_timeout_ms, int resubmits,
             std::optional<nb::bytes> resume, bool stack, std::uint64_t epoch, bool fail_fast, double max_failed_fraction,
             std::optional<double> ready_timeout_s) {
            format::dataset ds;
            if (nb::isinstance<py_dataset>(data)) {
              ds = nb::cast<const py_dataset&>(data).d;
            } else {
              std::vector<std::string> p;
              if (nb::isinstance<nb::str>(data))
                p.push_back(nb::cast<std::string>(data));
              else
                for (auto h : data) p.push_back(nb::cast<std::string>(nb::str(h)));
              nb::gil_scoped_release nogil;
              ds = unwrap(format::dataset::open(std::span<const std::string>(p)));
            }
            py_client& pc = nb::cast<py_client&>(client);
            loader_options o;
            std::vector<std::string> names;
            std::vector<embedding_spec> specs;
            for (const auto& e : embeddings) {
              embedding_spec s;
              if (nb::isinstance<nb::dict>(e)) {
                nb::dict d = nb::borrow<nb::dict>(e);
                s.name = nb::cast<std::string>(d["name"]);
                s.model = nb::cast<std::string>(d["model"]);
                if (d.contains("field")) s.field = nb::cast<std::string>(d["field"]);
                if (d.contains("kind") || s.field.empty()) s.kind = kind_of(nb::cast<std::string>(d["kind"]));
                if (d.contains("output")) s.output = nb::cast<std::string>(d["output"]);
                if (d.contains("input")) s.input = nb::cast<std::string>(d["input"]);
              } else {
                nb::tuple t = nb::cast<nb::tuple>(e);
                if (t.size() < 3)
                  raise(errc::invalid_argument, "embedding spec: (name, model, kind[, output]) expected");
                s.name = nb::cast<std::string>(t[0]);
                s.model = nb::cast<std::string>(t[1]);
                s.kind = kind_of(nb::cast<std::string>(t[2]));
                if (t.size() > 3) s.output = nb::cast<std::string>(t[3]);
              }
              names.push_back(s.name);
              specs.push_back(s);
              o.embeddings.push_back(std::move(s));
            }
            o.batch_size = batch_size;
            o.samples_per_request = samples_per_request;
            o.requests_in_flight = requests_in_flight;
            o.workers = workers;
            o.max_buffered = max_buffered;
            o.rank = rank;
            o.world_size = world_size;
            o.seed = seed;
            o.shuffle = shuffle;
            o.epoch = epoch;
            if (order == "completion")
              o.order = delivery_order::completion;
            else if (order != "dataset")
              raise(errc::invalid_argument, "order '" + std::string(order) + "' is not dataset or completion");
            if (cache && *cache) o.cache = (*cache)->s;
            if (cache_compression == "zstd") o.cache_values.compression = format::compression::zstd;
            if (request_timeout_ms)
              o.request_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(*request_timeout_ms));
            o.resubmits = resubmits;
            o.fail_fast = fail_fast;
            o.max_failed_fraction = max_failed_fraction;
            if (ready_timeout_s) {
              if (!(*ready_timeout_s > 0.0)) raise(errc::invalid_argument, "loader: ready_timeout_s must be positive");
              o.ready_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(*ready_timeout_s * 1000.0 + 0.5));
            }
            if (resume) {
              const auto* p = static_cast<const std::byte*>(resume->data());
              o.resume.assign(p, p + resume->size());
            }
            jit_client& c = pc.get();
            result<jit_loader> l = fail(errc::internal, "");
            {
              nb::gil_scoped_release nogil;
              l = jit_loader::create(std::move(ds), c, std::move(o));
            }
            auto loader = unwrap(std::move(l));
            new (self) py_loader{};
            self->client = nb::borrow(client);
            self->l.emplace(std::move(loader));
            self->names = std::move(names);
            self->specs = std::move(specs);
            self->stack = stack;
          },
          nb::arg("data"), nb::arg("client"), nb::arg("embeddings"), nb::arg("batch_size") = 32,
          nb::arg("samples_per_request") = 16, nb::arg("requests_in_flight") = 8, nb::arg("workers") = 2,
          nb::arg("max_buffered") = 256, nb::arg("rank") = 0, nb::arg("world_size") = 1, nb::arg("seed") = 0,
          nb::arg("shuffle") = true, nb::arg("order") = "dataset", nb::arg("cache") = nb::none(),
          nb::arg("cache_compression") = "raw", nb::arg("request_timeout_ms") = nb::none(), nb::arg("resubmits") = 2,
          nb::arg("resume") = nb::none(), nb::arg("stack") = true, nb::arg("epoch") = 0, nb::arg("fail_fast") = false,
          nb::arg("max_failed_fraction") = 1.0, nb::arg("ready_timeout_s") = nb::none(),
          "data: a Dataset or path(s); client: a Client (kept alive by the loader); embeddings: dicts {name, model, "
          "kind ('image' | 'video' | 'text')[, output, input]} or tuples (name, model, kind[, output]). A dict with "
          "'field' instead of 'kind' takes the sample field of that name: a tensor field (token ids) as a typed row of "
          "its dtype and shape to input (default 'input_ids' for i64 / i32 ids), a text field as its UTF-8.\n\n"
          "Failed samples (docs/loader.md): a step raises (the first failed sample's errc, naming the endpoints and "
          "its error) instead of being handed out when its samples that failed for the service (no endpoint answered, "
          "a timeout, a model not served: any errc but bad input) are at least max_failed_fraction of it (default 1.0: "
          "only a step where every sample failed so; above 1: never), or with fail_fast=True when any sample failed. "
          "ready_timeout_s: first wait that long for an endpoint ready for each model (Client.wait_ready) and raise "
          "its error; fail_fast=True without it waits 5 s.")
      .def("__iter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "__next__",
          [](py_loader& self) {
            jit_loader& l = self.get();
            result<std::optional<step>> r = fail(errc::internal, "");
            {
              nb::gil_scoped_release nogil;
              r = l.next();
            }
            auto b = unwrap(std::move(r));
            if (!b) throw nb::stop_iteration();
            return batch_dict(self, std::move(*b));
          },
          "The next step (GIL released while waiting): {name: array [n, ...] stacked over the samples that succeeded "
          "(a list of per-sample arrays when shapes differ or stack=False), 'ids': [...], 'indices': int64 array, "
          "'failed': [{'id', 'index', 'errc', 'message'}], 'epoch', 'step', 'dtypes': {name: 'f32' | 'bf16' | ...} "
          "(bf16 fields are uint16 arrays of the same bits)}. StopIteration at the end of each epoch.")
      .def(
          "state", [](py_loader& self) { return to_bytes(bytes_view(self.get().state())); },
          "A checkpoint: pass it as resume= to a new Loader over the same data to deliver exactly the rest.")
      .def("stats", [](py_loader& self) { return loader_stats_dict(self.get().stats()); })
      .def_prop_ro("epoch", [](py_loader& self) { return self.get().epoch(); })
      .def_prop_ro("steps_per_epoch", [](py_loader& self) { return self.get().steps_per_epoch(); })
      .def_prop_ro("samples_per_epoch", [](py_loader& self) { return self.get().samples_per_epoch(); })
      .def("close", &py_loader::close)
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](py_loader& self, nb::args) { self.close(); });
}

}  // namespace jitembed::python
