// A remote model's cache-key identity and KServe metadata over HTTP (GET /v2/models/<m>, Triton's .../config
// for the parameters), the errc of a failed HTTP answer, and the shared-memory region calls over HTTP.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/client/detail/client_shm.hpp"
#include "jitembed/client/endpoints.hpp"
#include "jitembed/client/options.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/net/http/client.hpp"

namespace jitembed::client::detail {

// The client's one JSON type, net/kserve's (insertion-ordered): a second basic_json would be instantiated and
// optimized again in every header-only program (issue #33's build cost).
using json = nlohmann::ordered_json;

// parameters.<key> as a string: a plain string (jitembed metadata) or {"string_value": ".."} (model config).
inline std::optional<std::string> identity_parameter(const json& doc, const char* key) {
  if (!doc.is_object()) return std::nullopt;
  const auto p = doc.find("parameters");
  if (p == doc.end() || !p->is_object()) return std::nullopt;
  const auto v = p->find(key);
  if (v == p->end()) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) {
    const auto s = v->find("string_value");
    if (s != v->end() && s->is_string()) return s->get<std::string>();
  }
  return std::nullopt;
}

// The identity in `params`' parameters (fingerprint, preprocess_key), its input the name of `inputs_doc`'s
// first `inputs_key` entry; nullopt when a parameter is missing.
inline std::optional<model_identity> identity_of(const json& params, const json& inputs_doc,
                                                 const char* inputs_key) {
  auto fp = identity_parameter(params, "fingerprint");
  auto key = identity_parameter(params, "preprocess_key");
  if (!fp || !key) return std::nullopt;
  model_identity id{std::move(*fp), std::move(*key), {}};
  // find() on anything but an object is end()
  if (auto in = inputs_doc.find(inputs_key); in != inputs_doc.end() && in->is_array() && !in->empty() &&
                                             (*in)[0].is_object() && (*in)[0].contains("name") &&
                                             (*in)[0]["name"].is_string())
    id.input = (*in)[0]["name"].get<std::string>();
  return id;
}

// What the client says when an endpoint serves `model` but publishes no identity for it.
inline error_info no_identity_error(const std::string& model, const std::string& url) {
  return fail(errc::not_found, "model '" + model + "' on " + url +
                                   " publishes no parameters.fingerprint / preprocess_key: supply client_options.identities"
                                   " (the programs: --identity " + model + "[:INPUT]=FINGERPRINT,PREPROCESS_KEY), or add both"
                                   " parameters to its config.pbtxt");
}

inline net::http::header_list auth_headers(const client_options& opts) {
  net::http::header_list h;
  if (!opts.auth_token.empty()) h.emplace_back("Authorization", "Bearer " + opts.auth_token);
  return h;
}

// The errc of a failed HTTP answer: the body's "errc" (jitembed-server) when present and known, else the
// status (Triton): 400 invalid_argument, 404 not_found, 408/504 timeout, 429/503 unavailable, 499
// cancelled, 413/431 limit_exceeded, other 4xx invalid_argument, other 5xx internal.
inline error_info http_error(int status, std::string_view body, std::string_view what) {
  std::string message;
  std::optional<errc> code;
  auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    if (auto it = j.find("error"); it != j.end() && it->is_string()) message = it->get<std::string>();
    if (auto it = j.find("errc"); it != j.end() && it->is_string()) code = errc_from_string(it->get<std::string>());
  }
  if (message.empty()) message = std::string(body.substr(0, 200));
  if (!code || *code == errc::ok) {
    switch (status) {
      case 400: code = errc::invalid_argument; break;
      case 404: code = errc::not_found; break;
      case 408:
      case 504: code = errc::timeout; break;
      case 429:
      case 503: code = errc::unavailable; break;
      case 499: code = errc::cancelled; break;
      case 413:
      case 431: code = errc::limit_exceeded; break;
      default: code = status >= 400 && status < 500 ? errc::invalid_argument : errc::internal;
    }
  }
  return fail(*code, std::string(what) + ": HTTP " + std::to_string(status) + ": " + message);
}

