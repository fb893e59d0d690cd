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
  const auto numeric = [](const std::string& s) {
    return !s.empty() && s.size() < 19 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  const bool na = numeric(a), nb = numeric(b);
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

// Whether `p` keeps `version` once it joins the `loaded` versions of model `name`; the error says why not.
inline result<void> check_admitted(const std::string& name, const std::string& version, std::vector<std::string> loaded,
                                   const version_policy& p) {
  if (std::find(loaded.begin(), loaded.end(), version) == loaded.end()) loaded.push_back(version);
  const auto kept = kept_versions(std::move(loaded), p);
  if (std::find(kept.begin(), kept.end(), version) != kept.end()) return {};
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
  JITEMBED_TRY(check_admitted(name, version, loaded, p));
  if (std::find(loaded.begin(), loaded.end(), version) == loaded.end()) loaded.push_back(version);
  const auto kept = kept_versions(loaded, p);
  if (auto& slot = versions[version]) gone.push_back(std::move(slot));
  versions[version] = std::move(inst);
  for (auto it = versions.begin(); it != versions.end();) {
    if (std::find(kept.begin(), kept.end(), it->first) == kept.end()) {
      gone.push_back(std::move(it->second));
      it = versions.erase(it);
    } else {
      ++it;
    }
  }
  return {};
}

}  // namespace jitembed::server::detail
