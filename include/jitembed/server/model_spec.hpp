// The one-line model spec of `jitembed-server --model` and the Python `jitembed.Server(models=[...])`:
// "NAME[:k=v,...]" → server::model_config.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "jitembed/core/error.hpp"
#include "jitembed/server/config.hpp"
#include "jitembed/server/split_parameters.hpp"

namespace jitembed::server {

// "NAME[:k=v,...]" over `defaults`: `version` and `version_policy` (latest[N], latest:N, all,
// specific:V[+V...]) set the version fields; the batcher keys (split_parameters) are checked like the JSON
// configuration's; every other key is a model parameter (work, sleep_us, ...; digits become integers, true/false booleans).
// Batcher keys the spec does not name keep their value in `defaults`. Errors: invalid_argument naming the
// spec and the key.
inline result<model_config> parse_model_spec(std::string_view spec, const model_config& defaults = {}) {
  model_config m = defaults;
  const auto colon = spec.find(':');
  m.name = std::string(spec.substr(0, colon));
  const std::string where = "--model '" + std::string(spec) + "'";
  if (m.name.empty()) return fail(errc::invalid_argument, where + ": empty model name");
  if (colon == std::string_view::npos) return m;
  nlohmann::json cfg = nlohmann::json::object();
  cfg["name"] = m.name;
  nlohmann::json pairs = nlohmann::json::object();  // every key but the version fields, split below
  std::string_view rest = spec.substr(colon + 1);
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view kv = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (kv.empty()) continue;
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) return fail(errc::invalid_argument, where + ": '" + std::string(kv) + "' is not key=value");
    const std::string k(kv.substr(0, eq)), v(kv.substr(eq + 1));
    nlohmann::json value = v;
    if (detail::is_decimal(v)) value = std::stoll(v);
    if (v == "true" || v == "false") value = v == "true";
    if (k == "version") {
      if (v.empty()) return fail(errc::invalid_argument, where + ": empty version");
      m.version = v;
    } else if (k == "version_policy") {
      auto p = parse_version_policy(v);
      if (!p) return fail(errc::invalid_argument, where + ": " + p.error().message);
      m.policy = std::move(*p);
    } else {
      pairs[k] = value;
    }
  }
  auto split = split_parameters(pairs);
  cfg.update(split.serving);
  if (!split.model.empty()) m.params.update(split.model);
  JITEMBED_ASSIGN_OR_RETURN(auto parsed, model_config::parse(cfg, where));
  // Keep the defaults for the batcher keys the spec did not name.
  for_each_serving_key([&](std::string_view k, auto field) {
    if (cfg.contains(k)) m.*field = parsed.*field;
  });
  return m;
}

}  // namespace jitembed::server
