// The service's model registry: loaded model versions (hot load / unload, atomic switch and drain, Triton's
// version policy), the attached model repository and its index. It knows no HTTP.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/net/kserve/status.hpp"
#include "jitembed/server/config.hpp"
#include "jitembed/server/model_instance.hpp"
#include "jitembed/server/model_status.hpp"
#include "jitembed/server/repository/detail/version_policy.hpp"
#include "jitembed/server/repository/model_source.hpp"

namespace jitembed::server::detail {

// Invariants: a version in `models_` serves new requests; a version taken out of it (replaced, unloaded,
// shut down) is retired: retire() waits until its `active` count (requests routed to it and not yet
// answered) is 0, then stops its batcher. `active` is guarded by drain_mu_, the maps by reg_mu_; reg_mu_
// may be held while taking drain_mu_, never the reverse. Thread-safe.
class model_registry final : public model_loader {
 public:
  using instance_ptr = std::shared_ptr<model_instance>;

  explicit model_registry(model_factory factory) : factory_(std::move(factory)) {}
  model_registry(const model_registry&) = delete;
  model_registry& operator=(const model_registry&) = delete;
  ~model_registry() { shutdown(); }

  // Loads every model of `models`; stops at the first failure. Versions of one model load oldest first, so
  // that a version policy keeps the newest instead of refusing an older one listed after it.
  result<void> load_all(const std::vector<model_config>& models) {
    std::vector<const model_config*> order;
    for (const auto& m : models) order.push_back(&m);
    std::stable_sort(order.begin(), order.end(), [](const model_config* a, const model_config* b) {
      if (a->name != b->name) return a->name < b->name;
      return version_less(a->version, b->version);
    });
    for (const auto* m : order) JITEMBED_TRY(load(*m));
    return {};
  }

  // service::load's contracts (server/service.hpp).
  result<void> load(const model_config& cfg) {
    JITEMBED_ASSIGN_OR_RETURN(auto m, factory_(cfg.name, cfg.params));
    JITEMBED_ASSIGN_OR_RETURN(auto slow, with_latency_params(std::move(m), cfg.params));
    return load(cfg, std::move(slow));
  }

  result<void> load(model_config cfg, models::any_model m) override {
    if (!m) return fail(errc::invalid_argument, "load: no model for '" + cfg.name + "'");
    if (cfg.name.empty() || cfg.version.empty())
      return fail(errc::invalid_argument, "load: empty model name or version");
    if (!ready()) return fail(errc::unavailable, "load: the service is shutting down");  // before a warm-up
    JITEMBED_TRY(check_admitted(cfg.name, cfg.version, versions_of(cfg.name), cfg.policy));
    JITEMBED_ASSIGN_OR_RETURN(auto made, model_instance::create(std::move(m), std::move(cfg)));
    auto inst = std::make_shared<model_instance>(std::move(made));
    JITEMBED_TRY(inst->warm());
    std::vector<instance_ptr> gone;
    {
      std::lock_guard lock(reg_mu_);
      if (stopping_) return fail(errc::unavailable, "load: the service is shutting down");
      auto& versions = models_[inst->name()];
      const auto& policy = inst->config().policy;
      if (auto r = install_version(versions, inst->name(), inst->version(), inst, policy, gone); !r) {
        if (versions.empty()) models_.erase(inst->name());
        return r;  // a load that raced this one made the version too old; inst is dropped unused
      }
      policies_[inst->name()] = policy;
    }
    for (auto& g : gone) retire(std::move(g));
    return {};
  }

  // Unloads one version, or every version when `version` is empty; each is drained first.
  result<void> unload(std::string_view name, std::string_view version = {}) override {
    std::vector<instance_ptr> gone;
    {
      std::lock_guard lock(reg_mu_);
      const auto it = models_.find(std::string(name));
      if (it == models_.end()) return fail(errc::not_found, net::kserve::model_not_found(name).message);
      if (version.empty()) {
        for (auto& [v, inst] : it->second) gone.push_back(std::move(inst));
        it->second.clear();
      } else {
        const auto vit = it->second.find(std::string(version));
        if (vit == it->second.end()) return fail(errc::not_found, net::kserve::model_not_found(name, version).message);
        gone.push_back(std::move(vit->second));
        it->second.erase(vit);
      }
      if (it->second.empty()) {
        policies_.erase(it->first);
        models_.erase(it);
      }
    }
    for (auto& g : gone) retire(std::move(g));
    return {};
  }

  // From now on ready() is false: find() still finds versions, load() refuses.
  void begin_drain() {
    std::lock_guard lock(reg_mu_);
    stopping_ = true;
  }

  // begin_drain(), then retires every version (waits for their admitted requests). Idempotent.
  void shutdown() {
    std::map<std::string, std::map<std::string, instance_ptr, version_order>> all;
    {
      std::lock_guard lock(reg_mu_);
      stopping_ = true;
      all.swap(models_);
    }
    for (auto& [n, vs] : all)
      for (auto& [v, inst] : vs) retire(std::move(inst));
  }

