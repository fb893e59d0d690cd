// server::service's implementation (server/service.hpp is the API): the registry of model versions (hot
// load / unload with warm-up, atomic switch and drain) and the KServe v2 routes. It lives behind one pointer
// in service so that service is a movable value while its batchers and preprocessing threads call back
// into it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/core/error.hpp"
#include "jitembed/core/thread_pool.hpp"
#include "jitembed/format/record_view.hpp"
#include "jitembed/models/sample_input.hpp"
#include "jitembed/net/http/message.hpp"
#include "jitembed/net/kserve/decode.hpp"
#include "jitembed/net/kserve/encode.hpp"
#include "jitembed/net/kserve/status.hpp"
#include "jitembed/server/config.hpp"
#include "jitembed/server/detail/render.hpp"
#include "jitembed/server/detail/version_policy.hpp"
#include "jitembed/server/model_instance.hpp"
#include "jitembed/server/model_source.hpp"
#include "jitembed/server/model_status.hpp"

namespace jitembed::server {

inline constexpr std::string_view kServerVersion = "0.1.0";

// Retry-After (seconds) on 503 answers (unavailable, resource_exhausted).
inline constexpr int kRetryAfterSeconds = 1;

namespace detail {

inline std::vector<std::string_view> split_path(std::string_view target) {
  if (const auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
  std::vector<std::string_view> parts;
  while (!target.empty()) {
    const auto s = target.find('/');
    if (s == std::string_view::npos) {
      parts.push_back(target);
      break;
    }
    if (s > 0) parts.push_back(target.substr(0, s));
    target = target.substr(s + 1);
  }
  return parts;
}

inline bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

inline std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

}  // namespace detail

namespace detail {

class service_core final : public model_loader {
 public:
  using clock = std::chrono::steady_clock;

  // Builds the service; models in `cfg.models` are not loaded here: call load_configured() (or load()).
  explicit service_core(server_config cfg, model_factory factory = make_reference)
      : config_(std::move(cfg)),
        factory_(std::move(factory)),
        pool_(config_.preprocess_threads ? config_.preprocess_threads : std::max(1u, std::thread::hardware_concurrency())) {}
  service_core(const service_core&) = delete;
  service_core& operator=(const service_core&) = delete;
  ~service_core() { shutdown(); }

  // Loads every model of the configuration; stops at the first failure.
  // Versions of one model load oldest first, so that a version policy (latest 1) keeps the newest instead
  // of refusing an older version listed after a newer one.
  result<void> load_configured() {
    std::vector<const model_config*> order;
    for (const auto& m : config_.models) order.push_back(&m);
    std::stable_sort(order.begin(), order.end(), [](const model_config* a, const model_config* b) {
      if (a->name != b->name) return a->name < b->name;
      return detail::version_less(a->version, b->version);
    });
    for (const auto* m : order) JITEMBED_TRY(load(*m));
    return {};
  }

  // Loads (or reloads in place) one model version made by the factory from cfg.params.
  // params sleep_us / sleep_us_per_row wrap the model in models::emulated_latency, whatever the factory.
  result<void> load(const model_config& cfg) {
    auto m = factory_(cfg.name, cfg.params);
    if (!m) return m.error();
    auto slow = with_latency_params(std::move(*m), cfg.params);
    if (!slow) return slow.error();
    return load(cfg, std::move(*slow));
  }

