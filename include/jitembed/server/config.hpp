// server_config / model_config: what the embedding service serves and how (JSON-loadable, strict: unknown
// keys and wrong types are errors naming the key).
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/codec/zstd_wire.hpp"
#include "jitembed/core/cuda_ipc.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"
#include "jitembed/net/kserve/limits.hpp"

namespace jitembed::server {

namespace kserve = net::kserve;

// Which loaded versions of a model the service keeps (Triton's version_policy): the `latest` num_versions
// in version order (numbers numerically, else strings), `all`, or the `specific` versions listed.
struct version_policy {
  enum class kind { latest, all, specific };
  kind which = kind::latest;
  std::size_t num_versions = 1;       // latest
  std::vector<std::string> versions;  // specific

  // From Triton's JSON ({"latest": {"num_versions": N}}, {"all": {}}, {"specific": {"versions": [V...]}})
  // or the flag form as a string; `where` names the enclosing key in error messages.
  static result<version_policy> parse(const nlohmann::json& j, std::string_view where);

  friend bool operator==(const version_policy&, const version_policy&) = default;
};

// One model version the service loads, with its batcher settings. `params` are the model's own settings
// (for the reference models: work, image_bucket, video_bucket, video_frames, text_max_length, text_dim,
// output_dtype; for any model: sleep_us, sleep_us_per_row); 0 in a batcher field keeps the default.
struct model_config {
  std::string name;
  std::string version = "1";
  std::size_t instances = 1;             // runner threads (model instances)
  std::size_t max_batch_size = 0;        // 0: the model's own maximum
  std::int64_t max_queue_delay_us = 1000;  // only while a batch runs (idle_dispatch) or always (not)
  bool idle_dispatch = true;             // an idle model runs what is queued at once (docs/batching.md)
  std::size_t queue_size = 1024;         // queued rows before "queue full" (503); 0 = unbounded
  std::size_t max_inflight_rows = 0;     // rows admitted (decode to response) before 503; 0: default_inflight_rows
  std::int64_t timeout_us = 0;           // default queue-time bound of a row; 0 = none
  std::vector<std::size_t> preferred_batch_sizes;
  nlohmann::json params = nlohmann::json::object();
  version_policy policy;                 // JSON key "version_policy"; default latest 1

  // Strict: an unknown key or a wrong type is invalid_argument naming `where` and the key.
  static result<model_config> parse(const nlohmann::json& j, std::string_view where = "models[]");
};

// The batcher (serving) keys of model_config, the one table every way of configuring a model reads:
// f(name, member pointer) for each, in the order the configuration documents them.
template <class F>
constexpr void for_each_serving_key(F&& f) {
  f(std::string_view("instances"), &model_config::instances);
  f(std::string_view("max_batch_size"), &model_config::max_batch_size);
  f(std::string_view("max_queue_delay_us"), &model_config::max_queue_delay_us);
  f(std::string_view("idle_dispatch"), &model_config::idle_dispatch);
  f(std::string_view("queue_size"), &model_config::queue_size);
  f(std::string_view("max_inflight_rows"), &model_config::max_inflight_rows);
  f(std::string_view("timeout_us"), &model_config::timeout_us);
}

inline bool is_serving_key(std::string_view k) {
  bool found = false;
  for_each_serving_key([&](std::string_view name, auto) { found = found || name == k; });
  return found;
}

// A serving key's value as Triton sends it (every parameter a string: "8", "true") in the JSON type
// model_config::parse reads; values that are not strings pass as they are (parse checks their type).
// Errors: invalid_argument "parameter 'K' is not a non-negative integer" / "... is not true or false"
// (callers say where), or "'K' is not a serving key".
inline result<nlohmann::json> serving_value(std::string_view k, const nlohmann::json& v) {
  result<nlohmann::json> out = fail(errc::invalid_argument, "'" + std::string(k) + "' is not a serving key");
  for_each_serving_key([&](std::string_view name, auto field) {
    if (name != k) return;
    using T = std::remove_cvref_t<decltype(std::declval<model_config&>().*field)>;
    if (!v.is_string()) {
      out = v;
    } else if constexpr (std::is_same_v<T, bool>) {
      const auto& s = v.get_ref<const std::string&>();
      out = s == "true" || s == "false" ? result<nlohmann::json>(nlohmann::json(s == "true"))
                                        : fail(errc::invalid_argument, "parameter '" + std::string(k) + "' is not true or false");
    } else {
      const auto& s = v.get_ref<const std::string&>();
      std::int64_t n = -1;
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
      out = ec == std::errc{} && end == s.data() + s.size() && n >= 0
                ? result<nlohmann::json>(nlohmann::json(n))
                : fail(errc::invalid_argument, "parameter '" + std::string(k) + "' is not a non-negative integer");
    }
  });
  return out;
}

// The admission bound a model_config gets when max_inflight_rows is 0: twice the queue (so the
// preprocessing in front of a full queue is bounded too), 4096 when the queue is unbounded.
constexpr std::size_t default_inflight_rows(std::size_t queue_size) noexcept {
  return queue_size ? 2 * queue_size : 4096;
}

struct server_config {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8000;
  std::size_t io_threads = 2;
  std::size_t preprocess_threads = 0;    // 0: hardware concurrency
  std::string auth_token;                // empty: no authentication
  std::string auth_token_file;           // read by load_auth_token()
  std::size_t max_rows_per_request = 1024;
  std::vector<model_config> models;
  std::string model_repository;          // a Triton-style model repository directory (jitembed-server loads it
                                         // with server::model_repository, component jitembed::repository); empty: none
  kserve::protocol_limits protocol;
  decode_limits decode;
  // Compressed outputs for clients that offer them (net/kserve/compression.hpp): zstd level, the least
  // saving that makes an output travel compressed, the smallest output considered.
  codec::wire_compression_options compression;
  // Triton's CUDA shared-memory extension (a CUDA program sets cuda::ipc_backend{}); empty: CUDA regions
  // are refused. Not a JSON key.
  any_cuda_ipc_backend cuda_ipc;

