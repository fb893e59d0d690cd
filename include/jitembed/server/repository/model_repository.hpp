// server::model_repository (component jitembed::repository): a Triton-layout model repository loaded into a
// service through repository_backends; the /v2/repository routes reach it once attached (service::attach).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/core/preprocess_params.hpp"
#include "jitembed/models/any_model.hpp"
#include "jitembed/models/backend_config.hpp"
#include "jitembed/server/config.hpp"
#include "jitembed/server/model_instance.hpp"
#include "jitembed/server/repository/backends.hpp"
#include "jitembed/server/repository/config.hpp"
#include "jitembed/server/repository/detail/model.hpp"
#include "jitembed/server/repository/detail/version_policy.hpp"
#include "jitembed/server/repository/model_source.hpp"

namespace jitembed::server {

struct repository_options {
  repository_backends backends;                 // platform / backend name -> factory
  std::function<void(const std::string&)> log;  // one line per load (ignored fields) and failure; null: silent
};

// A copyable handle (copies share the repository's state). Thread-safe; loads and unloads run one at a time.
class model_repository final : public model_source {
 public:
  // The repository at `dir` (not_found when it is not a directory). Nothing is loaded yet.
  static result<model_repository> open(std::filesystem::path dir, repository_options o = {}) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) return fail(errc::not_found, "model repository '" + dir.string() + "' is not a directory");
    auto s = std::make_shared<state>();
    s->dir = std::move(dir);
    s->opts = std::move(o);
    return model_repository(std::move(s));
  }

  const std::filesystem::path& directory() const noexcept { return s_->dir; }

  // The models in the directory now: subdirectories with a config.pbtxt, sorted.
  std::vector<std::string> model_names() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(s_->dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (valid_name(n) && it->is_directory(ec) && std::filesystem::is_regular_file(it->path() / "config.pbtxt", ec)) out.push_back(n);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // Loads every model of the directory; one that fails is recorded (index(), reason) and the others load.
  // Returns how many failed.
  std::size_t load_all(model_loader& into) {
    std::size_t failed = 0;
    for (const auto& n : model_names())
      if (!load(into, n)) ++failed;
    return failed;
  }

  bool has(std::string_view name) const override {
    if (!valid_name(name)) return false;
    {
      std::lock_guard lock(s_->mu);
      if (s_->models.count(std::string(name))) return true;
    }
    std::error_code ec;
    return std::filesystem::is_regular_file(s_->dir / std::string(name) / "config.pbtxt", ec);
  }

  // Reads <dir>/<name>/config.pbtxt again and loads the versions its version_policy keeps, unloading the
  // others; every model is made before any is switched in, so a broken file leaves the loaded versions
  // serving. The outcome is recorded for index().
  result<void> load(model_loader& into, std::string_view name) override {
    if (!valid_name(name)) return fail(errc::invalid_argument, "model repository: '" + std::string(name) + "' is not a model name");
    std::lock_guard op(s_->op_mu);
    model_record rec;
    auto r = load_locked(into, std::string(name), rec);
    if (!r) {
      log("model '" + std::string(name) + "' failed to load: " + r.error().message);
      std::lock_guard lock(s_->mu);
      auto& m = s_->models[std::string(name)];
      m.reason = r.error().message;
      m.unloaded = false;
      return r;
    }
    if (!rec.ignored.empty()) {
      std::string list;
      for (const auto& f : rec.ignored) list += (list.empty() ? "" : ", ") + f;
      log("model '" + std::string(name) + "': fields accepted and ignored (they cannot change results): " + list);
    }
    std::lock_guard lock(s_->mu);
    s_->models[std::string(name)] = std::move(rec);
    return {};
  }

  // Unloads every version of `name` (not_found when none is loaded).
  result<void> unload(model_loader& into, std::string_view name) override {
    if (!valid_name(name)) return fail(errc::invalid_argument, "model repository: '" + std::string(name) + "' is not a model name");
    std::lock_guard op(s_->op_mu);
    auto r = into.unload(name, {});
    std::lock_guard lock(s_->mu);
    auto& m = s_->models[std::string(name)];
    m.unloaded = true;
    m.reason.clear();
    m.fingerprints.clear();
    return r;
  }

  std::vector<repository_entry> index(const model_loader& into) const override {
    std::map<std::string, std::vector<std::string>> loaded;
    for (const auto& [n, v] : into.loaded()) loaded[n].push_back(v);
    std::set<std::string> names;
    for (auto& n : model_names()) names.insert(std::move(n));
    std::lock_guard lock(s_->mu);
    for (const auto& [n, m] : s_->models) names.insert(n);
    std::vector<repository_entry> out;
    for (const auto& n : names) {
      const auto rec = s_->models.find(n);
      const model_record* m = rec == s_->models.end() ? nullptr : &rec->second;
      const auto l = loaded.find(n);
      if (l != loaded.end()) {
        for (const auto& v : l->second) {
          repository_entry e{.name = n, .version = v, .state = model_state::ready};
          if (m) {
            e.ignored = m->ignored;
            if (!m->reason.empty()) e.reason = "the last load failed, the versions loaded before serve: " + m->reason;
          }
          out.push_back(std::move(e));
        }
      } else if (m && !m->reason.empty()) {
        out.push_back({.name = n, .state = model_state::unavailable, .reason = m->reason});
      } else if (m && m->unloaded) {
        out.push_back({.name = n, .state = model_state::unavailable, .reason = "unloaded"});
      } else {
        out.push_back({.name = n});
      }
    }
    return out;
  }

  // The fingerprint (model version()) of a loaded version, as of its last load.
  std::optional<std::string> fingerprint(std::string_view name, std::string_view version) const {
    std::lock_guard lock(s_->mu);
    const auto it = s_->models.find(std::string(name));
    if (it == s_->models.end()) return std::nullopt;
    const auto f = it->second.fingerprints.find(std::string(version));
    if (f == it->second.fingerprints.end()) return std::nullopt;
    return f->second;
  }

  // The fields of the model's config.pbtxt that its last successful load accepted and ignored.
  std::vector<std::string> ignored(std::string_view name) const {
    std::lock_guard lock(s_->mu);
    const auto it = s_->models.find(std::string(name));
    return it == s_->models.end() ? std::vector<std::string>{} : it->second.ignored;
  }

 private:
  struct model_record {
    std::string reason;  // the last load's error; empty after a success
    bool unloaded = false;
    std::vector<std::string> ignored;
    std::map<std::string, std::string> fingerprints;  // version -> fingerprint
  };
  struct state {
    std::filesystem::path dir;
    repository_options opts;
    std::mutex op_mu;  // one load / unload at a time
    mutable std::mutex mu;
    std::map<std::string, model_record> models;
  };

  explicit model_repository(std::shared_ptr<state> s) : s_(std::move(s)) {}

  static bool valid_name(std::string_view n) {
    return !n.empty() && n.size() <= 255 && n.front() != '.' && n.find('/') == std::string_view::npos &&
           n.find('\\') == std::string_view::npos && n.find('\0') == std::string_view::npos;
  }

  void log(const std::string& line) const {
    if (s_->opts.log) s_->opts.log(line);
  }

  result<void> load_locked(model_loader& into, const std::string& name, model_record& rec) {
    namespace fs = std::filesystem;
    const fs::path mdir = s_->dir / name;
    std::error_code ec;
    if (!fs::is_directory(mdir, ec)) return fail(errc::not_found, "model repository '" + s_->dir.string() + "' has no model '" + name + "'");
    const fs::path cfg_path = mdir / "config.pbtxt";
    if (!fs::is_regular_file(cfg_path, ec)) return fail(errc::not_found, mdir.string() + ": no config.pbtxt");
    JITEMBED_ASSIGN_OR_RETURN(auto rc, read_repository_config(cfg_path));
    const std::string& file = rc.file;
    if (!rc.name.empty() && rc.name != name)
      return fail(errc::invalid_argument, file + ": name '" + rc.name + "' differs from its directory '" + name + "'");
    JITEMBED_ASSIGN_OR_RETURN(const auto backend, s_->opts.backends.resolve(rc.platform, rc.backend, file));

    // Parameters: serving settings (applied here), ignored ones (listed), the backend's own (the rest).
    nlohmann::json params = nlohmann::json::object();   // published at /v2/models/<m>/config
    nlohmann::json serving = nlohmann::json::object();
    std::map<std::string, std::string> backend_params;
    for (const auto& [k, v] : rc.parameters) {
      params[k] = v;
      if (detail::listed(detail::kServingParams, k)) serving[k] = v;
      else if (detail::listed(detail::kIgnoredParams, k))
        rc.ignored.push_back("parameters." + k);
      else backend_params[k] = v;
    }
    auto latency = parse_latency_params(serving);
    if (!latency) return fail(errc::invalid_argument, file + ": " + latency.error().message);
    std::size_t max_inflight = 0;
    bool idle_dispatch = true;
    for (const char* k : {"max_inflight_rows", "idle_dispatch"}) {
      if (!serving.contains(k)) continue;
      auto v = serving_value(k, serving[k]);
      if (!v) return fail(errc::invalid_argument, file + ": " + v.error().message);
      if (v->is_boolean()) idle_dispatch = v->get<bool>();
      else max_inflight = v->get<std::size_t>();
    }

    // Version directories: positive integers (Triton's layout); anything else in the model directory is not a version.
    std::vector<std::string> versions;
    for (fs::directory_iterator it(mdir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string v = it->path().filename().string();
      if (detail::is_version_name(v) && it->is_directory(ec)) versions.push_back(v);
    }
    if (ec) return fail(errc::io_error, mdir.string() + ": cannot list: " + ec.message());
    auto kept = detail::kept_versions(versions, rc.policy);
    if (kept.empty())
      return fail(errc::not_found, mdir.string() + ": no version directory that version_policy " +
                                       detail::describe(rc.policy) + " keeps (found " +
                                       std::to_string(versions.size()) + ")");

    // The config's result-changing fields, canonical: part of the fingerprint.
    preprocess_params canon;
    canon.set("backend", backend.first).set("max_batch_size", rc.max_batch_size);
    const auto tensors = [](const std::vector<repository_tensor>& ts) {
      std::string s;
      for (const auto& t : ts) s += t.name + ":" + t.data_type + detail::dims_string(t.dims) + ";";
      return s;
    };
    canon.set("inputs", tensors(rc.inputs)).set("outputs", tensors(rc.outputs));
    for (const auto& [k, v] : backend_params) canon.set("param." + k, v);
    const std::string canon_s = canon.str();
    const auto config_hash = xxh3_128(bytes_view(reinterpret_cast<const std::byte*>(canon_s.data()), canon_s.size())).to_hex();

    models::backend_config bc;
    bc.name = name;
    bc.config_file = file;
    bc.kind = backend.first;
    bc.model_filename = rc.default_model_filename;
    bc.max_batch_size = static_cast<std::size_t>(rc.max_batch_size);
    const auto to_backend = [](const std::vector<repository_tensor>& ts) {
      std::vector<models::backend_tensor> out;
      for (const auto& t : ts) out.push_back({t.name, t.data_type, dtype_from_triton(t.data_type), t.dims});
      return out;
    };
    bc.inputs = to_backend(rc.inputs);
    bc.outputs = to_backend(rc.outputs);
    bc.parameters = backend_params;
    bc.device = rc.kind == instance_kind::gpu ? device::cuda(rc.gpu) : device::cpu();

    // Every version made (and fingerprinted) before any is switched in.
    std::vector<std::pair<model_config, models::any_model>> made;
    for (const auto& v : kept) {
      bc.version_dir = mdir / v;
      JITEMBED_ASSIGN_OR_RETURN(auto m, backend.second(bc));
      JITEMBED_ASSIGN_OR_RETURN(const auto files, detail::hash_tree(bc.version_dir));
      preprocess_params fp;
      fp.set("backend", m.version()).set("files", files.to_hex()).set("config", config_hash);
      models::any_model fm(detail::fingerprinted_model(std::move(m), fp.str()));
      if (latency->per_batch.count() || latency->per_item.count()) fm = models::any_model(models::emulated_latency(std::move(fm), *latency));
      model_config mc;
      mc.name = name;
      mc.version = v;
      mc.instances = rc.instance_count;
      mc.max_batch_size = static_cast<std::size_t>(rc.max_batch_size);
      mc.max_queue_delay_us =
          rc.dynamic_batching ? static_cast<std::int64_t>(std::min<std::uint64_t>(rc.max_queue_delay_us, 1ull << 40))
                              : 0;
      mc.idle_dispatch = idle_dispatch;
      mc.queue_size = rc.max_queue_size;
      mc.max_inflight_rows = max_inflight;
      mc.timeout_us = static_cast<std::int64_t>(std::min<std::uint64_t>(rc.default_timeout_us, 1ull << 40));
      mc.preferred_batch_sizes = rc.preferred_batch_sizes;
      mc.params = params;
      mc.policy = rc.policy;
      rec.fingerprints[v] = std::string(fm.version());
      made.emplace_back(std::move(mc), std::move(fm));
    }

    // Versions loaded before that the policy no longer keeps: a newer one would make the policy refuse the
    // kept ones, so those go first; the others after the switch.
    std::vector<std::string> stale;
    for (const auto& [n, v] : into.loaded())
      if (n == name && std::find(kept.begin(), kept.end(), v) == kept.end()) stale.push_back(v);
    std::vector<std::string> later;
    for (const auto& v : stale) {
      if (detail::version_less(kept.front(), v)) JITEMBED_TRY(into.unload(name, v));
      else later.push_back(v);
    }
    for (auto& [mc, m] : made)
      if (auto r = into.load(std::move(mc), std::move(m)); !r) return fail(r.error().code, file + ": " + r.error().message);
    for (const auto& v : later)
      if (auto r = into.unload(name, v); !r && r.error().code != errc::not_found) return r;
    rec.ignored = rc.ignored;
    return {};
  }

  std::shared_ptr<state> s_;
};

}  // namespace jitembed::server
