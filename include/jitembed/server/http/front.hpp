// The service's HTTP front: the KServe v2 routes of docs/server.md over the front-neutral core; every handler
// from service::as_handler() shares it, and it owns the core.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "jitembed/net/http/message.hpp"
#include "jitembed/server/detail/base64.hpp"
#include "jitembed/server/detail/content_encoding.hpp"
#include "jitembed/server/detail/service_core.hpp"
#include "jitembed/server/http/render.hpp"
#include "jitembed/server/http/response.hpp"
#include "jitembed/server/http/routes.hpp"

namespace jitembed::server::detail {

class http_front final {
 public:
  explicit http_front(std::shared_ptr<service_core> core) : core_(std::move(core)), c_(*core_) { add_routes(); }
  http_front(const http_front&) = delete;
  http_front& operator=(const http_front&) = delete;

  const std::shared_ptr<service_core>& core_ptr() const noexcept { return core_; }

  // The http::handler: every route of docs/server.md. Never blocks on model work.
  void handle(http::request&& req, http::responder respond) {
    const auto parts = split_path(req.target);
    const bool health = parts.size() >= 2 && parts[0] == "v2" && parts[1] == "health";
    if (!health && !c_.authorized(http::find_header(req.headers, "authorization"))) {
      auto r = error_response(401, bearer_auth::denied_message, errc::invalid_argument);
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return respond(std::move(r));
    }
    route_match match;
    const auto* h = routes_.find(req.method, parts, match);
    if (!h) return respond(not_found_route());
    (*h)(std::move(req), std::move(respond), match);
  }

 private:
  using route_handler = std::function<void(http::request&&, http::responder, const route_match&)>;

  // A route answered at once from the match alone.
  template <class F>
  void add_sync(methods m, std::string_view pattern, F f) {
    routes_.add(m, pattern,
                [f = std::move(f)](http::request&&, http::responder respond, const route_match& p) { respond(f(p)); });
  }
  static http::response empty_text(const result<void>& r) {
    return r ? text_response(200, "", "text/plain") : error_response(r.error());
  }
  static http::response empty_json(const result<void>& r) {
    return r ? json_response(200, ojson::object()) : error_response(r.error());
  }
  template <class T>
  static http::response json_or_error(const result<T>& r) {
    return r ? json_response(200, to_ojson(*r)) : error_response(r.error());
  }

  void add_routes() {
    add_sync(methods::get, "/metrics",
             [this](const route_match&) { return text_response(200, c_.metrics(), "text/plain; version=0.0.4"); });
    add_sync(methods::get, "/v2", [this](const route_match&) { return json_response(200, to_ojson(c_.metadata())); });
    add_sync(methods::get, "/v2/health/live", [](const route_match&) { return text_response(200, "", "text/plain"); });
    add_sync(methods::get, "/v2/health/ready", [this](const route_match&) { return empty_text(c_.server_ready()); });

    // The repository extension takes POST only.
    add_sync(methods::post, "/v2/repository/index", [this](const route_match&) {
      const auto index = c_.repository_index();
      return json_response(200, to_ojson(std::vector<index_entry>(index.begin(), index.end())));
    });
    for (const bool load : {true, false})
      routes_.add(methods::post, load ? "/v2/repository/models/{model}/load" : "/v2/repository/models/{model}/unload",
                  [this, load](http::request&& req, http::responder respond, const route_match& p) {
                    nlohmann::json body = nlohmann::json::object();
                    if (!req.body.empty()) {
                      body = nlohmann::json::parse(req.body, nullptr, /*allow_exceptions=*/false);
                      if (body.is_discarded() || !body.is_object())
                        return respond(bad_request("repository request body is not a JSON object"));
                    }
                    const std::string name(p["model"]);
                    auto params = repository_request(c_, name, body);
                    respond(empty_json(params ? c_.repository_call(name, load, *params) : params.error()));
                  });
    add_sync(methods::post, "/v2/repository/**", [](const route_match&) { return not_found_route(); });
    add_sync(methods::any, "/v2/repository/**", [](const route_match&) { return method_not_allowed(); });

    add_shared_memory_routes(shared_memory_kind::system);
    add_shared_memory_routes(shared_memory_kind::cuda);

    add_sync(methods::get, "/v2/models/stats",
             [this](const route_match&) { return json_or_error(c_.statistics_of({}, {})); });  // every model
    // /v2/models/{m}[/versions/{v}][/action]: POST is infer, every other action is read with any other method.
    for (const std::string_view base : {"/v2/models/{model}", "/v2/models/{model}/versions/{version}"}) {
      const std::string b(base);
      routes_.add(methods::post, b + "/infer",
                  [this](http::request&& req, http::responder respond, const route_match& p) {
                    infer(p["model"], p["version"], std::move(req), std::move(respond));
                  });
      add_sync(methods::post, b, [](const route_match&) { return method_not_allowed(); });
      add_sync(methods::post, b + "/{action}", [](const route_match&) { return method_not_allowed(); });
      add_sync(methods::any, b + "/stats",
               [this](const route_match& p) { return json_or_error(c_.statistics_of(p["model"], p["version"])); });
      add_sync(methods::any, b + "/ready",
               [this](const route_match& p) { return empty_text(c_.model_ready(p["model"], p["version"])); });
      add_sync(methods::any, b + "/config",
               [this](const route_match& p) { return json_or_error(c_.model_config_of(p["model"], p["version"])); });
      add_sync(methods::any, b,
               [this](const route_match& p) { return json_or_error(c_.model_metadata_of(p["model"], p["version"])); });
      add_sync(methods::any, b + "/{action}", [this](const route_match& p) {  // unknown action: 404 for a known model
        auto inst = c_.registry().find(p["model"], p["version"]);
        return inst ? not_found_route() : error_response(net::kserve::model_not_found(p["model"], p["version"]));
      });
    }
  }

