// server::service's implementation (server/service.hpp is the API): the HTTP front of the service. It puts
// together the model registry (detail/registry.hpp), the inference pipeline (detail/pipeline.hpp), the
// bearer-token check (detail/auth.hpp) and the Prometheus text (detail/metrics.hpp), and maps the KServe v2
// routes of docs/server.md onto them through a route table (detail/routes.hpp). It lives behind one shared
// pointer: the service and every handler from as_handler() own it.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/core/error.hpp"
#include "jitembed/net/http/message.hpp"
#include "jitembed/net/kserve/encode.hpp"
#include "jitembed/net/kserve/status.hpp"
#include "jitembed/server/config.hpp"
#include "jitembed/server/detail/auth.hpp"
#include "jitembed/server/detail/base64.hpp"
#include "jitembed/server/detail/content_encoding.hpp"
#include "jitembed/server/detail/metrics.hpp"
#include "jitembed/server/detail/pipeline.hpp"
#include "jitembed/server/detail/registry.hpp"
#include "jitembed/server/detail/render.hpp"
#include "jitembed/server/detail/routes.hpp"
#include "jitembed/server/model_instance.hpp"
#include "jitembed/server/repository/model_source.hpp"
#include "jitembed/server/shm/detail/registry.hpp"

namespace jitembed::server {

inline constexpr std::string_view kServerVersion = "0.1.0";

// Retry-After (seconds) on 503 answers (unavailable, resource_exhausted).
inline constexpr int kRetryAfterSeconds = 1;

namespace detail {

namespace http = net::http;

inline http::response text_response(int status, std::string body, std::string_view type) {
  http::response r;
  r.status = status;
  r.body = std::move(body);
  r.headers.emplace_back("Content-Type", std::string(type));
  return r;
}
inline http::response json_response(int status, const ojson& j) {
  return text_response(status, j.dump(), "application/json");
}

// Every error answer: {"error": message, "errc": name}, and Retry-After where the errc says "later".
inline http::response error_response(int status, std::string_view message, errc code) {
  auto r = text_response(status, net::kserve::error_body(message, code), "application/json");
  if (net::kserve::wants_retry_after(code)) r.headers.emplace_back("Retry-After", std::to_string(kRetryAfterSeconds));
  return r;
}
inline error_info as_error(const net::kserve::protocol_error& e) { return fail(e.code, e.message); }
inline http::response error_response(const net::kserve::protocol_error& e) {
  return error_response(e.http_status, e.message, e.code);
}
// A failed request: the status follows the errc alone (kserve::http_status).
inline http::response error_response(const error_info& e) {
  return error_response(net::kserve::http_status(e.code), e.message, e.code);
}
inline http::response not_found_route() { return error_response(404, "Not Found", errc::not_found); }
inline http::response method_not_allowed() { return error_response(405, "method not allowed", errc::invalid_argument); }

// The pipeline's answer as an HTTP response: KServe JSON + Triton's binary extension, the binary pieces
// viewing the response's tensors (no copy; the response is kept alive until written).
inline http::response to_response(result<infer_output> r) {
  if (!r) return error_response(r.error());
  auto msg = net::kserve::encode_response(**r);
  if (!msg) return error_response(msg.error());
  http::response out;
  out.status = 200;
  out.body = std::move(msg->header);
  out.pieces = std::move(msg->binary);
  out.keep_alive = std::move(*r);
  if (msg->header_length) {
    out.headers.emplace_back("Content-Type", "application/octet-stream");
    out.headers.emplace_back("Inference-Header-Content-Length", std::to_string(*msg->header_length));
  } else {
    out.headers.emplace_back("Content-Type", "application/json");
  }
  return out;
}

// A load request's JSON body as a model_config: batcher settings and the model's own parameters come in
// one "parameters" object (Triton sends every value as a string). `version` is the "version" parameter.
inline result<model_config> load_request_config(const std::string& name, const std::string& version,
                                                const nlohmann::json& params) {
  nlohmann::json cfgj = nlohmann::json::object();
  cfgj["name"] = name;
  if (!version.empty()) cfgj["version"] = version;
  nlohmann::json model_params = nlohmann::json::object();
  for (auto it = params.begin(); it != params.end(); ++it) {
    const std::string& k = it.key();
    if (k == "version") continue;
    if (is_serving_key(k)) {
      auto v = serving_value(k, *it);  // Triton sends strings
      if (!v) return fail(errc::invalid_argument, "repository " + v.error().message);
      cfgj[k] = std::move(*v);
    } else if (k == "version_policy") {
      cfgj[k] = *it;  // the flag form ("latest2", "all", "specific:1+3") or Triton's object
    } else {
      model_params[k] = *it;
    }
  }
  cfgj["params"] = model_params;
  return model_config::parse(cfgj, "parameters");
}

class service_core final {
 public:
  // Builds the service; models in `cfg.models` are not loaded here: call registry().load_all(...).
  service_core(server_config cfg, model_factory factory)
      : config_(std::move(cfg)),
        auth_(config_.auth_token),
        registry_(std::move(factory)),
        shared_memory_(config_.cuda_ipc),
        pipeline_(registry_, config_, &shared_memory_) {
    add_routes();
  }
  service_core(const service_core&) = delete;
  service_core& operator=(const service_core&) = delete;
  ~service_core() { registry_.shutdown(); }