  // Loads `m` as cfg.name / cfg.version: warms it (one dummy batch), then switches atomically: new requests
  // go to it; a version it replaces, and the versions cfg.policy no longer keeps (latest 1: every older one),
  // stop getting requests and are drained (their in-flight requests finish) and destroyed before load
  // returns. No request fails during the swap. cfg.policy becomes the model's policy; a version it would not
  // keep is refused (invalid_argument) before the warm-up.
  result<void> load(model_config cfg, models::any_model m) override {
    if (!m) return fail(errc::invalid_argument, "load: no model for '" + cfg.name + "'");
    if (cfg.name.empty() || cfg.version.empty()) return fail(errc::invalid_argument, "load: empty model name or version");
    if (!ready()) return fail(errc::unavailable, "load: the service is shutting down");  // before a warm-up
    JITEMBED_TRY(detail::check_admitted(cfg.name, cfg.version, versions_of(cfg.name), cfg.policy));
    std::shared_ptr<model_instance> inst;
    try {
      inst = std::make_shared<model_instance>(std::move(m), std::move(cfg));
    } catch (const jitembed::error& e) {
      return fail(e.code(), e.message());
    }
    JITEMBED_TRY(inst->warm());
    std::vector<std::shared_ptr<model_instance>> gone;
    {
      std::lock_guard lock(reg_mu_);
      if (stopping_) return fail(errc::unavailable, "load: the service is shutting down");
      auto& versions = models_[inst->name()];
      const auto& policy = inst->config().policy;
      if (auto r = detail::install_version(versions, inst->name(), inst->version(), inst, policy, gone); !r) {
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
    std::vector<std::shared_ptr<model_instance>> gone;
    {
      std::lock_guard lock(reg_mu_);
      const auto it = models_.find(std::string(name));
      if (it == models_.end()) return fail(errc::not_found, kserve::model_not_found(name).message);
      if (version.empty()) {
        for (auto& [v, inst] : it->second) gone.push_back(std::move(inst));
        models_.erase(it);
        policies_.erase(std::string(name));
      } else {
        const auto vit = it->second.find(std::string(version));
        if (vit == it->second.end()) return fail(errc::not_found, kserve::model_not_found(name, version).message);
        gone.push_back(std::move(vit->second));
        it->second.erase(vit);
        if (it->second.empty()) {
          models_.erase(it);
          policies_.erase(std::string(name));
        }
      }
    }
    for (auto& g : gone) retire(std::move(g));
    return {};
  }

  // Starts draining: from now on the readiness routes answer 503 and new infer requests get 503
  // unavailable; requests already admitted finish normally. shutdown() (or the destructor) completes it.
  void begin_drain() {
    std::lock_guard lock(reg_mu_);
    stopping_ = true;
  }

  // Stops serving (begin_drain()), waits for every admitted request, then unloads everything. Idempotent.
  void shutdown() {
    std::map<std::string, std::map<std::string, std::shared_ptr<model_instance>, version_order>> all;
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
    std::lock_guard lock(reg_mu_);
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [n, vs] : models_)
      for (const auto& [v, inst] : vs) out.emplace_back(n, v);
    return out;
  }

  const server_config& config() const noexcept { return config_; }

  // The model repository the /v2/repository routes delegate to for its models (nullptr: none).
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
      out.push_back({.name = name, .version = v, .state = "READY"});
    }
    return out;
  }

  // The http::handler: every route of docs/server.md. Never blocks on model work.
  void handle(net::http::request&& req, net::http::responder respond) {
    const auto parts = detail::split_path(req.target);
    const bool health = parts.size() >= 2 && parts[0] == "v2" && parts[1] == "health";
    if (!config_.auth_token.empty() && !health) {
      const std::string_view auth = net::http::find_header(req.headers, "authorization");
      constexpr std::string_view bearer = "Bearer ";
      if (!auth.starts_with(bearer) || !detail::constant_time_equal(auth.substr(bearer.size()), config_.auth_token)) {
        auto r = error_response(401, "unauthorized: a valid bearer token is required", errc::invalid_argument);
        r.headers.emplace_back("WWW-Authenticate", "Bearer");
        return respond(std::move(r));
      }
    }
    const bool get = req.method == "GET" || req.method == "HEAD";
    const bool post = req.method == "POST";
    const auto n = parts.size();
    if (n == 1 && parts[0] == "metrics" && get) return respond(text_response(200, metrics(), "text/plain; version=0.0.4"));
    if (n == 0 || parts[0] != "v2") return respond(not_found_route());
    if (n == 1 && get) {
      detail::ojson j{{"name", "jitembed"}, {"version", kServerVersion},
                      {"extensions", detail::ojson::array({"binary_tensor_data", "statistics", "model_configuration", "model_repository"})}};
      return respond(json_response(200, j));
    }
    if (health && n == 3 && get) {
      if (parts[2] == "live") return respond(text_response(200, "", "text/plain"));
      if (parts[2] == "ready") return respond(ready() ? text_response(200, "", "text/plain") : not_ready());
    }
    if (n >= 2 && parts[1] == "repository") return respond(repository(parts, post, req.body));
    if (n == 3 && parts[1] == "models" && parts[2] == "stats" && get) return respond(stats({}, {}));  // every model
    if (n >= 3 && parts[1] == "models") {
      // /v2/models/{m}[/versions/{v}][/action]
      const std::string_view name = parts[2];
      std::string_view version;
      std::size_t i = 3;
      if (n >= 5 && parts[3] == "versions") {
        version = parts[4];
        i = 5;
      }
      const std::string_view action = i < n ? parts[i] : std::string_view{};
      if (i + 1 < n) return respond(not_found_route());
      if (action == "infer" && post) return infer(std::string(name), std::string(version), std::move(req), std::move(respond));
      if (post) return respond(method_not_allowed());
      if (action == "stats") return respond(stats(name, version));
      if (action == "ready" && !ready()) return respond(not_ready());  // draining: before any model check
      auto inst = find(name, version);
      if (!inst) return respond(error_response(kserve::model_not_found(name, version)));
      if (action.empty()) return respond(json_response(200, detail::model_metadata(**inst, versions_of(name))));
      if (action == "ready") return respond(text_response(200, "", "text/plain"));
      if (action == "config") return respond(json_response(200, detail::model_config_json(**inst, policy_of(name, (*inst)->config().policy))));
    }
    return respond(not_found_route());
  }