  // The members above by name (max_body_bytes, max_header_bytes, compression_level, compression_min_saving,
  // compression_min_bytes for the nested ones). Strict: an unknown key or a wrong type is invalid_argument.
  static result<server_config> parse(const nlohmann::json& j);
  // parse() of a JSON file: io_error when it cannot be read, corrupt_data when it is not JSON.
  static result<server_config> open(const std::string& path);
};

namespace detail {

// At most 18 decimal digits (fits int64): a numeric version or parameter.
inline bool is_decimal(std::string_view s) noexcept {
  return !s.empty() && s.size() < 19 && s.find_first_not_of("0123456789") == std::string_view::npos;
}

template <class T>
result<void> read_key(const nlohmann::json& j, std::string_view key, T& out, std::string_view where) {
  const auto it = j.find(key);
  if (it == j.end()) return {};
  const std::string what = std::string(where) + "." + std::string(key);
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return fail(errc::invalid_argument, "config: " + what + " is not a string");
    out = it->template get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return fail(errc::invalid_argument, "config: " + what + " is not a boolean");
    out = it->template get<bool>();
  } else if constexpr (std::is_unsigned_v<T>) {
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->template get<std::int64_t>() >= 0))
      return fail(errc::invalid_argument, "config: " + what + " is not a non-negative integer");
    const auto v = it->template get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<T>::max()))
      return fail(errc::invalid_argument, "config: " + what + " = " + std::to_string(v) + " is out of range");
    out = static_cast<T>(v);
  } else {
    if (!it->is_number_integer()) return fail(errc::invalid_argument, "config: " + what + " is not an integer");
    out = it->template get<T>();
  }
  return {};
}

// The whole file; nullopt when it cannot be opened.
inline std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `also`: keys known besides `keys` (a table's lookup).
inline result<void> only_keys(const nlohmann::json& j, std::initializer_list<std::string_view> keys, std::string_view where,
                              bool (*also)(std::string_view) = nullptr) {
  if (!j.is_object()) return fail(errc::invalid_argument, "config: " + std::string(where) + " is not an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = also && also(it.key());
    for (auto k : keys) known = known || it.key() == k;
    if (!known) return fail(errc::invalid_argument, "config: unknown key " + std::string(where) + "." + it.key());
  }
  return {};
}

}  // namespace detail

// A version_policy from its flag form: "latest" (1), "latestN" or "latest:N", "all", "specific:V[+V...]".
inline result<version_policy> parse_version_policy(std::string_view s) {
  const auto bad = [&] {
    return fail(errc::invalid_argument, "version_policy '" + std::string(s) + "' is not latest[N], latest:N, all or specific:V[+V...]");
  };
  version_policy p;
  if (s == "all") {
    p.which = version_policy::kind::all;
    return p;
  }
  if (s.starts_with("specific:")) {
    p.which = version_policy::kind::specific;
    std::string_view rest = s.substr(9);
    while (true) {
      const auto plus = rest.find('+');
      const auto v = rest.substr(0, plus);
      if (v.empty()) return bad();
      p.versions.emplace_back(v);
      if (plus == std::string_view::npos) break;
      rest = rest.substr(plus + 1);
    }
    return p;
  }
  if (!s.starts_with("latest")) return bad();
  std::string_view n = s.substr(6);
  if (n.empty()) return p;
  if (n.starts_with(':')) n = n.substr(1);
  if (n.empty()) return bad();
  if (n.size() > 6 || n.find_first_not_of("0123456789") != std::string_view::npos) return bad();
  p.num_versions = std::stoul(std::string(n));
  if (p.num_versions < 1) return fail(errc::invalid_argument, "version_policy '" + std::string(s) + "': latest needs at least 1 version");
  return p;
}