  model_registry& registry() noexcept { return registry_; }
  const model_registry& registry() const noexcept { return registry_; }
  inference_pipeline& pipeline() noexcept { return pipeline_; }
  // The shared-memory regions, system and CUDA (register / unregister / status for every front end).
  shared_memory_registry& shared_memory() noexcept { return shared_memory_; }
  const server_config& config() const noexcept { return config_; }

  std::string metrics() const {
    const auto held = registry_.select();
    std::vector<const model_instance*> ptrs;
    for (const auto& h : held) ptrs.push_back(h.get());
    return metrics_text(ptrs);
  }

  // The http::handler: every route of docs/server.md. Never blocks on model work.
  void handle(http::request&& req, http::responder respond) {
    const auto parts = split_path(req.target);
    const bool health = parts.size() >= 2 && parts[0] == "v2" && parts[1] == "health";
    if (!health && !authorized(http::find_header(req.headers, "authorization"))) {
      auto r = error_response(401, bearer_auth::denied_message, errc::invalid_argument);
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return respond(std::move(r));
    }
    route_match match;
    const auto* h = routes_.find(req.method, parts, match);
    if (!h) return respond(not_found_route());
    (*h)(std::move(req), std::move(respond), match);
  }

  // What every front end answers, protocol-neutral (HTTP routes here, the gRPC service of
  // server/grpc_server.hpp): JSON as Triton's HTTP API has it (its gRPC messages share the field names).
  // cuda_shared_memory only with a CUDA backend (server_config::cuda_ipc).
  ojson server_metadata() const {
    auto ext = ojson::array(
        {"binary_tensor_data", "statistics", "model_configuration", "model_repository", "system_shared_memory"});
    if (shared_memory_.has_cuda()) ext.push_back("cuda_shared_memory");
    return ojson{{"name", "jitembed"}, {"version", kServerVersion}, {"extensions", std::move(ext)}};
  }
  // Whether the bearer token (when one is configured) allows a call with this Authorization value.
  bool authorized(std::string_view authorization) const { return !auth_.enabled() || auth_.allows(authorization); }

  // Ready to serve the model (version): the service is not draining, the version is loaded and no batch
  // runs past its requests' deadline. Errors: unavailable (draining, busy), not_found.
  result<void> model_ready(std::string_view name, std::string_view version) {
    if (!registry_.ready()) return inference_pipeline::not_ready();  // draining: before any model check
    auto inst = registry_.find(name, version);
    if (!inst) return as_error(net::kserve::model_not_found(name, version));
    // a batch running past its rows' deadline keeps the model busy: not ready until it returns
    if (!(*inst)->ready())
      return fail(errc::unavailable, "model '" + (*inst)->name() + "' version " + (*inst)->version() +
                                         " is busy: a batch runs past its requests' deadline");
    return {};
  }
  result<ojson> metadata_json(std::string_view name, std::string_view version) {
    auto inst = registry_.find(name, version);
    if (!inst) return as_error(net::kserve::model_not_found(name, version));
    return model_metadata(**inst, registry_.versions_of(name));
  }
  result<ojson> config_json(std::string_view name, std::string_view version) {
    auto inst = registry_.find(name, version);
    if (!inst) return as_error(net::kserve::model_not_found(name, version));
    return model_config_json(**inst, registry_.policy_of(name, (*inst)->config().policy));
  }
  // {"model_stats": [...]} of one model (version), or of every model when `name` is empty.
  result<ojson> stats_json(std::string_view name, std::string_view version) {
    const auto held = registry_.select(name, version);
    if (held.empty() && !name.empty()) return as_error(net::kserve::model_not_found(name, version));
    ojson arr = ojson::array();
    for (const auto& h : held) arr.push_back(model_stats_json(*h));
    return ojson{{"model_stats", arr}};
  }
  ojson repository_index_json() const {
    ojson arr = ojson::array();
    for (const auto& e : registry_.repository_index()) {
      ojson j{{"name", e.name}};
      if (!e.version.empty()) j["version"] = e.version;
      if (e.state != model_state::none) j["state"] = to_string(e.state);
      if (!e.reason.empty()) j["reason"] = e.reason;
      if (!e.ignored.empty()) j["ignored"] = e.ignored;
      arr.push_back(std::move(j));
    }
    return arr;
  }

