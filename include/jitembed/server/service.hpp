// The embedding service: versioned models with hot load / unload and the KServe v2 routes as an http::handler;
// serve it with net::http::server::create(options, svc.as_handler()).
#pragma once

#include <chrono>
#include <concepts>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/models/reference_factory.hpp"
#include "jitembed/net/http/message.hpp"
#include "jitembed/server/config.hpp"
#include "jitembed/server/detail/service_core.hpp"
#include "jitembed/server/http/front.hpp"
#include "jitembed/server/model_instance.hpp"
#include "jitembed/server/model_status.hpp"
#include "jitembed/server/repository/model_source.hpp"

namespace jitembed::server {

class grpc_server;  // server/grpc_server.hpp: a second front end over the same core

// The service's default factory (models/reference_factory.hpp), by its old server:: names.
using models::parse_reference_params;
using models::reference_factory;

// A movable value (docs/api.md) whose state every handler from as_handler() shares; a moved-from service may
// only be destroyed or assigned to. Thread-safe.
class service final : public model_loader {
 public:
  using clock = std::chrono::steady_clock;

  // A service with the models of `cfg.models` loaded (made by `factory`, warmed; versions of one model oldest
  // first). Errors: the first model that fails to load; the models loaded before it are unloaded again.
  static result<service> create(server_config cfg, model_factory factory = reference_factory) {
    service s(std::make_shared<detail::http_front>(std::make_shared<detail::service_core>(std::move(cfg), std::move(factory))));
    JITEMBED_TRY(s.core_->registry().load_all(s.core_->config().models));
    return s;
  }

  service(service&&) noexcept = default;
  // The replaced service shuts down (drains) first.
  service& operator=(service&& other) noexcept {
    if (this != &other) {
      if (core_) core_->registry().shutdown();
      core_ = std::move(other.core_);
      front_ = std::move(other.front_);
    }
    return *this;
  }
  service(const service&) = delete;
  service& operator=(const service&) = delete;
  // shutdown(): drains every admitted request, then unloads. Handlers from as_handler() stay callable and
  // answer like a draining service (503 unavailable).
  ~service() {
    if (core_) core_->registry().shutdown();
  }

  // Loads (or reloads in place) one model version made by the factory from cfg.params; params sleep_us /
  // sleep_us_per_row wrap the model in models::emulated_latency, whatever the factory.
  result<void> load(const model_config& cfg) { return core_->registry().load(cfg); }

  // Loads `m` as cfg.name / cfg.version: warms it, then switches atomically; the versions it replaces or
  // cfg.policy no longer keeps are drained and destroyed before load returns, no request failing. A version
  // the policy would not keep is refused (invalid_argument) before the warm-up.
  result<void> load(model_config cfg, models::any_model m) override { return core_->registry().load(std::move(cfg), std::move(m)); }

  // Unloads one version, or every version when `version` is empty; each is drained first. not_found when
  // the model (version) is not loaded.
  result<void> unload(std::string_view name, std::string_view version = {}) override { return core_->registry().unload(name, version); }

  // Starts draining: from now on the readiness routes answer 503 and new infer requests get 503
  // unavailable; requests already admitted finish normally. shutdown() (or the destructor) completes it.
  void begin_drain() { core_->registry().begin_drain(); }

  // Stops serving (begin_drain()), waits for every admitted request, then unloads everything. Idempotent.
  void shutdown() { core_->registry().shutdown(); }

  // False once draining or shut down.
  bool ready() const { return core_->registry().ready(); }

  // (name, version) of every loaded model version.
  std::vector<std::pair<std::string, std::string>> loaded() const override { return core_->registry().loaded(); }

  // Attaches a model repository (a model_source that is a copyable handle, e.g. server::model_repository):
  // the /v2/repository routes then index, load and unload its models; other models keep the parameter route.
  template <class Source>
    requires std::derived_from<Source, model_source> && std::copy_constructible<Source>
  void attach(Source source) {
    core_->registry().attach(std::make_shared<Source>(std::move(source)));
  }
  // Detaches the repository: the /v2/repository load and unload routes answer for loaded models only.
  void detach() { core_->registry().attach(nullptr); }

  // What GET/POST /v2/repository/index answers: the attached repository's models (loaded versions,
  // failures with their reason, models never loaded), then every other loaded version.
  std::vector<repository_entry> repository_index() const { return core_->registry().repository_index(); }

  // Queue depth, admitted rows and counters of every loaded version.
  std::vector<model_status> status() const { return core_->registry().status(); }

  // The Prometheus text of GET /metrics.
  std::string metrics() const { return core_->metrics(); }

  const server_config& config() const noexcept { return core_->config(); }

  // The http::handler: every route of docs/server.md. Never blocks on model work.
  void handle(net::http::request&& req, net::http::responder respond) { front_->handle(std::move(req), std::move(respond)); }

  // As a net::http::handler value sharing the service's state: valid across a move and after the service is
  // destroyed (then it answers like a draining service: 503 unavailable).
  net::http::handler as_handler() {
    return [front = front_](net::http::request&& r, net::http::responder respond) { front->handle(std::move(r), std::move(respond)); };
  }

 private:
  friend class grpc_server;
  explicit service(std::shared_ptr<detail::http_front> front) noexcept : core_(front->core_ptr()), front_(std::move(front)) {}

  std::shared_ptr<detail::service_core> core_;  // shared with every front end
  std::shared_ptr<detail::http_front> front_;   // owns a share of the core
};

}  // namespace jitembed::server
