// Binding of the embedding server: jitembed.Server runs server::service on net::http::server in this process
// (loopback by default, port 0 = ephemeral) and, with grpc_port, on the KServe gRPC front end beside it, with
// the jitembed-server --model spec syntax, hot swap (load / unload), drain, and handle() to pass one HTTP
// request to the service without a socket.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <future>
#include <memory>
#include <thread>

#include "common.hpp"
#include "grpc_front.hpp"
#include "jitembed/net/http/server.hpp"
#include "jitembed/server.hpp"
#include "jitembed/server/model_spec.hpp"
#include "model.hpp"
#if JITEMBED_PYTHON_REPOSITORY
#include "jitembed/server/repository/model_repository.hpp"
#endif

namespace jitembed::python {

namespace {

using http_server = net::http::server;

struct py_server {
  std::unique_ptr<server::service> svc;
  std::unique_ptr<http_server> http;
  std::unique_ptr<grpc_front> grpc;  // null without grpc_port
  std::string host;
  std::uint16_t port = 0;
  std::int64_t drain_grace_ms = 0;
  bool stopped = false;

  // Drain (readiness and new infers answer 503), keep accepting for drain_grace_ms, stop the HTTP server
  // (in-flight requests finish and are answered), shut the service down. Idempotent; GIL released by callers.
  void stop_now(std::chrono::milliseconds drain) {
    if (stopped) return;
    stopped = true;
    if (svc) svc->begin_drain();
    if (drain_grace_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(drain_grace_ms));
    if (http) http->stop(drain);
    if (grpc) grpc->stop(drain);
    if (svc) svc->shutdown();
    grpc.reset();
    http.reset();
    svc.reset();
  }
  server::service& service() {
    if (!svc) raise(errc::unavailable, "server: stopped");
    return *svc;
  }
  ~py_server() {
    if (stopped) return;
    if (Py_IsInitialized() && !python_finalizing() && PyGILState_Check()) {
      nb::gil_scoped_release nogil;
      stop_now(std::chrono::seconds(10));
    } else {
      stop_now(std::chrono::seconds(10));
    }
  }
};

#if JITEMBED_PYTHON_REPOSITORY
// The repository's "pytorch_libtorch" / "torch_aoti" backend: jitembed._repository.open_model (Python torch
// loads the file, a jitembed.Model serves it). Called with or without the GIL (load routes, __init__).
result<models::any_model> python_torch_backend(const models::backend_config& c) {
  if (!Py_IsInitialized() || python_finalizing())
    return fail(errc::unavailable, c.config_file + ": the Python interpreter is shutting down");
  nb::gil_scoped_acquire gil;
  try {
    const auto tensors = [](const std::vector<models::backend_tensor>& ts) {
      nb::list l;
      for (const auto& t : ts)
        l.append(nb::make_tuple(t.name, t.data_type,
                                t.type ? nb::object(nb::str(std::string(to_string(*t.type)).c_str())) : nb::none(),
                                nb::cast(t.dims)));
      return l;
    };
    nb::dict d;
    d["name"] = c.name;
    d["config_file"] = c.config_file;
    d["kind"] = c.kind;
    d["version_dir"] = c.version_dir.string();
    d["model_filename"] = c.model_filename;
    d["max_batch_size"] = c.max_batch_size;
    d["inputs"] = tensors(c.inputs);
    d["outputs"] = tensors(c.outputs);
    nb::dict params;
    for (const auto& [k, v] : c.parameters) params[k.c_str()] = v;
    d["parameters"] = params;
    d["device"] = c.device.is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(c.device.ordinal);
    nb::object m = nb::module_::import_("jitembed._repository").attr("open_model")(d);
    return nb::cast<const py_model_handle&>(m).served();
  } catch (nb::python_error& e) {
    const bool missing = e.matches(PyExc_FileNotFoundError);
    const bool bad = e.matches(PyExc_ValueError) || e.matches(PyExc_TypeError);
    std::string what = e.what();
    if (const auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);  // the message, not the traceback
    return fail(missing ? errc::not_found
                : bad   ? errc::invalid_argument
                        : errc::decode_failed,
                c.config_file + ": " + what);
  } catch (const jitembed::error& e) {
    return e.info();
  }
}
#endif

net::http::response call(server::service& svc, net::http::request req) {
  auto p = std::make_shared<std::promise<net::http::response>>();
  auto f = p->get_future();
  svc.handle(std::move(req), [p](net::http::response r) { p->set_value(std::move(r)); });
  return f.get();
}

// One entry per loaded version, keyed 'NAME:VERSION' (created on first use).
nb::dict version_entry(nb::dict& out, const std::string& name, const std::string& version) {
  nb::str k((name + ":" + version).c_str());
  if (!out.contains(k)) {
    nb::dict d;
    d["name"] = name;
    d["version"] = version;
    out[k] = d;
  }
  return nb::borrow<nb::dict>(out[k]);
}

// Server.status(): service::status() only (the per-version load and counters; cheap, for autoscalers and
// health checks that poll often).
nb::dict status_of(py_server& s) {
  server::service& svc = s.service();
  std::vector<server::model_status> st;
  {
    nb::gil_scoped_release nogil;
    st = svc.status();
  }
  nb::dict out;
  for (const auto& m : st) {
    nb::dict d = version_entry(out, m.name, m.version);
    d["queued_rows"] = m.queued_rows;
    d["running_rows"] = m.running_rows;
    d["inflight_rows"] = m.admitted_rows;
    d["max_inflight_rows"] = m.max_inflight_rows;
    d["requests_success"] = m.success;
    d["requests_failed"] = m.failure;
    d["rejected_admission"] = m.rejected_admission;
    d["ready"] = m.ready;
  }
  return out;
}

// Server.stats(): status() plus Triton's statistics JSON (GET /v2/models/stats) for rows, batches and times.
nb::dict stats_of(py_server& s) {
  server::service& svc = s.service();
  std::string stats_body;
  nb::dict out = status_of(s);
  {
    nb::gil_scoped_release nogil;
    net::http::request req;
    req.method = "GET";
    req.target = "/v2/models/stats";
    stats_body = call(svc, std::move(req)).body;
  }
  const auto j = nlohmann::json::parse(stats_body, nullptr, false);
  if (j.is_discarded() || !j.contains("model_stats")) return out;
  for (const auto& ms : j["model_stats"]) {
    nb::dict d = version_entry(out, ms.value("name", ""), ms.value("version", ""));
    const auto& is = ms["inference_stats"];
    if (!d.contains("requests_success")) {
      d["requests_success"] = is["success"].value("count", std::uint64_t{0});
      d["requests_failed"] = is["fail"].value("count", std::uint64_t{0});
    }
    d["rows"] = ms.value("inference_count", std::uint64_t{0});
    d["batches"] = ms.value("execution_count", std::uint64_t{0});
    d["queue_ns"] = is["queue"].value("ns", std::uint64_t{0});
    d["compute_ns"] = is["compute_infer"].value("ns", std::uint64_t{0});
  }
  return out;
}

}  // namespace

void register_server(nb::module_& m) {
  nb::class_<py_server>(m, "Server",
                        "A jitembed embedding server (KServe v2 / Triton HTTP) in this process. Stopped (drained) by "
                        "stop(), on leaving a `with` block, or when garbage-collected.")
      .def(
          "__init__",
          [](py_server* self, std::vector<nb::object> models, std::string host, int port, std::size_t io_threads,
             std::size_t preprocess_threads, std::int64_t drain_grace_ms, std::size_t max_rows_per_request,
             std::string auth_token, std::optional<std::string> model_repository, std::string tls_cert,
             std::string tls_key, std::optional<int> grpc_port, std::string grpc_tls_cert, std::string grpc_tls_key,
             std::string grpc_tls_root_cert, int compression_level, double compression_min_saving,
             std::size_t compression_min_bytes) {
            if (port < 0 || port > 65535)
              raise(errc::invalid_argument, "server: port " + std::to_string(port) + " not in [0, 65535]");
            if (grpc_port && (*grpc_port < 0 || *grpc_port > 65535))
              raise(errc::invalid_argument, "server: grpc_port " + std::to_string(*grpc_port) + " not in [0, 65535]");
            if (!grpc_port && (!grpc_tls_cert.empty() || !grpc_tls_key.empty() || !grpc_tls_root_cert.empty()))
              raise(errc::invalid_argument, "server: grpc_tls_cert / grpc_tls_key / grpc_tls_root_cert need grpc_port");
            if (!(compression_min_saving >= 0.0 && compression_min_saving <= 1.0))
              raise(errc::invalid_argument, "server: compression_min_saving " + std::to_string(compression_min_saving) +
                                                " not in [0, 1] (1: never compress)");
            server::server_config cfg;
            cfg.host = host;
            cfg.port = static_cast<std::uint16_t>(port);
            cfg.io_threads = io_threads;
            cfg.preprocess_threads = preprocess_threads;
            cfg.max_rows_per_request = max_rows_per_request;
            cfg.auth_token = std::move(auth_token);
            cfg.compression.level = compression_level;
            cfg.compression.min_saving = compression_min_saving;
            cfg.compression.min_bytes = compression_min_bytes;
            std::vector<py_model_handle> python_models;  // loaded after the service starts (service::load)
            for (const auto& m : models) {
              if (nb::isinstance<py_model_handle>(m))
                python_models.push_back(nb::cast<const py_model_handle&>(m));
              else
                cfg.models.push_back(unwrap(server::parse_model_spec(nb::cast<std::string>(m))));
            }
            if (models.empty() && !model_repository)
              for (auto name : models::kReferenceModelNames) {
                server::model_config mc;
                mc.name = std::string(name);
                cfg.models.push_back(std::move(mc));
              }
            net::http::server_options ho;
            ho.host = cfg.host;
            ho.port = cfg.port;
            ho.io_threads = static_cast<int>(cfg.io_threads);
            ho.max_header_bytes = cfg.protocol.max_header_bytes;
            ho.max_body_bytes = cfg.protocol.max_body_bytes;
            ho.tls_cert_file = std::move(tls_cert);
            ho.tls_key_file = std::move(tls_key);
            std::unique_ptr<server::service> svc;
            std::optional<server::grpc_server_options> go;
            if (grpc_port) {
              go.emplace();
              go->host = cfg.host;
              go->port = static_cast<std::uint16_t>(*grpc_port);
              go->max_message_bytes = cfg.protocol.max_body_bytes;
              go->tls_cert_file = std::move(grpc_tls_cert);
              go->tls_key_file = std::move(grpc_tls_key);
              go->tls_root_cert_file = std::move(grpc_tls_root_cert);
            }
            std::unique_ptr<http_server> http;
            std::unique_ptr<grpc_front> grpc;
            {
              nb::gil_scoped_release nogil;
              svc = std::make_unique<server::service>(unwrap(server::service::create(std::move(cfg))));
              for (auto& pm : python_models) unwrap(svc->load(pm.config, pm.served()));  // warmed: one call of each
              if (model_repository) {
#if JITEMBED_PYTHON_REPOSITORY
                server::repository_options ro;
                ro.backends.add("pytorch_libtorch", python_torch_backend);
                ro.backends.add("torch_aoti", python_torch_backend);
                auto repo = unwrap(server::model_repository::open(*model_repository, std::move(ro)));
                repo.load_all(*svc);  // a model that fails is in /v2/repository/index with its reason
                svc->attach(repo);
#else
                raise(errc::unsupported_format, "model_repository: this jitembed module is built without the repository "
                                                "component (libprotobuf / libprotoc were not found)");
#endif
              }
              http = std::make_unique<http_server>(unwrap(http_server::create(ho, svc->as_handler())));
              if (go) grpc = unwrap(start_grpc_front(std::move(*go), *svc));
            }
            new (self) py_server{};
            self->host = host;
            self->port = http->port();
            self->drain_grace_ms = drain_grace_ms;
            self->svc = std::move(svc);
            self->http = std::move(http);
            self->grpc = std::move(grpc);
          },
          nb::arg("models") = std::vector<nb::object>{}, nb::arg("host") = "127.0.0.1", nb::arg("port") = 0,
          nb::arg("io_threads") = 1, nb::arg("preprocess_threads") = 0, nb::arg("drain_grace_ms") = 0,
          nb::arg("max_rows_per_request") = 1024, nb::arg("auth_token") = "", nb::arg("model_repository") = nb::none(),
          nb::arg("tls_cert") = "", nb::arg("tls_key") = "", nb::arg("grpc_port") = nb::none(),
          nb::arg("grpc_tls_cert") = "", nb::arg("grpc_tls_key") = "", nb::arg("grpc_tls_root_cert") = "",
          nb::arg("compression_level") = codec::wire_compression_options{}.level,
          nb::arg("compression_min_saving") = codec::wire_compression_options{}.min_saving,
          nb::arg("compression_min_bytes") = codec::wire_compression_options{}.min_bytes,
          "tls_cert / tls_key: PEM certificate chain and private key: serve HTTPS (both or neither). grpc_port: also "
          "serve KServe v2 gRPC (inference.GRPCInferenceService, e.g. tritonclient.grpc, jitembed.Client with "
          "grpc://HOST:PORT) on this port of the same host (0: ephemeral, see .grpc_port; None: no gRPC); "
          "grpc_tls_cert / grpc_tls_key: its TLS (PEM), grpc_tls_root_cert: clients must present a certificate this "
          "CA signed. compression_level / compression_min_saving / compression_min_bytes: outputs go zstd-compressed "
          "(net/kserve/compression.hpp) to clients that offer it when at least min_bytes and that saves min_saving "
          "(1: never). models: "
          "jitembed.Model objects (Python encoders) and 'NAME[:k=v,...]' specs as jitembed-server --model "
          "(empty and no model_repository: the three reference models); model_repository: a Triton-style directory "
          "(TorchScript / AOTInductor models run by this Python's torch as jitembed.Model, jitembed backend models in "
          "C++; /v2/repository routes load and unload from it); port 0 "
          "binds an ephemeral port (see .port); preprocess_threads 0 = hardware concurrency.")
      .def_prop_ro("port", [](const py_server& s) { return s.port; })
      .def_prop_ro(
          "url", [](const py_server& s) { return s.host + ":" + std::to_string(s.port); }, "'HOST:PORT'")
      .def_prop_ro(
          "grpc_port",
          [](const py_server& s) { return s.grpc ? std::optional<int>(s.grpc->port()) : std::optional<int>(); },
          "The gRPC port (None without grpc_port, or once stopped).")
      .def_prop_ro(
          "grpc_url",
          [](const py_server& s) {
            return s.grpc ? std::optional<std::string>(s.host + ":" + std::to_string(s.grpc->port()))
                          : std::optional<std::string>();
          },
          "'HOST:PORT' of the gRPC front end (None without grpc_port); a Client endpoint is 'grpc://' + grpc_url.")
      .def(
          "load",
          [](py_server& s, const std::string& name, std::optional<std::string> version,
             std::optional<std::string> spec) {
            server::model_config cfg = unwrap(server::parse_model_spec(spec ? *spec : name));
            if (cfg.name != name)
              raise(errc::invalid_argument,
                    "server.load: spec '" + *spec + "' names model '" + cfg.name + "', not '" + name + "'");
            if (version) cfg.version = *version;
            auto& svc = s.service();
            nb::gil_scoped_release nogil;
            unwrap(svc.load(cfg));
          },
          nb::arg("name"), nb::arg("version") = nb::none(), nb::arg("spec") = nb::none(),
          "Loads (or replaces in place) a model version; requests switch to it with none failing (service::load).")
      .def(
          "load",
          [](py_server& s, const py_model_handle& m) {
            auto& svc = s.service();
            const models::any_model served = m.served();
            nb::gil_scoped_release nogil;
            unwrap(svc.load(m.config, served));
          },
          nb::arg("model"),
          "Loads (or replaces in place) a jitembed.Model's version: warmed with one call, then requests switch to it "
          "with none failing; the replaced version drains and is dropped.")
      .def(
          "unload",
          [](py_server& s, const std::string& name, std::optional<std::string> version) {
            auto& svc = s.service();
            nb::gil_scoped_release nogil;
            unwrap(svc.unload(name, version ? *version : std::string()));
          },
          nb::arg("name"), nb::arg("version") = nb::none(),
          "Unloads one version (every version when None), draining it first.")
      .def(
          "loaded", [](py_server& s) { return s.service().loaded(); }, "[(name, version)] of every loaded version.")
      .def("ready", [](py_server& s) { return s.svc && s.service().ready(); })
      .def(
          "begin_drain", [](py_server& s) { s.service().begin_drain(); },
          "From now on readiness and new infer requests answer 503; requests already admitted finish.")
      .def("status", &status_of,
           "Per loaded version ('NAME:VERSION'): queued_rows (waiting for a batch), running_rows (in a batch), "
           "inflight_rows (admitted: decode to response, including the above), max_inflight_rows, requests_success, "
           "requests_failed, rejected_admission, ready (False while a batch runs past a request's deadline). Cheap (no "
           "statistics JSON): what an autoscaler polls.")
      .def("stats", &stats_of,
           "Per loaded version ('NAME:VERSION'): queued_rows (waiting for a batch), running_rows (in a batch), "
           "inflight_rows (admitted: decode to response, including the above), max_inflight_rows, requests_success, "
           "requests_failed, rejected_admission, and from the Triton statistics rows, batches, queue_ns, compute_ns.")
      .def(
          "handle",
          [](py_server& s, std::string method, std::string target, std::optional<nb::dict> headers, nb::handle body) {
            net::http::request req;
            req.method = std::move(method);
            req.target = std::move(target);
            req.remote = "python";
            if (headers)
              for (auto [k, v] : *headers)
                req.headers.emplace_back(nb::cast<std::string>(nb::str(k)), nb::cast<std::string>(nb::str(v)));
            if (!body.is_none()) {
              auto buf = get_buffer(body);
              req.body.assign(reinterpret_cast<const char*>(buf->bytes().data()), buf->bytes().size());
            }
            auto& svc = s.service();
            net::http::response r;
            std::string out_body;
            {
              nb::gil_scoped_release nogil;
              r = call(svc, std::move(req));
              out_body.reserve(r.content_length());
              out_body.append(r.body);
              for (auto p : r.pieces) out_body.append(reinterpret_cast<const char*>(p.data()), p.size());
            }
            nb::dict h;
            for (const auto& [k, v] : r.headers) h[nb::str(k.c_str())] = v;
            return nb::make_tuple(r.status, h, nb::bytes(out_body.data(), out_body.size()));
          },
          nb::arg("method"), nb::arg("target"), nb::arg("headers") = nb::none(), nb::arg("body") = nb::none(),
          "Hands one HTTP request to the service without a socket (GIL released while it runs): (status, headers, "
          "body).")
      .def(
          "stop",
          [](py_server& s, double timeout_s) {
            nb::gil_scoped_release nogil;
            s.stop_now(std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000)));
          },
          nb::arg("timeout_s") = 10.0, "Drains and stops (idempotent): in-flight requests finish within timeout_s.")
      .def_prop_ro("stopped", [](const py_server& s) { return s.stopped; })
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](py_server& s, nb::args) {
        nb::gil_scoped_release nogil;
        s.stop_now(std::chrono::seconds(10));
      });
}

}  // namespace jitembed::python