  // A repository load / unload request: `request` is its JSON body ({"parameters": {...}}, or empty).
  result<void> repository_call(const std::string& name, bool load, const nlohmann::json& request) {
    if (const auto src = registry_.source(); src && src->has(name)) {
      // A repository model: its config.pbtxt is the configuration; the directory is read again.
      if (auto it = request.find("parameters"); it != request.end() && !(it->is_object() && it->empty()))
        return fail(errc::invalid_argument, "model '" + name +
                                                "' comes from the model repository: its config.pbtxt is its "
                                                "configuration (load/unload take no parameters)");
      return load ? src->load(registry_, name) : src->unload(registry_, name);
    }
    nlohmann::json params = nlohmann::json::object();
    if (auto it = request.find("parameters"); it != request.end()) {
      if (!it->is_object()) return fail(errc::invalid_argument, "repository request 'parameters' is not an object");
      params = *it;
    }
    std::string version;
    if (auto it = params.find("version"); it != params.end()) {
      if (it->is_string())
        version = it->get<std::string>();
      else if (it->is_number_unsigned())
        version = std::to_string(it->get<std::uint64_t>());
      else
        return fail(errc::invalid_argument, "repository parameter 'version' is not a string or an unsigned integer");
    }
    if (!load) return registry_.unload(name, version);
    auto cfg = load_request_config(name, version, params);
    if (!cfg) return fail(errc::invalid_argument, cfg.error().message);
    return registry_.load(*cfg);
  }

 private:
  using route_handler = std::function<void(http::request&&, http::responder, const route_match&)>;

  // A route answered at once from the match alone.
  template <class F>
  void add_sync(methods m, std::string_view pattern, F f) {
    routes_.add(m, pattern,
                [f = std::move(f)](http::request&&, http::responder respond, const route_match& p) { respond(f(p)); });
  }

  void add_routes() {
    add_sync(methods::get, "/metrics",
             [this](const route_match&) { return text_response(200, metrics(), "text/plain; version=0.0.4"); });
    add_sync(methods::get, "/v2", [this](const route_match&) { return json_response(200, server_metadata()); });
    add_sync(methods::get, "/v2/health/live", [](const route_match&) { return text_response(200, "", "text/plain"); });
    add_sync(methods::get, "/v2/health/ready", [this](const route_match&) { return ready_or_not(); });

    // The repository extension takes POST only.
    add_sync(methods::post, "/v2/repository/index",
             [this](const route_match&) { return json_response(200, repository_index_json()); });
    for (const bool load : {true, false})
      routes_.add(methods::post, load ? "/v2/repository/models/{model}/load" : "/v2/repository/models/{model}/unload",
                  [this, load](http::request&& req, http::responder respond, const route_match& p) {
                    nlohmann::json body = nlohmann::json::object();
                    if (!req.body.empty()) {
                      body = nlohmann::json::parse(req.body, nullptr, /*allow_exceptions=*/false);
                      if (body.is_discarded() || !body.is_object())
                        return respond(error_response(400, "repository request body is not a JSON object",
                                                      errc::invalid_argument));
                    }
                    auto r = repository_call(std::string(p["model"]), load, body);
                    respond(r ? json_response(200, ojson::object()) : error_response(r.error()));
                  });
    add_sync(methods::post, "/v2/repository/**", [](const route_match&) { return not_found_route(); });
    add_sync(methods::any, "/v2/repository/**", [](const route_match&) { return method_not_allowed(); });

    add_shared_memory_routes();

    add_sync(methods::get, "/v2/models/stats",
             [this](const route_match&) { return json_or_error(stats_json({}, {})); });  // every model
    // /v2/models/{m}[/versions/{v}][/action]: POST is infer, every other action is read with any other method.
    for (const std::string_view base : {"/v2/models/{model}", "/v2/models/{model}/versions/{version}"}) {
      const std::string b(base);
      routes_.add(methods::post, b + "/infer",
                  [this](http::request&& req, http::responder respond, const route_match& p) {
                    infer(std::string(p["model"]), std::string(p["version"]), std::move(req), std::move(respond));
                  });
      add_sync(methods::post, b, [](const route_match&) { return method_not_allowed(); });
      add_sync(methods::post, b + "/{action}", [](const route_match&) { return method_not_allowed(); });
      add_sync(methods::any, b + "/stats",
               [this](const route_match& p) { return json_or_error(stats_json(p["model"], p["version"])); });
      add_sync(methods::any, b + "/ready", [this](const route_match& p) {
        auto r = model_ready(p["model"], p["version"]);
        return r ? text_response(200, "", "text/plain") : error_response(r.error());
      });
      add_sync(methods::any, b + "/config",
               [this](const route_match& p) { return json_or_error(config_json(p["model"], p["version"])); });
      add_sync(methods::any, b,
               [this](const route_match& p) { return json_or_error(metadata_json(p["model"], p["version"])); });
      add_sync(methods::any, b + "/{action}", [this](const route_match& p) {  // unknown action: 404 for a known model
        auto inst = registry_.find(p["model"], p["version"]);
        return inst ? not_found_route() : error_response(net::kserve::model_not_found(p["model"], p["version"]));
      });
    }
  }

