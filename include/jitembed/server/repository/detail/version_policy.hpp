// The service's version order and version_policy: which loaded versions of a model stay loaded when a
// version is loaded (Triton's latest N / all / specific).
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/server/config.hpp"

namespace jitembed::server::detail {

// "12" < "9" numerically; non-numeric versions compare as strings after numeric ones.
inline bool version_less(const std::string& a, const std::string& b) {
  const bool na = is_decimal(a), nb = is_decimal(b);
  if (na && nb) return std::stoull(a) < std::stoull(b);
  if (na != nb) return na;
  return a < b;
}

struct version_order {
  bool operator()(const std::string& a, const std::string& b) const { return version_less(a, b); }
};

// Of `versions` (any order, no duplicates), the ones `p` keeps.
inline std::vector<std::string> kept_versions(std::vector<std::string> versions, const version_policy& p) {
  std::sort(versions.begin(), versions.end(), version_less);
  switch (p.which) {
    case version_policy::kind::all: return versions;
    case version_policy::kind::specific:
      std::erase_if(versions, [&](const std::string& v) { return std::find(p.versions.begin(), p.versions.end(), v) == p.versions.end(); });
      return versions;
    case version_policy::kind::latest: break;
  }
  if (versions.size() > p.num_versions) versions.erase(versions.begin(), versions.end() - static_cast<std::ptrdiff_t>(p.num_versions));
  return versions;
}

inline std::string describe(const version_policy& p) {
  switch (p.which) {
    case version_policy::kind::all: return "all";
    case version_policy::kind::specific: {
      std::string s = "specific [";
      for (std::size_t i = 0; i < p.versions.size(); ++i) s += (i ? ", " : "") + p.versions[i];
      return s + "]";
    }
    case version_policy::kind::latest: break;
  }
  return "latest " + std::to_string(p.num_versions);
}

// The versions `p` keeps once `version` joins the `loaded` versions of model `name`; an error saying why
// when that does not include `version`.
inline result<std::vector<std::string>> check_admitted(const std::string& name, const std::string& version,
                                                       std::vector<std::string> loaded, const version_policy& p) {
  if (std::find(loaded.begin(), loaded.end(), version) == loaded.end()) loaded.push_back(version);
  auto kept = kept_versions(std::move(loaded), p);
  if (std::find(kept.begin(), kept.end(), version) != kept.end()) return kept;
  std::string newer;
  for (const auto& v : kept) newer += (newer.empty() ? "" : ", ") + v;
  return fail(errc::invalid_argument, "load: version " + version + " of '" + name + "' is not kept by its version_policy " + describe(p) +
                                          (p.which == version_policy::kind::latest ? " (loaded: " + newer + "; unload those first)" : ""));
}

// Puts `inst` into `versions` (a name's loaded versions) as `version`, and moves the versions `p` no longer
// keeps into `gone` (the caller drains them). Fails, changing nothing, when `p` would not keep `version`.
template <class Map, class Inst>
result<void> install_version(Map& versions, const std::string& name, const std::string& version, std::shared_ptr<Inst> inst,
                             const version_policy& p, std::vector<std::shared_ptr<Inst>>& gone) {
  std::vector<std::string> loaded;
  for (const auto& [v, i] : versions) loaded.push_back(v);
  JITEMBED_ASSIGN_OR_RETURN(const auto kept, check_admitted(name, version, std::move(loaded), p));
  if (auto& slot = versions[version]) gone.push_back(std::move(slot));
  versions[version] = std::move(inst);
  std::erase_if(versions, [&](auto& e) {
    if (std::find(kept.begin(), kept.end(), e.first) != kept.end()) return false;
    gone.push_back(std::move(e.second));
    return true;
  });
  return {};
}

}  // namespace jitembed::server::detail