  // As a net::http::handler value (the service must outlive it).
  net::http::handler as_handler() {
    return [this](net::http::request&& r, net::http::responder respond) { handle(std::move(r), std::move(respond)); };
  }

  // One row per loaded version: what an autoscaler or a health probe reads (queue depth, admitted rows).
  std::vector<model_status> status() const {
    std::vector<std::shared_ptr<model_instance>> held;
    {
      std::lock_guard lock(reg_mu_);
      for (const auto& [n, vs] : models_)
        for (const auto& [v, inst] : vs) held.push_back(inst);
    }
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
                     .rejected_admission = c.rejected_admission.load(std::memory_order_relaxed)});
    }
    return out;
  }

  std::string metrics() const {
    std::vector<std::shared_ptr<model_instance>> held;
    {
      std::lock_guard lock(reg_mu_);
      for (const auto& [n, vs] : models_)
        for (const auto& [v, inst] : vs) held.push_back(inst);
    }
    std::vector<const model_instance*> ptrs;
    for (const auto& h : held) ptrs.push_back(h.get());
    return detail::metrics_text(ptrs);
  }

 private:
  using version_order = detail::version_order;

  // State shared by the rows of one inference request.
  struct infer_call {
    std::shared_ptr<model_instance> inst;
    service_core* owner = nullptr;
    net::http::request http;
    kserve::infer_request req;
    net::http::responder respond;
    clock::time_point start;
    std::optional<clock::time_point> deadline;  // the request's KServe "timeout", counted from its arrival
    std::size_t admitted = 0;                   // rows counted against the instance's max_inflight_rows
    std::vector<models::named_tensors> rows;
    std::atomic<std::size_t> remaining{0};
    std::mutex err_mu;
    std::optional<error_info> first_error;

    void row_done(std::size_t i, result<models::named_tensors> r) {
      if (r) {
        rows[i] = std::move(*r);
      } else {
        std::lock_guard lock(err_mu);
        if (!first_error) first_error = std::move(r).error();
      }
      if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) owner->finish(*this);
    }
  };

  static net::http::response text_response(int status, std::string body, std::string_view type) {
    net::http::response r;
    r.status = status;
    r.body = std::move(body);
    r.headers.emplace_back("Content-Type", std::string(type));
    return r;
  }
  static net::http::response json_response(int status, const detail::ojson& j) { return text_response(status, j.dump(), "application/json"); }

  // Every error answer: {"error": message, "errc": name}, and Retry-After where the errc says "later".
  static net::http::response error_response(int status, std::string_view message, errc code) {
    auto r = text_response(status, kserve::error_body(message, code), "application/json");
    if (kserve::wants_retry_after(code)) r.headers.emplace_back("Retry-After", std::to_string(kRetryAfterSeconds));
    return r;
  }
  static net::http::response error_response(const kserve::protocol_error& e) { return error_response(e.http_status, e.message, e.code); }
  // A failed request: the status follows the errc alone (kserve::http_status).
  static net::http::response error_response(const error_info& e) { return error_response(kserve::http_status(e.code), e.message, e.code); }
  static net::http::response not_found_route() { return error_response(404, "Not Found", errc::not_found); }
  static net::http::response method_not_allowed() { return error_response(405, "method not allowed", errc::invalid_argument); }
  static net::http::response not_ready() { return error_response(kserve::unavailable(kserve::unavailable_reason::not_ready, "shutting down")); }

  std::vector<std::string> versions_of(std::string_view name) const {
    std::lock_guard lock(reg_mu_);
    std::vector<std::string> out;
    if (const auto it = models_.find(std::string(name)); it != models_.end())
      for (const auto& [v, inst] : it->second) out.push_back(v);
    return out;
  }

  // The version_policy the model's last load set (`fallback` once it is unloaded).
  version_policy policy_of(std::string_view name, const version_policy& fallback) const {
    std::lock_guard lock(reg_mu_);
    const auto it = policies_.find(std::string(name));
    return it == policies_.end() ? fallback : it->second;
  }

  // The named version, or the highest one when version is empty; counts it active when `acquire`.
  std::optional<std::shared_ptr<model_instance>> find(std::string_view name, std::string_view version, bool acquire = false) {
    std::lock_guard lock(reg_mu_);
    const auto it = models_.find(std::string(name));
    if (it == models_.end() || it->second.empty()) return std::nullopt;
    std::shared_ptr<model_instance> inst;
    if (version.empty()) {
      inst = it->second.rbegin()->second;
    } else {
      const auto vit = it->second.find(std::string(version));
      if (vit == it->second.end()) return std::nullopt;
      inst = vit->second;
    }
    if (acquire) {
      std::lock_guard dl(drain_mu_);
      ++inst->active;
    }
    return inst;
  }

  void release(model_instance& inst) {
    {
      std::lock_guard dl(drain_mu_);
      --inst.active;
    }
    drain_cv_.notify_all();
  }

  // Waits until no request routed to `inst` is unanswered, then stops its batcher; the caller drops it.
  void retire(std::shared_ptr<model_instance> inst) {
    {
      std::unique_lock dl(drain_mu_);
      drain_cv_.wait(dl, [&] { return inst->active == 0; });
    }
    inst->batcher().shutdown(true);
  }

  net::http::response repository(const std::vector<std::string_view>& parts, bool post, const std::string& body) {
    const auto n = parts.size();
    if (!post) return method_not_allowed();
    if (n == 3 && parts[2] == "index") {
      detail::ojson arr = detail::ojson::array();
      for (const auto& e : repository_index()) {
        detail::ojson j{{"name", e.name}};
        if (!e.version.empty()) j["version"] = e.version;
        if (!e.state.empty()) j["state"] = e.state;
        if (!e.reason.empty()) j["reason"] = e.reason;
        if (!e.ignored.empty()) j["ignored"] = e.ignored;
        arr.push_back(std::move(j));
      }
      return json_response(200, arr);
    }
    if (n != 5 || parts[2] != "models" || (parts[4] != "load" && parts[4] != "unload")) return not_found_route();
    const std::string name(parts[3]);
    if (const auto src = source(); src && src->has(name)) {
      // A repository model: its config.pbtxt is the configuration; the directory is read again.
      if (!body.empty()) {
        auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !j.is_object()) return error_response(400, "repository request body is not a JSON object", errc::invalid_argument);
        if (auto it = j.find("parameters"); it != j.end() && !(it->is_object() && it->empty()))
          return error_response(400, "model '" + name + "' comes from the model repository: its config.pbtxt is its configuration (load/unload take no parameters)",
                                errc::invalid_argument);
      }
      auto r = parts[4] == "load" ? src->load(*this, name) : src->unload(*this, name);
      if (!r) return error_response(r.error());
      return json_response(200, detail::ojson::object());
    }
    nlohmann::json params = nlohmann::json::object();
    if (!body.empty()) {
      auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) return error_response(400, "repository request body is not a JSON object", errc::invalid_argument);
      if (auto it = j.find("parameters"); it != j.end()) {
        if (!it->is_object()) return error_response(400, "repository request 'parameters' is not an object", errc::invalid_argument);
        params = *it;
      }
    }
    std::string version;
    if (auto it = params.find("version"); it != params.end()) {
      if (it->is_string()) version = it->get<std::string>();
      else if (it->is_number_unsigned()) version = std::to_string(it->get<std::uint64_t>());
      else return error_response(400, "repository parameter 'version' is not a string or an unsigned integer", errc::invalid_argument);
    }
    if (parts[4] == "unload") {
      auto r = unload(name, version);
      if (!r) return error_response(r.error());
      return json_response(200, detail::ojson::object());
    }
    // load: batcher settings and the model's own parameters come in one object.
    nlohmann::json cfgj = nlohmann::json::object();
    cfgj["name"] = name;
    if (!version.empty()) cfgj["version"] = version;
    nlohmann::json model_params = nlohmann::json::object();
    for (auto it = params.begin(); it != params.end(); ++it) {
      const std::string& k = it.key();
      if (k == "version") continue;
      if (k == "instances" || k == "max_batch_size" || k == "max_queue_delay_us" || k == "queue_size" || k == "timeout_us" ||
          k == "max_inflight_rows") {
        if (it->is_string()) {
          auto v = detail::int_param(params, k);
          if (!v || *v < 0) return error_response(400, "repository parameter '" + k + "' is not a non-negative integer", errc::invalid_argument);
          cfgj[k] = *v;
        } else {
          cfgj[k] = *it;
        }
      } else if (k == "version_policy") {
        cfgj[k] = *it;  // the flag form ("latest2", "all", "specific:1+3") or Triton's object
      } else if (k == "idle_dispatch") {
        if (it->is_string() && (*it == "true" || *it == "false")) cfgj[k] = *it == "true";  // Triton sends strings
        else cfgj[k] = *it;
      } else {
        model_params[k] = *it;
      }
    }
    cfgj["params"] = model_params;
    auto cfg = model_config_from_json(cfgj, "parameters");
    if (!cfg) return error_response(400, cfg.error().message, errc::invalid_argument);
    auto r = load(*cfg);
    if (!r) return error_response(r.error());
    return json_response(200, detail::ojson::object());
  }

  net::http::response stats(std::string_view name, std::string_view version) {
    std::vector<std::shared_ptr<model_instance>> held;
    {
      std::lock_guard lock(reg_mu_);
      for (const auto& [n, vs] : models_) {
        if (!name.empty() && n != name) continue;
        for (const auto& [v, inst] : vs)
          if (version.empty() || v == version) held.push_back(inst);
      }
    }
    if (held.empty() && !name.empty()) return error_response(kserve::model_not_found(name, version));
    detail::ojson arr = detail::ojson::array();
    for (const auto& h : held) arr.push_back(detail::model_stats_json(*h));
    return json_response(200, detail::ojson{{"model_stats", arr}});
  }

  void infer(std::string name, std::string version, net::http::request&& req, net::http::responder respond) {
    const auto start = clock::now();
    if (!ready()) return respond(not_ready());
    auto found = find(name, version, /*acquire=*/true);
    if (!found) {
      if (!ready()) return respond(not_ready());
      return respond(error_response(kserve::model_not_found(name, version)));
    }
    auto inst = std::move(*found);
    // Admission, before any work (decoding included): past max_inflight_rows the answer is 503 at once.
    if (!inst->try_admit()) {
      inst->counters().rejected_admission.fetch_add(1, std::memory_order_relaxed);
      inst->counters().failure.fetch_add(1, std::memory_order_relaxed);
      respond(error_response(fail(errc::unavailable, "model '" + inst->name() + "' version " + inst->version() +
                                                         " is at max_inflight_rows " + std::to_string(inst->max_inflight_rows()))));
      return release(*inst);
    }
    auto call = std::make_shared<infer_call>();
    call->inst = std::move(inst);
    call->owner = this;
    call->http = std::move(req);  // the body lives in the call: decoded tensors view into it
    call->respond = std::move(respond);
    call->start = start;
    call->admitted = 1;
    auto rows = decode_rows(*call);
    if (!rows) return finish_error(*call, rows.error());
    const std::size_t n = rows->size();
    call->inst->admit_more(n - 1);
    call->admitted = n;
    call->rows.resize(n);
    call->remaining.store(n, std::memory_order_relaxed);
    if (const auto timeout = kserve::timeout_us(call->req); timeout && *timeout > 0)
      call->deadline = start + std::chrono::microseconds(static_cast<std::int64_t>(std::min<std::uint64_t>(*timeout, 1ull << 40)));
    const bool is_sample = call->req.inputs.front().name == "sample";
    for (std::size_t i = 0; i < n; ++i) {
      pool_.submit([this, call, i, raw = (*rows)[i], is_sample] {
        // A row whose deadline passed while it waited for a preprocessing thread is not decoded at all.
        if (call->deadline && clock::now() >= *call->deadline)
          return call->row_done(i, fail(errc::timeout, "timeout: deadline passed before preprocessing"));
        auto item = preprocess(*call->inst, raw, is_sample);
        if (!item) return call->row_done(i, std::move(item).error());
        batching::submit_options<shape_bucket> opts;
        opts.bucket = bucket_of(*item);
        opts.deadline = call->deadline;
        call->inst->batcher().submit(row_item{std::move(*item)}, std::move(opts),
                                     [call, i](result<models::named_tensors> r) { call->row_done(i, std::move(r)); });
      });
    }
  }

  // Checks the request's single BYTES input ("image" | "video" | "text" as the model's modality, or
  // "sample") and returns its rows.
  result<std::vector<std::string_view>> decode_rows(infer_call& c) {
    std::optional<std::size_t> header_length;
    if (const auto h = net::http::find_header(c.http.headers, "inference-header-content-length"); !h.empty()) {
      std::size_t v = 0;
      for (char ch : h) {
        if (ch < '0' || ch > '9' || v > (std::size_t{1} << 40)) return fail(errc::invalid_argument, "Inference-Header-Content-Length '" + std::string(h) + "' is not a valid length");
        v = v * 10 + static_cast<std::size_t>(ch - '0');
      }
      header_length = v;
    }
    auto req = kserve::decode_request(c.http.body, header_length, config_.protocol);
    if (!req) return req.error();
    c.req = std::move(*req);
    const auto& m = c.inst->model();
    const std::string_view expected = detail::input_name(m.input_modality());
    if (c.req.inputs.size() != 1)
      return fail(errc::invalid_argument, "model '" + c.inst->name() + "' expects 1 input ('" + std::string(expected) + "' or 'sample'), got " +
                                              std::to_string(c.req.inputs.size()));
    const auto& in = c.req.inputs.front();
    if (in.name != expected && in.name != "sample")
      return fail(errc::invalid_argument, "unexpected input '" + in.name + "' for model '" + c.inst->name() + "' (expects '" + std::string(expected) + "' or 'sample')");
    if (in.type != kserve::datatype::bytes)
      return fail(errc::dtype_mismatch, "input '" + in.name + "' has datatype " + std::string(kserve::to_string(in.type)) + ", expected BYTES");
    const bool shape_ok = (in.shape.size() == 1 && in.shape[0] >= 1) || (in.shape.size() == 2 && in.shape[0] >= 1 && in.shape[1] == 1);
    if (!shape_ok) return fail(errc::invalid_argument, "input '" + in.name + "' has shape " + kserve::detail::shape_string(in.shape) + ", expected [batch] or [batch,1]");
    if (static_cast<std::uint64_t>(in.shape[0]) > config_.max_rows_per_request)
      return fail(errc::limit_exceeded, "input '" + in.name + "': " + std::to_string(in.shape[0]) + " rows > max_rows_per_request " +
                                            std::to_string(config_.max_rows_per_request));
    for (const auto& o : c.req.outputs) {
      const auto outs = m.outputs();
      if (std::none_of(outs.begin(), outs.end(), [&](const models::tensor_meta& t) { return t.name == o.name; }))
        return fail(errc::invalid_argument, "unknown output '" + o.name + "' requested from model '" + c.inst->name() + "'");
    }
    return in.strings();
  }

  // The model's input from a row: raw field bytes, or a record's first field of the model's kind (shared
  // with the client's local mode).
  result<tensor> preprocess(const model_instance& inst, std::string_view raw, bool is_sample) const {
    const bytes_view bytes(reinterpret_cast<const std::byte*>(raw.data()), raw.size());
    return models::preprocess_input(inst.model(), bytes, is_sample, config_.decode);
  }

  void finish_error(infer_call& c, const error_info& e) {
    auto& inst = *c.inst;
    inst.counters().failure.fetch_add(1, std::memory_order_relaxed);
    inst.counters().failure_ns.fetch_add(elapsed_ns(c.start), std::memory_order_relaxed);
    auto respond = std::move(c.respond);
    inst.release_rows(c.admitted);  // before answering: the client may send its next request at once
    respond(error_response(e));
    release(inst);
  }

  static std::uint64_t elapsed_ns(clock::time_point start) {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start).count());
  }

  // All rows are done: encode the response (or the first error) and answer.
  void finish(infer_call& c) {
    if (c.first_error) return finish_error(c, *c.first_error);
    auto encoded = encode(c);
    if (!encoded) return finish_error(c, encoded.error());
    auto& inst = *c.inst;
    inst.counters().success.fetch_add(1, std::memory_order_relaxed);
    inst.counters().inferences.fetch_add(c.rows.size(), std::memory_order_relaxed);
    inst.counters().success_ns.fetch_add(elapsed_ns(c.start), std::memory_order_relaxed);
    inst.counters().last_inference_ms.store(detail::now_ms(), std::memory_order_relaxed);
    auto respond = std::move(c.respond);
    inst.release_rows(c.admitted);  // before answering: the client may send its next request at once
    respond(std::move(*encoded));
    release(inst);
  }

  // Stacks the rows' outputs into [rows, ...] tensors and encodes the KServe response.
  result<net::http::response> encode(infer_call& c) {
    const auto& m = c.inst->model();
    auto resp = std::make_shared<kserve::infer_response>();
    resp->model_name = c.inst->name();
    resp->model_version = c.inst->version();
    resp->id = c.req.id;
    const auto metas = m.outputs();
    for (std::size_t k = 0; k < metas.size(); ++k) {
      const auto& meta = metas[k];
      if (!c.req.outputs.empty() &&
          std::none_of(c.req.outputs.begin(), c.req.outputs.end(), [&](const auto& o) { return o.name == meta.name; }))
        continue;
      const tensor* first = models::find_output(c.rows.front(), meta.name);
      if (!first) return fail(errc::internal, "model '" + c.inst->name() + "' did not produce output '" + meta.name + "'");
      std::vector<std::int64_t> shape{static_cast<std::int64_t>(c.rows.size())};
      for (auto d : first->shape()) shape.push_back(d);
      byte_buffer bytes(first->nbytes() * c.rows.size());
      for (std::size_t i = 0; i < c.rows.size(); ++i) {
        const tensor* t = models::find_output(c.rows[i], meta.name);
        if (!t || t->dtype() != first->dtype() || !(t->shape() == first->shape()) || !t->is_contiguous())
          return fail(errc::invalid_argument, "output '" + meta.name + "' of row " + std::to_string(i) +
                                                  " differs in dtype or shape from row 0: rows of one request must share a shape");
        if (t->nbytes()) std::memcpy(bytes.data() + i * first->nbytes(), t->data(), t->nbytes());
      }
      const auto dt = kserve::from_dtype(first->dtype());
      resp->outputs.push_back(kserve::infer_tensor::owned(meta.name, dt, std::move(shape), std::move(bytes),
                                                          kserve::wants_binary(c.req, meta.name, dt)));
    }
    auto msg = kserve::encode_response(*resp);
    if (!msg) return msg.error();
    net::http::response r;
    r.status = 200;
    r.body = std::move(msg->header);
    r.pieces = std::move(msg->binary);
    r.keep_alive = resp;
    if (msg->header_length) {
      r.headers.emplace_back("Content-Type", "application/octet-stream");
      r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(*msg->header_length));
    } else {
      r.headers.emplace_back("Content-Type", "application/json");
    }
    return r;
  }

  server_config config_;
  model_factory factory_;
  mutable std::mutex reg_mu_;
  bool stopping_ = false;
  std::map<std::string, std::map<std::string, std::shared_ptr<model_instance>, version_order>> models_;
  std::map<std::string, version_policy> policies_;  // per name: the policy of its last load
  std::mutex drain_mu_;
  std::condition_variable drain_cv_;
  mutable std::mutex source_mu_;
  std::shared_ptr<model_source> source_;
  thread_pool pool_;  // last: destroyed first, after shutdown() drained every model
};

}  // namespace detail

}  // namespace jitembed::server