  bool ready() const {
    std::lock_guard lock(reg_mu_);
    return !stopping_;
  }

  // (name, version) of every loaded model version.
  std::vector<std::pair<std::string, std::string>> loaded() const override {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& inst : select()) out.emplace_back(inst->name(), inst->version());
    return out;
  }

  // The loaded versions of `name`, in version order.
  std::vector<std::string> versions_of(std::string_view name) const {
    std::vector<std::string> out;
    for (const auto& inst : select(name)) out.push_back(inst->version());
    return out;
  }

  // The version_policy the model's last load set (`fallback` once it is unloaded).
  version_policy policy_of(std::string_view name, const version_policy& fallback) const {
    std::lock_guard lock(reg_mu_);
    const auto it = policies_.find(std::string(name));
    return it == policies_.end() ? fallback : it->second;
  }

  // The named version, or the highest one when version is empty. With `acquire` it counts as active
  // (retire() waits for it) until release().
  std::optional<instance_ptr> find(std::string_view name, std::string_view version, bool acquire = false) {
    std::lock_guard lock(reg_mu_);
    const auto it = models_.find(std::string(name));
    if (it == models_.end() || it->second.empty()) return std::nullopt;
    instance_ptr inst;
    if (version.empty()) {
      inst = it->second.rbegin()->second;
    } else {
      const auto vit = it->second.find(std::string(version));
      if (vit == it->second.end()) return std::nullopt;
      inst = vit->second;
    }
    if (acquire) {
      std::lock_guard dl(drain_mu_);
      ++inst->active();
    }
    return inst;
  }

  // Ends what find(..., acquire = true) started.
  void release(model_instance& inst) {
    {
      std::lock_guard dl(drain_mu_);
      --inst.active();
    }
    drain_cv_.notify_all();
  }

  // The loaded versions of `name` (every model when empty) whose version is `version` (any when empty).
  std::vector<instance_ptr> select(std::string_view name = {}, std::string_view version = {}) const {
    std::lock_guard lock(reg_mu_);
    std::vector<instance_ptr> held;
    for (const auto& [n, vs] : models_) {
      if (!name.empty() && n != name) continue;
      for (const auto& [v, inst] : vs)
        if (version.empty() || v == version) held.push_back(inst);
    }
    return held;
  }

  // One row per loaded version: what an autoscaler or a health probe reads (queue depth, admitted rows).
  std::vector<model_status> status() const {
    const auto held = select();
    std::vector<model_status> out;
    out.reserve(held.size());
    for (const auto& inst : held) {
      const auto b = inst->batcher().load();  // two integers, not stats()' histogram copies
      const auto& c = inst->counters();
      out.push_back({.name = inst->name(),
                     .version = inst->version(),
                     .queued_rows = b.queued,
                     .running_rows = b.in_flight,
                     .admitted_rows = inst->admitted_rows(),
                     .max_inflight_rows = inst->max_inflight_rows(),
                     .success = c.success.load(std::memory_order_relaxed),
                     .failure = c.failure.load(std::memory_order_relaxed),
                     .rejected_admission = c.rejected_admission.load(std::memory_order_relaxed),
                     .ready = inst->ready()});
    }
    return out;
  }

  // The model repository whose models the repository calls delegate to (nullptr: none).
  void attach(std::shared_ptr<model_source> source) {
    std::lock_guard lock(source_mu_);
    source_ = std::move(source);
  }
  std::shared_ptr<model_source> source() const {
    std::lock_guard lock(source_mu_);
    return source_;
  }

  // The repository index: the attached source's models (loaded versions, failures, never loaded), then
  // every other loaded version (READY).
  std::vector<repository_entry> repository_index() const {
    std::vector<repository_entry> out;
    const auto src = source();
    if (src) out = src->index(*this);
    for (const auto& [name, v] : loaded()) {
      if (src && src->has(name)) continue;
      out.push_back({.name = name, .version = v, .state = model_state::ready});
    }
    return out;
  }

 private:
  // Waits until no request routed to `inst` is unanswered, then stops its batcher; the caller drops it.
  void retire(instance_ptr inst) {
    {
      std::unique_lock dl(drain_mu_);
      drain_cv_.wait(dl, [&] { return inst->active() == 0; });
    }
    inst->batcher().shutdown(true);
  }

  model_factory factory_;
  mutable std::mutex reg_mu_;
  bool stopping_ = false;
  std::map<std::string, std::map<std::string, instance_ptr, version_order>> models_;
  std::map<std::string, version_policy> policies_;  // per name: the policy of its last load
  std::mutex drain_mu_;
  std::condition_variable drain_cv_;
  mutable std::mutex source_mu_;
  std::shared_ptr<model_source> source_;
};

}  // namespace jitembed::server::detail
