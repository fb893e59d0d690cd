// server::local_models: a repository's models loaded into this process without a service, each version the model
// jitembed-server would serve, with the same fingerprint (embeddings share cache keys).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/models/any_model.hpp"
#include "jitembed/server/config.hpp"
#include "jitembed/server/repository/detail/version_policy.hpp"
#include "jitembed/server/repository/model_source.hpp"

namespace jitembed::server {

// A model_loader that keeps what it is given. Not copyable (a repository holds no reference to it after a
// load returns, but find()'s pointers point into it); thread-safe.
class local_models final : public model_loader {
 public:
  local_models() = default;
  local_models(const local_models&) = delete;
  local_models& operator=(const local_models&) = delete;

  result<void> load(model_config cfg, models::any_model m) override {
    if (cfg.name.empty() || cfg.version.empty())
      return fail(errc::invalid_argument, "local_models: a model needs a name and a version");
    std::lock_guard lock(mu_);
    std::string v = cfg.version;
    models_[cfg.name].insert_or_assign(std::move(v), entry{std::move(cfg), std::move(m)});
    return {};
  }

  result<void> unload(std::string_view name, std::string_view version) override {
    std::lock_guard lock(mu_);
    const auto it = models_.find(std::string(name));
    if (it == models_.end()) return fail(errc::not_found, "local_models: no model '" + std::string(name) + "'");
    if (version.empty()) {
      models_.erase(it);
      return {};
    }
    if (it->second.erase(std::string(version)) == 0)
      return fail(errc::not_found,
                  "local_models: no version '" + std::string(version) + "' of '" + std::string(name) + "'");
    if (it->second.empty()) models_.erase(it);
    return {};
  }

  std::vector<std::pair<std::string, std::string>> loaded() const override {
    std::lock_guard lock(mu_);
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [n, versions] : models_)
      for (const auto& [v, e] : versions) out.emplace_back(n, v);
    return out;
  }

  // Version `version` of `name`, or its newest version (the service's version order: the largest number)
  // when `version` is empty; nullptr when not loaded. Valid until that version is unloaded or replaced.
  const models::any_model* find(std::string_view name, std::string_view version = {}) const {
    const entry* e = lookup(name, version);
    return e ? &e->model : nullptr;
  }
  // The serving settings the repository gave that version (max_batch_size, parameters, ...), or nullptr.
  const model_config* config(std::string_view name, std::string_view version = {}) const {
    const entry* e = lookup(name, version);
    return e ? &e->config : nullptr;
  }

 private:
  struct entry {
    model_config config;
    models::any_model model;
  };

  const entry* lookup(std::string_view name, std::string_view version) const {
    std::lock_guard lock(mu_);
    const auto it = models_.find(std::string(name));
    if (it == models_.end() || it->second.empty()) return nullptr;
    if (version.empty()) return &it->second.rbegin()->second;  // the newest
    const auto v = it->second.find(std::string(version));
    return v == it->second.end() ? nullptr : &v->second;
  }

  mutable std::mutex mu_;
  // name -> version (in the service's version order) -> entry; map nodes do not move, so find()'s pointers
  // stay valid while their version stays loaded
  std::map<std::string, std::map<std::string, entry, detail::version_order>> models_;
};

}  // namespace jitembed::server