inline result<version_policy> version_policy::parse(const nlohmann::json& j, std::string_view where) {
  const std::string what = "config: " + std::string(where) + ".version_policy";
  if (j.is_string()) {
    auto p = parse_version_policy(j.get<std::string>());
    if (!p) return fail(errc::invalid_argument, what + ": " + p.error().message);
    return p;
  }
  if (!j.is_object() || j.size() != 1) return fail(errc::invalid_argument, what + " is not one of {\"latest\": {...}}, {\"all\": {}}, {\"specific\": {...}}");
  version_policy p;
  const auto& [key, body] = *j.items().begin();
  if (!body.is_object()) return fail(errc::invalid_argument, what + "." + key + " is not an object");
  if (key == "all") {
    JITEMBED_TRY(detail::only_keys(body, {}, std::string(where) + ".version_policy.all"));
    p.which = version_policy::kind::all;
  } else if (key == "latest") {
    JITEMBED_TRY(detail::only_keys(body, {"num_versions"}, std::string(where) + ".version_policy.latest"));
    JITEMBED_TRY(detail::read_key(body, "num_versions", p.num_versions, std::string(where) + ".version_policy.latest"));
    if (p.num_versions < 1) return fail(errc::invalid_argument, what + ".latest.num_versions must be at least 1");
  } else if (key == "specific") {
    JITEMBED_TRY(detail::only_keys(body, {"versions"}, std::string(where) + ".version_policy.specific"));
    p.which = version_policy::kind::specific;
    const auto it = body.find("versions");
    if (it == body.end() || !it->is_array() || it->empty()) return fail(errc::invalid_argument, what + ".specific.versions is not a non-empty array");
    for (const auto& v : *it) {
      if (v.is_number_unsigned()) p.versions.push_back(std::to_string(v.get<std::uint64_t>()));
      else if (v.is_string() && !v.get<std::string>().empty()) p.versions.push_back(v.get<std::string>());
      else return fail(errc::invalid_argument, what + ".specific.versions holds something that is not a version");
    }
  } else {
    return fail(errc::invalid_argument, "config: unknown key " + std::string(where) + ".version_policy." + key);
  }
  return p;
}

// Triton's JSON form (what GET /v2/models/{m}/config reports).
inline nlohmann::json to_json(const version_policy& p) {
  switch (p.which) {
    case version_policy::kind::all: return {{"all", nlohmann::json::object()}};
    case version_policy::kind::specific: {
      nlohmann::json vs = nlohmann::json::array();
      for (const auto& v : p.versions)
        vs.push_back(detail::is_decimal(v) ? nlohmann::json(std::stoll(v)) : nlohmann::json(v));
      return {{"specific", {{"versions", vs}}}};
    }
    case version_policy::kind::latest: break;
  }
  return {{"latest", {{"num_versions", p.num_versions}}}};
}

inline result<model_config> model_config::parse(const nlohmann::json& j, std::string_view where) {
  JITEMBED_TRY(detail::only_keys(j, {"name", "version", "preferred_batch_sizes", "params", "version_policy"}, where, is_serving_key));
  model_config m;
  JITEMBED_TRY(detail::read_key(j, "name", m.name, where));
  if (m.name.empty()) return fail(errc::invalid_argument, "config: " + std::string(where) + ".name is missing");
  if (auto it = j.find("version"); it != j.end() && it->is_number_unsigned()) {
    m.version = std::to_string(it->get<std::uint64_t>());
  } else {
    JITEMBED_TRY(detail::read_key(j, "version", m.version, where));
  }
  result<void> read;
  for_each_serving_key([&](std::string_view k, auto field) {
    if (read) read = detail::read_key(j, k, m.*field, where);
  });
  JITEMBED_TRY(read);
  if (auto it = j.find("preferred_batch_sizes"); it != j.end()) {
    if (!it->is_array()) return fail(errc::invalid_argument, "config: " + std::string(where) + ".preferred_batch_sizes is not an array");
    for (const auto& v : *it) {
      if (!v.is_number_unsigned()) return fail(errc::invalid_argument, "config: " + std::string(where) + ".preferred_batch_sizes holds a non-integer");
      m.preferred_batch_sizes.push_back(v.get<std::size_t>());
    }
  }
  if (auto it = j.find("params"); it != j.end()) {
    if (!it->is_object()) return fail(errc::invalid_argument, "config: " + std::string(where) + ".params is not an object");
    m.params = *it;
  }
  if (auto it = j.find("version_policy"); it != j.end()) {
    JITEMBED_ASSIGN_OR_RETURN(m.policy, version_policy::parse(*it, where));
  }
  if (m.instances < 1 || m.instances > 1024)
    return fail(errc::invalid_argument, "config: " + std::string(where) + ".instances " + std::to_string(m.instances) + " not in [1, 1024]");
  if (m.max_queue_delay_us < 0) return fail(errc::invalid_argument, "config: " + std::string(where) + ".max_queue_delay_us is negative");
  if (m.timeout_us < 0) return fail(errc::invalid_argument, "config: " + std::string(where) + ".timeout_us is negative");
  return m;
}

