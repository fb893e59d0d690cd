// parse_model_spec ("NAME[:k=v,...]", the jitembed-server --model syntax) for the bindings: the library's
// server/model_spec.hpp where the tree has it, else a copy of the parser tools/jitembed_server.cpp had
// before it moved into the library (delete this fallback once every supported tree has the header).
#pragma once

#if __has_include("jitembed/server/model_spec.hpp") && !defined(JITEMBED_PYTHON_SPEC_FALLBACK)
#include "jitembed/server/model_spec.hpp"

namespace jitembed::python {
using server::parse_model_spec;
}  // namespace jitembed::python

#else
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "jitembed/core/error.hpp"
#include "jitembed/server/config.hpp"

namespace jitembed::python {

// Batcher keys set the model_config; every other key is a model parameter (digits become integers).
inline result<server::model_config> parse_model_spec(std::string_view spec_view, const server::model_config& defaults = {}) {
  const std::string spec(spec_view);
  server::model_config m = defaults;
  const auto colon = spec.find(':');
  m.name = spec.substr(0, colon);
  if (m.name.empty()) return fail(errc::invalid_argument, "--model '" + spec + "': empty model name");
  if (colon == std::string::npos) return m;
  const std::string rest = spec.substr(colon + 1);
  nlohmann::json cfg = nlohmann::json::object();
  cfg["name"] = m.name;
  std::size_t pos = 0;
  while (pos <= rest.size()) {
    const auto comma = rest.find(',', pos);
    const std::string kv = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? rest.size() + 1 : comma + 1;
    if (kv.empty()) continue;
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return fail(errc::invalid_argument, "--model '" + spec + "': '" + kv + "' is not key=value");
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    nlohmann::json value = v;
    if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos && v.size() < 19) value = std::stoll(v);
    if (v == "true" || v == "false") value = v == "true";
    if (k == "version") m.version = v;
    else if (k == "instances" || k == "max_batch_size" || k == "max_queue_delay_us" || k == "queue_size" || k == "timeout_us" ||
             k == "max_inflight_rows" || k == "idle_dispatch")
      cfg[k] = value;
    else m.params[k] = value;
  }
  cfg["version"] = m.version;
  auto parsed = server::model_config_from_json(cfg, "--model " + m.name);
  if (!parsed) return parsed.error();
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    const auto& k = it.key();
    if (k == "instances") m.instances = parsed->instances;
    if (k == "max_batch_size") m.max_batch_size = parsed->max_batch_size;
    if (k == "max_queue_delay_us") m.max_queue_delay_us = parsed->max_queue_delay_us;
    if (k == "queue_size") m.queue_size = parsed->queue_size;
    if (k == "max_inflight_rows") m.max_inflight_rows = parsed->max_inflight_rows;
    if (k == "idle_dispatch") m.idle_dispatch = parsed->idle_dispatch;
    if (k == "timeout_us") m.timeout_us = parsed->timeout_us;
  }
  return m;
}

}  // namespace jitembed::python
#endif