  // Triton's system and CUDA shared-memory extensions (docs/server.md): one registry, one namespace of names.
  void add_shared_memory_routes(shared_memory_kind kind) {
    const std::string base = kind == shared_memory_kind::cuda ? "/v2/cudasharedmemory" : "/v2/systemsharedmemory";
    routes_.add(methods::post, base + "/region/{region}/register",
                [this, kind](http::request&& req, http::responder respond, const route_match& p) {
                  std::string name(p["region"]);
                  respond(kind == shared_memory_kind::cuda ? register_cuda_shared_memory(std::move(name), req.body)
                                                           : register_shared_memory(std::move(name), req.body));
                });
    add_sync(methods::post, base + "/region/{region}/unregister", [this, kind](const route_match& p) {
      c_.shared_memory().unregister_region(p["region"], kind);
      return json_response(200, ojson::object());
    });
    add_sync(methods::post, base + "/unregister", [this, kind](const route_match&) {
      c_.shared_memory().unregister_all(kind);
      return json_response(200, ojson::object());
    });
    add_sync(methods::get, base + "/status",
             [this, kind](const route_match&) { return json_or_error(c_.shared_memory().status({}, kind)); });
    add_sync(methods::get, base + "/region/{region}/status", [this, kind](const route_match& p) {
      return json_or_error(c_.shared_memory().status(p["region"], kind));
    });
    add_sync(methods::any, base + "/**", [](const route_match&) { return method_not_allowed(); });
  }

  // A register request's JSON body: {"key": string, "offset": unsigned (default 0), "byte_size": unsigned}.
  http::response register_shared_memory(std::string name, const std::string& body) {
    const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return bad_request("shared memory register request body is not a JSON object");
    const auto key = j.find("key");
    if (key == j.end() || !key->is_string()) return bad_request("shared memory register request has no string 'key'");
    std::uint64_t offset = 0;
    if (const auto it = j.find("offset"); it != j.end()) {
      if (!it->is_number_unsigned())
        return bad_request("shared memory register request 'offset' is not a non-negative integer");
      offset = it->get<std::uint64_t>();
    }
    const auto size = j.find("byte_size");
    if (size == j.end() || !size->is_number_unsigned())
      return bad_request("shared memory register request has no non-negative integer 'byte_size'");
    return empty_json(
        c_.shared_memory().register_region(std::move(name), key->get<std::string>(), offset, size->get<std::uint64_t>()));
  }

  // A CUDA register request's JSON body (tritonclient's): {"raw_handle": {"b64": base64 of the
  // cudaIpcMemHandle_t}, "device_id": unsigned, "byte_size": unsigned}.
  http::response register_cuda_shared_memory(std::string name, const std::string& body) {
    if (!c_.shared_memory().has_cuda()) return bad_request(std::string(kNoCudaSharedMemory));
    const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return bad_request("CUDA shared memory register request body is not a JSON object");
    const auto handle = j.find("raw_handle");
    const nlohmann::json* b64 = nullptr;
    if (handle != j.end() && handle->is_object())
      if (const auto it = handle->find("b64"); it != handle->end() && it->is_string()) b64 = &*it;
    if (!b64) return bad_request("CUDA shared memory register request has no 'raw_handle': {\"b64\": string}");
    auto raw = decode_base64(b64->get_ref<const std::string&>());
    if (!raw) return bad_request("CUDA shared memory region '" + name + "': raw_handle.b64 is not base64");
    const auto device = j.find("device_id");
    if (device == j.end() || !device->is_number_unsigned())
      return bad_request("CUDA shared memory register request has no non-negative integer 'device_id'");
    if (device->get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return bad_request("CUDA shared memory register request 'device_id' is out of range");
    const auto size = j.find("byte_size");
    if (size == j.end() || !size->is_number_unsigned())
      return bad_request("CUDA shared memory register request has no non-negative integer 'byte_size'");
    return empty_json(c_.shared_memory().register_cuda_region(std::move(name), *raw, device->get<std::int64_t>(),
                                                              size->get<std::uint64_t>()));
  }

  void infer(std::string_view name, std::string_view version, http::request&& req, http::responder respond) {
    // Content-Encoding gzip / deflate (tritonclient's request_compression_algorithm): inflated first, at
    // most max_body_bytes; Accept-Encoding (response_compression_algorithm): the answer deflated.
    const auto coding = parse_content_encoding(http::find_header(req.headers, "content-encoding"));
    if (!coding)
      return respond(bad_request("unsupported Content-Encoding '" +
                                 std::string(http::find_header(req.headers, "content-encoding")) +
                                 "' (gzip, deflate or identity)"));
    if (*coding != content_coding::identity) {
      auto body = inflate_body(req.body, *coding, c_.config().protocol.max_body_bytes);
      if (!body) return respond(error_response(body.error()));
      req.body = std::move(*body);
    }
    const auto answer = pick_accept_encoding(http::find_header(req.headers, "accept-encoding"));
    c_.pipeline().infer(name, version, body_decoder(std::move(req), c_.config().protocol),
                        [respond = std::move(respond), answer](result<infer_output> r) {
                          auto out = to_response(std::move(r));
                          if (answer != content_coding::identity && out.status == 200)
                            out = encode_body(std::move(out), answer);
                          respond(std::move(out));
                        });
  }

  std::shared_ptr<service_core> core_;
  service_core& c_;
  route_table<route_handler> routes_;
};

}  // namespace jitembed::server::detail