  // Triton's system shared-memory extension (docs/server.md).
  void add_shared_memory_routes() {
    routes_.add(methods::post, "/v2/systemsharedmemory/region/{region}/register",
                [this](http::request&& req, http::responder respond, const route_match& p) {
                  respond(register_shared_memory(std::string(p["region"]), req.body));
                });
    add_sync(methods::post, "/v2/systemsharedmemory/region/{region}/unregister", [this](const route_match& p) {
      shared_memory_.unregister_region(p["region"]);
      return json_response(200, ojson::object());
    });
    add_sync(methods::post, "/v2/systemsharedmemory/unregister", [this](const route_match&) {
      shared_memory_.unregister_all();
      return json_response(200, ojson::object());
    });
    add_sync(methods::get, "/v2/systemsharedmemory/status",
             [this](const route_match&) { return json_or_error(shared_memory_.status()); });
    add_sync(methods::get, "/v2/systemsharedmemory/region/{region}/status",
             [this](const route_match& p) { return json_or_error(shared_memory_.status(p["region"])); });
    add_sync(methods::any, "/v2/systemsharedmemory/**", [](const route_match&) { return method_not_allowed(); });

    // Triton's CUDA shared-memory extension: the same registry (one namespace of names), CUDA regions.
    constexpr auto cuda = shared_memory_kind::cuda;
    routes_.add(methods::post, "/v2/cudasharedmemory/region/{region}/register",
                [this](http::request&& req, http::responder respond, const route_match& p) {
                  respond(register_cuda_shared_memory(std::string(p["region"]), req.body));
                });
    add_sync(methods::post, "/v2/cudasharedmemory/region/{region}/unregister", [this](const route_match& p) {
      shared_memory_.unregister_region(p["region"], cuda);
      return json_response(200, ojson::object());
    });
    add_sync(methods::post, "/v2/cudasharedmemory/unregister", [this](const route_match&) {
      shared_memory_.unregister_all(cuda);
      return json_response(200, ojson::object());
    });
    add_sync(methods::get, "/v2/cudasharedmemory/status",
             [this](const route_match&) { return json_or_error(shared_memory_.status({}, cuda)); });
    add_sync(methods::get, "/v2/cudasharedmemory/region/{region}/status",
             [this](const route_match& p) { return json_or_error(shared_memory_.status(p["region"], cuda)); });
    add_sync(methods::any, "/v2/cudasharedmemory/**", [](const route_match&) { return method_not_allowed(); });
  }

  // A register request's JSON body: {"key": string, "offset": unsigned (default 0), "byte_size": unsigned}.
  http::response register_shared_memory(std::string name, const std::string& body) {
    const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    auto bad = [](std::string m) { return error_response(400, m, errc::invalid_argument); };
    if (j.is_discarded() || !j.is_object()) return bad("shared memory register request body is not a JSON object");
    const auto key = j.find("key");
    if (key == j.end() || !key->is_string()) return bad("shared memory register request has no string 'key'");
    std::uint64_t offset = 0;
    if (const auto it = j.find("offset"); it != j.end()) {
      if (!it->is_number_unsigned())
        return bad("shared memory register request 'offset' is not a non-negative integer");
      offset = it->get<std::uint64_t>();
    }
    const auto size = j.find("byte_size");
    if (size == j.end() || !size->is_number_unsigned())
      return bad("shared memory register request has no non-negative integer 'byte_size'");
    auto r =
        shared_memory_.register_region(std::move(name), key->get<std::string>(), offset, size->get<std::uint64_t>());
    return r ? json_response(200, ojson::object()) : error_response(r.error());
  }

