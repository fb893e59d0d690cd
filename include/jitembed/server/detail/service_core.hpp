// server::service's core for every front end: registry, pipeline, shared-memory regions, auth, and typed
// queries whose answers (detail/answers.hpp) each front writes in its own protocol. It knows no HTTP.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/core/error.hpp"
#include "jitembed/net/kserve/status.hpp"
#include "jitembed/server/config.hpp"
#include "jitembed/server/detail/answers.hpp"
#include "jitembed/server/detail/auth.hpp"
#include "jitembed/server/detail/metrics.hpp"
#include "jitembed/server/detail/pipeline.hpp"
#include "jitembed/server/detail/registry.hpp"
#include "jitembed/server/model_instance.hpp"
#include "jitembed/server/repository/model_source.hpp"
#include "jitembed/server/shm/detail/registry.hpp"
#include "jitembed/server/split_parameters.hpp"

namespace jitembed::server {

inline constexpr std::string_view kServerVersion = "0.1.0";

namespace detail {

// A repository load / unload parameter's value as the request sent it (Triton sends strings; an object or an
// array, version_policy's object form, comes as its text to be parsed again).
struct structured_text {
  std::string text;
};
using repository_value =
    std::variant<std::nullptr_t, bool, std::int64_t, std::uint64_t, double, std::string, structured_text>;
using repository_parameters = std::vector<std::pair<std::string, repository_value>>;

// A load request's parameters as a model_config: batcher settings and the model's own parameters come in
// one set (Triton sends every value as a string). `version` is the "version" parameter.
inline result<model_config> load_request_config(const std::string& name, const std::string& version,
                                                const nlohmann::json& params) {
  nlohmann::json cfgj = nlohmann::json::object();
  cfgj["name"] = name;
  if (!version.empty()) cfgj["version"] = version;
  auto split = split_parameters(params, {"version", "version_policy"});
  for (auto it = split.serving.begin(); it != split.serving.end(); ++it) {
    auto v = serving_value(it.key(), *it);  // Triton sends strings
    if (!v) return fail(errc::invalid_argument, "repository " + v.error().message);
    cfgj[it.key()] = std::move(*v);
  }
  // the flag form ("latest2", "all", "specific:1+3") or Triton's object
  if (params.contains("version_policy")) cfgj["version_policy"] = params["version_policy"];
  cfgj["params"] = std::move(split.model);
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
        pipeline_(registry_, config_, &shared_memory_) {}
  service_core(const service_core&) = delete;
  service_core& operator=(const service_core&) = delete;
  ~service_core() { registry_.shutdown(); }

  model_registry& registry() noexcept { return registry_; }
  const model_registry& registry() const noexcept { return registry_; }
  inference_pipeline& pipeline() noexcept { return pipeline_; }
  // The shared-memory regions, system and CUDA (register / unregister / status for every front end).
  shared_memory_registry& shared_memory() noexcept { return shared_memory_; }
  const server_config& config() const noexcept { return config_; }

  // The Prometheus text of every loaded version.
  std::string metrics() const {
    const auto held = registry_.select();
    std::vector<const model_instance*> ptrs;
    for (const auto& h : held) ptrs.push_back(h.get());
    return metrics_text(ptrs);
  }

  // Whether the bearer token (when one is configured) allows a call with this Authorization value.
  bool authorized(std::string_view authorization) const { return !auth_.enabled() || auth_.allows(authorization); }

  // cuda_shared_memory only with a CUDA backend (server_config::cuda_ipc).
  server_metadata metadata() const {
    server_metadata a{
        "jitembed",
        std::string(kServerVersion),
        {"binary_tensor_data", "statistics", "model_configuration", "model_repository", "system_shared_memory"}};
    if (shared_memory_.has_cuda()) a.extensions.emplace_back("cuda_shared_memory");
    return a;
  }

  // Not draining. Errors: unavailable (draining).
  result<void> server_ready() const {
    if (!registry_.ready()) return inference_pipeline::not_ready();
    return {};
  }
  // Ready to serve the model (version): the service is not draining, the version is loaded and no batch
  // runs past its requests' deadline. Errors: unavailable (draining, busy), not_found.
  result<void> model_ready(std::string_view name, std::string_view version) {
    if (!registry_.ready()) return inference_pipeline::not_ready();  // draining: before any model check
    JITEMBED_ASSIGN_OR_RETURN(auto inst, find(name, version));
    if (!inst->ready())
      return fail(errc::unavailable, "model '" + inst->name() + "' version " + inst->version() +
                                         " is busy: a batch runs past its requests' deadline");
    return {};
  }
  // Errors (these three): not_found (the model or version is not loaded).
  result<model_metadata> model_metadata_of(std::string_view name, std::string_view version) {
    JITEMBED_ASSIGN_OR_RETURN(auto inst, find(name, version));
    return metadata_of(*inst, registry_.versions_of(name));
  }
  result<model_config_answer> model_config_of(std::string_view name, std::string_view version) {
    JITEMBED_ASSIGN_OR_RETURN(auto inst, find(name, version));
    return config_of(*inst, registry_.policy_of(name, inst->config().policy));
  }
  // Of one model (version), or of every model when `name` is empty.
  result<statistics> statistics_of(std::string_view name, std::string_view version) const {
    const auto held = registry_.select(name, version);
    if (held.empty() && !name.empty()) return as_error(net::kserve::model_not_found(name, version));
    statistics a;
    for (const auto& h : held) a.model_stats.push_back(detail::statistics_of(*h));
    return a;
  }
  std::vector<repository_entry> repository_index() const { return registry_.repository_index(); }

  // Whether `name` comes from the attached model repository (its config.pbtxt is its configuration).
  bool from_repository(const std::string& name) const {
    const auto src = registry_.source();
    return src && src->has(name);
  }
  // A repository load / unload. A repository model takes no parameters and is read again from its
  // directory; any other is loaded from `params` (serving keys, "version", "version_policy", the model's own).
  // Errors: invalid_argument (parameters of a repository model, a bad parameter), the load's.
  result<void> repository_call(const std::string& name, bool load, const repository_parameters& params) {
    if (from_repository(name)) {
      if (!params.empty()) return fail(errc::invalid_argument, repository_parameters_refused(name));
      const auto src = registry_.source();
      return load ? src->load(registry_, name) : src->unload(registry_, name);
    }
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : params)
      j[k] = std::visit(
          [](const auto& x) -> nlohmann::json {
            if constexpr (std::is_same_v<std::decay_t<decltype(x)>, structured_text>)
              return nlohmann::json::parse(x.text, nullptr, /*allow_exceptions=*/false);
            else
              return x;
          },
          v);
    std::string version;
    if (auto it = j.find("version"); it != j.end()) {
      if (it->is_string())
        version = it->get<std::string>();
      else if (it->is_number_unsigned())
        version = std::to_string(it->get<std::uint64_t>());
      else
        return fail(errc::invalid_argument, "repository parameter 'version' is not a string or an unsigned integer");
    }
    if (!load) return registry_.unload(name, version);
    auto cfg = load_request_config(name, version, j);
    if (!cfg) return fail(errc::invalid_argument, cfg.error().message);
    return registry_.load(*cfg);
  }
  static std::string repository_parameters_refused(const std::string& name) {
    return "model '" + name +
           "' comes from the model repository: its config.pbtxt is its configuration "
           "(load/unload take no parameters)";
  }

 private:
  result<std::shared_ptr<model_instance>> find(std::string_view name, std::string_view version) {
    auto inst = registry_.find(name, version);
    if (!inst) return as_error(net::kserve::model_not_found(name, version));
    return std::move(*inst);
  }

  server_config config_;
  bearer_auth auth_;
  model_registry registry_;
  shared_memory_registry shared_memory_;  // before pipeline_: outlives it
  inference_pipeline pipeline_;           // after registry_: destroyed (its pool's threads stopped) before it
};

}  // namespace detail

}  // namespace jitembed::server