// The identity of `model` on the endpoint `a`: an error when it cannot be asked (transport, HTTP status: the
// caller tries the next endpoint), nullopt when the endpoint answers but publishes no identity.
inline result<std::optional<model_identity>> fetch_identity(net::http::client& hc, const endpoint_address& a,
                                                             const std::string& model, const client_options& opts) {
  const auto h = auth_headers(opts);
  auto r = hc.get("/v2/models/" + model, h);
  if (!r) return r.error();
  if (r->status != 200) return http_error(r->status, r->body, "metadata of '" + model + "' from " + a.url);
  const auto meta = json::parse(r->body, nullptr, false);
  if (auto id = identity_of(meta, meta, "inputs")) return id;
  auto rc = hc.get("/v2/models/" + model + "/config", h);  // Triton: the model config's parameters
  if (!rc || rc->status != 200) return std::optional<model_identity>{};
  return identity_of(json::parse(rc->body, nullptr, false), meta, "inputs");
}

// GET /v2/models/<m> on the endpoint `a` as model_metadata: the transport's or the HTTP status's error
// (404: not_found), or decode_failed naming the field when the body is not KServe model metadata.
inline result<model_metadata> fetch_metadata(net::http::client& hc, const endpoint_address& a, const std::string& model,
                                             const client_options& opts) {
  auto r = hc.get("/v2/models/" + model, auth_headers(opts));
  if (!r) return r.error();
  if (r->status != 200) return http_error(r->status, r->body, "metadata of '" + model + "' from " + a.url);
  const auto doc = json::parse(r->body, nullptr, false);
  const auto bad = [&](const std::string& what) {
    return fail(errc::decode_failed, "metadata of '" + model + "' from " + a.url + ": " + what);
  };
  if (!doc.is_object()) return bad("not a JSON object");
  model_metadata md;
  const auto str = [](const json& j, const char* k) -> std::optional<std::string> {
    const auto it = j.find(k);
    if (it == j.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  md.name = str(doc, "name").value_or(model);
  md.platform = str(doc, "platform").value_or("");
  if (auto v = doc.find("versions"); v != doc.end() && v->is_array())
    for (const auto& e : *v)
      if (e.is_string()) md.versions.push_back(e.get<std::string>());
  for (auto [key, dst] : {std::pair{"inputs", &md.inputs}, std::pair{"outputs", &md.outputs}}) {
    const auto list = doc.find(key);
    if (list == doc.end()) continue;
    if (!list->is_array()) return bad(std::string("'") + key + "' is not an array");
    for (const auto& t : *list) {
      if (!t.is_object()) return bad(std::string("an entry of '") + key + "' is not an object");
      served_tensor st;
      auto name = str(t, "name");
      auto dt = str(t, "datatype");
      const auto shp = t.find("shape");
      if (!name || !dt || shp == t.end() || !shp->is_array())
        return bad(std::string("an entry of '") + key + "' lacks name, datatype or shape");
      st.name = std::move(*name);
      st.datatype = std::move(*dt);
      for (const auto& d : *shp) {
        if (!d.is_number_integer()) return bad("tensor '" + st.name + "' has a non-integer dimension");
        st.shape.push_back(d.get<std::int64_t>());
      }
      dst->push_back(std::move(st));
    }
  }
  return md;
}

// POST /v2/systemsharedmemory/region/<region>/register (or .../unregister, `key` empty) through an http(s)
// endpoint's client.
inline shm_call_result http_shm_call(net::http::client& hc, const std::string& region, const std::string& key,
                                     std::size_t bytes, const client_options& opts) {
  const bool reg = !key.empty();
  const std::string body = reg ? json{{"key", key}, {"offset", 0}, {"byte_size", bytes}}.dump() : "{}";
  auto h = auth_headers(opts);
  h.emplace_back("Content-Type", "application/json");
  auto r = hc.post("/v2/systemsharedmemory/region/" + region + (reg ? "/register" : "/unregister"), body, h);
  if (!r) return {false, false, r.error().message};
  if (r->status == 200) return {true, true, {}};
  return {false, r->status != 502 && r->status != 503 && r->status != 504,
          "HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 300)};
}

}  // namespace jitembed::client::detail