  // A CUDA register request's JSON body (tritonclient's): {"raw_handle": {"b64": base64 of the
  // cudaIpcMemHandle_t}, "device_id": unsigned, "byte_size": unsigned}.
  http::response register_cuda_shared_memory(std::string name, const std::string& body) {
    if (!shared_memory_.has_cuda())
      return error_response(400, std::string(kNoCudaSharedMemory), errc::invalid_argument);
    const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    auto bad = [](std::string m) { return error_response(400, m, errc::invalid_argument); };
    if (j.is_discarded() || !j.is_object()) return bad("CUDA shared memory register request body is not a JSON object");
    const auto handle = j.find("raw_handle");
    const nlohmann::json* b64 = nullptr;
    if (handle != j.end() && handle->is_object())
      if (const auto it = handle->find("b64"); it != handle->end() && it->is_string()) b64 = &*it;
    if (!b64) return bad("CUDA shared memory register request has no 'raw_handle': {\"b64\": string}");
    auto raw = decode_base64(b64->get_ref<const std::string&>());
    if (!raw) return bad("CUDA shared memory region '" + name + "': raw_handle.b64 is not base64");
    const auto device = j.find("device_id");
    if (device == j.end() || !device->is_number_unsigned())
      return bad("CUDA shared memory register request has no non-negative integer 'device_id'");
    if (device->get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return bad("CUDA shared memory register request 'device_id' is out of range");
    const auto size = j.find("byte_size");
    if (size == j.end() || !size->is_number_unsigned())
      return bad("CUDA shared memory register request has no non-negative integer 'byte_size'");
    auto r = shared_memory_.register_cuda_region(std::move(name), *raw, device->get<std::int64_t>(),
                                                 size->get<std::uint64_t>());
    return r ? json_response(200, ojson::object()) : error_response(r.error());
  }

  static http::response not_ready() { return error_response(inference_pipeline::not_ready()); }
  http::response ready_or_not() const { return registry_.ready() ? text_response(200, "", "text/plain") : not_ready(); }
  static http::response json_or_error(const result<ojson>& r) {
    return r ? json_response(200, *r) : error_response(r.error());
  }

  void infer(std::string name, std::string version, http::request&& req, http::responder respond) {
    // Content-Encoding gzip / deflate (tritonclient's request_compression_algorithm): inflated first, at
    // most max_body_bytes; Accept-Encoding (response_compression_algorithm): the answer deflated.
    const auto coding = parse_content_encoding(http::find_header(req.headers, "content-encoding"));
    if (!coding)
      return respond(error_response(400,
                                    "unsupported Content-Encoding '" +
                                        std::string(http::find_header(req.headers, "content-encoding")) +
                                        "' (gzip, deflate or identity)",
                                    errc::invalid_argument));
    if (*coding != content_coding::identity) {
      auto body = inflate_body(req.body, *coding, config_.protocol.max_body_bytes);
      if (!body) return respond(error_response(body.error()));
      req.body = std::move(*body);
    }
    const auto answer = pick_accept_encoding(http::find_header(req.headers, "accept-encoding"));
    infer_input in{.name = std::move(name),
                   .version = std::move(version),
                   .body = std::move(req.body),
                   .header_length = std::string(http::find_header(req.headers, "inference-header-content-length"))};
    pipeline_.infer(std::move(in), [respond = std::move(respond), answer](result<infer_output> r) {
      auto out = to_response(std::move(r));
      if (answer != content_coding::identity && out.status == 200) out = encode_body(std::move(out), answer);
      respond(std::move(out));
    });
  }

  // A response's body (header + binary pieces) deflated with `coding`, Content-Encoding set.
  static http::response encode_body(http::response r, content_coding coding) {
    std::string flat = std::move(r.body);
    for (auto p : r.pieces) flat.append(reinterpret_cast<const char*>(p.data()), p.size());
    auto packed = deflate_body(flat, coding);
    if (!packed) return error_response(packed.error());
    r.body = std::move(*packed);
    r.pieces.clear();
    r.keep_alive.reset();
    r.headers.emplace_back("Content-Encoding", std::string(detail::to_string(coding)));
    return r;
  }

  server_config config_;
  bearer_auth auth_;
  model_registry registry_;
  shared_memory_registry shared_memory_;  // before pipeline_: outlives it
  inference_pipeline pipeline_;           // after registry_: destroyed (its pool's threads stopped) before it
  route_table<route_handler> routes_;
};

}  // namespace detail

}  // namespace jitembed::server
