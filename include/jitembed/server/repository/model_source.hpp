// The seam between the service and a model repository: model_loader is what a repository loads models into,
// model_source what the service's /v2/repository routes ask when a repository is attached.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/models/any_model.hpp"
#include "jitembed/server/config.hpp"

namespace jitembed::server {

// A model's state in the repository index, as Triton names it on the wire (to_string): READY, UNAVAILABLE, or
// none (in the repository, never loaded: the row has no "state").
enum class model_state : std::uint8_t { none, ready, unavailable };

constexpr std::string_view to_string(model_state s) noexcept {
  return s == model_state::ready ? "READY" : s == model_state::unavailable ? "UNAVAILABLE" : "";
}

// One row of GET/POST /v2/repository/index (Triton's: name, version, state, reason), plus the fields of the
// model's config.pbtxt that were accepted and ignored (they cannot change results).
struct repository_entry {
  std::string name;
  std::string version;  // empty: the model as a whole (not loaded, or failed)
  model_state state = model_state::none;
  std::string reason;   // why not READY (the load error), or empty
  std::vector<std::string> ignored;
  friend bool operator==(const repository_entry&, const repository_entry&) = default;
};

// The service's registry as a repository sees it (server::service implements it).
class model_loader {
 public:
  // Loads `m` as cfg.name / cfg.version (warm-up, atomic switch, drain of what it replaces).
  virtual result<void> load(model_config cfg, models::any_model m) = 0;
  // Unloads one version, or every version when `version` is empty (not_found when not loaded).
  virtual result<void> unload(std::string_view name, std::string_view version) = 0;
  // (name, version) of every loaded version.
  virtual std::vector<std::pair<std::string, std::string>> loaded() const = 0;

 protected:
  ~model_loader() = default;
};

// What the repository routes delegate to. Every call re-reads the repository's directory. Thread-safe.
class model_source {
 public:
  virtual ~model_source() = default;
  // Whether `name` is this source's model (a directory of the repository now, or one it loaded before).
  virtual bool has(std::string_view name) const = 0;
  // Every model of the repository: its loaded versions (READY), its failure (UNAVAILABLE + reason), or
  // just its name when it was never loaded.
  virtual std::vector<repository_entry> index(const model_loader& into) const = 0;
  // (Re)loads `name` from its directory; the error is also recorded for index().
  virtual result<void> load(model_loader& into, std::string_view name) = 0;
  // Unloads every version of `name`.
  virtual result<void> unload(model_loader& into, std::string_view name) = 0;
};

}  // namespace jitembed::server