inline result<server_config> server_config::parse(const nlohmann::json& j) {
  JITEMBED_TRY(detail::only_keys(j, {"host", "port", "io_threads", "preprocess_threads", "auth_token", "auth_token_file",
                                     "max_rows_per_request", "max_body_bytes", "max_header_bytes", "models", "model_repository",
                                     "compression_level", "compression_min_saving", "compression_min_bytes"}, "config"));
  server_config c;
  JITEMBED_TRY(detail::read_key(j, "host", c.host, "config"));
  JITEMBED_TRY(detail::read_key(j, "port", c.port, "config"));
  JITEMBED_TRY(detail::read_key(j, "io_threads", c.io_threads, "config"));
  JITEMBED_TRY(detail::read_key(j, "preprocess_threads", c.preprocess_threads, "config"));
  JITEMBED_TRY(detail::read_key(j, "auth_token", c.auth_token, "config"));
  JITEMBED_TRY(detail::read_key(j, "auth_token_file", c.auth_token_file, "config"));
  JITEMBED_TRY(detail::read_key(j, "model_repository", c.model_repository, "config"));
  JITEMBED_TRY(detail::read_key(j, "max_rows_per_request", c.max_rows_per_request, "config"));
  JITEMBED_TRY(detail::read_key(j, "max_body_bytes", c.protocol.max_body_bytes, "config"));
  JITEMBED_TRY(detail::read_key(j, "max_header_bytes", c.protocol.max_header_bytes, "config"));
  JITEMBED_TRY(detail::read_key(j, "compression_level", c.compression.level, "config"));
  JITEMBED_TRY(detail::read_key(j, "compression_min_bytes", c.compression.min_bytes, "config"));
  if (auto it = j.find("compression_min_saving"); it != j.end()) {
    if (!it->is_number() || it->get<double>() < 0.0 || it->get<double>() > 1.0)
      return fail(errc::invalid_argument, "config: config.compression_min_saving is not a number in [0, 1] (1: never compress)");
    c.compression.min_saving = it->get<double>();
  }
  if (auto it = j.find("models"); it != j.end()) {
    if (!it->is_array()) return fail(errc::invalid_argument, "config: config.models is not an array");
    for (std::size_t i = 0; i < it->size(); ++i) {
      JITEMBED_ASSIGN_OR_RETURN(auto m, model_config::parse((*it)[i], "models[" + std::to_string(i) + "]"));
      c.models.push_back(std::move(m));
    }
  }
  return c;
}

inline result<server_config> server_config::open(const std::string& path) {
  const auto text = detail::read_file(path);
  if (!text) return fail(errc::io_error, "config: cannot open '" + path + "'");
  auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail(errc::corrupt_data, "config: '" + path + "' is not valid JSON");
  return parse(j);
}

// Reads the bearer token from auth_token_file into auth_token (surrounding whitespace trimmed).
inline result<void> load_auth_token(server_config& c) {
  if (c.auth_token_file.empty()) return {};
  const auto text = detail::read_file(c.auth_token_file);
  if (!text) return fail(errc::io_error, "config: cannot open auth token file '" + c.auth_token_file + "'");
  const std::string& t = *text;
  const auto b = t.find_first_not_of(" \t\r\n"), e = t.find_last_not_of(" \t\r\n");
  if (b == std::string::npos) return fail(errc::invalid_argument, "config: auth token file '" + c.auth_token_file + "' is empty");
  c.auth_token = t.substr(b, e - b + 1);
  return {};
}

}  // namespace jitembed::server
