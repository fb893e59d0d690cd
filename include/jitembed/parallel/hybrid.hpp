// Per-module parallel plans (strategy, degree, ranks) and the layout of a module's activation; the boundary
// transform between two modules laid out differently is in boundary.hpp (included here).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/parallel/boundary.hpp"
#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/placement.hpp"

namespace jitembed::parallel {

enum class strategy : std::uint8_t { replicate, sequence_parallel, tensor_parallel };

constexpr std::string_view to_string(strategy s) noexcept {
  switch (s) {
    case strategy::replicate:
      return "replicate";
    case strategy::sequence_parallel:
      return "sequence_parallel";
    case strategy::tensor_parallel:
      return "tensor_parallel";
  }
  return "unknown";
}

// One module's layout: `ranks` are ranks of the parent communicator (ranks.size() == degree); the module's
// own group orders them as listed (ranks[k] is the module's rank k).
struct module_plan {
  std::string name;
  strategy s = strategy::replicate;
  int degree = 1;
  std::vector<int> ranks;
};

// The layout of a module's input/output activation: sequence parallel shards the sequence dim; tensor
// parallel and replicate hold the whole activation on every rank of the module.
inline layout activation_layout(const module_plan& m, int seq_dim) {
  if (m.s == strategy::sequence_parallel) return {m.ranks, placement::shard(seq_dim)};
  return {m.ranks, placement::replicate()};
}

// A set of module plans over a world of `world_size` ranks.
class hybrid_plan {
 public:
  // Validates the plans (invalid_argument naming the module): a name, unique names, a known strategy,
  // degree >= 1, as many ranks as the degree, ranks in [0, world_size) and listed once.
  static result<hybrid_plan> create(std::vector<module_plan> modules, int world_size) {
    if (world_size <= 0) return fail(errc::invalid_argument, "hybrid_plan: world size " + std::to_string(world_size));
    for (std::size_t i = 0; i < modules.size(); ++i) {
      const auto& m = modules[i];
      const std::string who = "hybrid_plan: module '" + m.name + "'";
      if (m.name.empty()) {
        return fail(errc::invalid_argument, "hybrid_plan: module " + std::to_string(i) + " has no name");
      }
      for (std::size_t j = 0; j < i; ++j) {
        if (modules[j].name == m.name) return fail(errc::invalid_argument, who + " is listed twice");
      }
      if (m.s != strategy::replicate && m.s != strategy::sequence_parallel && m.s != strategy::tensor_parallel) {
        return fail(errc::invalid_argument, who + ": unknown strategy");
      }
      if (m.degree < 1) return fail(errc::invalid_argument, who + ": degree " + std::to_string(m.degree) + " < 1");
      if (m.ranks.size() != static_cast<std::size_t>(m.degree)) {
        return fail(errc::invalid_argument,
                    who + ": degree " + std::to_string(m.degree) + " but " + std::to_string(m.ranks.size()) + " ranks");
      }
      for (std::size_t a = 0; a < m.ranks.size(); ++a) {
        if (m.ranks[a] < 0 || m.ranks[a] >= world_size) {
          return fail(errc::invalid_argument, who + ": rank " + std::to_string(m.ranks[a]) + " outside [0, " +
                                                  std::to_string(world_size) + ")");
        }
        for (std::size_t b = 0; b < a; ++b) {
          if (m.ranks[a] == m.ranks[b]) {
            return fail(errc::invalid_argument, who + ": rank " + std::to_string(m.ranks[a]) + " listed twice");
          }
        }
      }
    }
    return hybrid_plan(std::move(modules), world_size);
  }

  int world_size() const noexcept { return world_; }
  const std::vector<module_plan>& modules() const noexcept { return modules_; }
  bool contains(std::string_view name) const noexcept { return find(name) != nullptr; }

  // Throws not_found for a name the plan does not have.
  const module_plan& operator[](std::string_view name) const {
    const module_plan* m = find(name);
    if (!m) throw error(errc::not_found, "hybrid_plan: no module '" + std::string(name) + "'");
    return *m;
  }

  // Whether parent rank `rank` runs the module.
  bool is_member(std::string_view name, int rank) const {
    const auto& r = (*this)[name].ranks;
    return std::find(r.begin(), r.end(), rank) != r.end();
  }

  layout activation_layout(std::string_view name, int seq_dim) const {
    return parallel::activation_layout((*this)[name], seq_dim);
  }

  // The module's communicator, split from `parent` (collective over parent: every parent rank calls it
  // with the same module). Members get a group ordered like module_plan::ranks, the others an empty one.
  template <communicator C>
  result<C> group(C& parent, std::string_view name) const {
    const module_plan* m = find(name);
    if (!m) return fail(errc::not_found, "hybrid_plan: no module '" + std::string(name) + "'");
    if (!parent.valid() || parent.size() != world_) {
      return fail(errc::invalid_argument, "hybrid_plan: a world of " + std::to_string(world_) +
                                              " ranks, the parent communicator has " + std::to_string(parent.size()));
    }
    const auto it = std::find(m->ranks.begin(), m->ranks.end(), parent.rank());
    if (it == m->ranks.end()) return parent.split(kNoColor, 0);
    const int color = static_cast<int>(m - modules_.data());
    return parent.split(color, static_cast<int>(it - m->ranks.begin()));
  }

 private:
  hybrid_plan(std::vector<module_plan> modules, int world_size) : modules_(std::move(modules)), world_(world_size) {}

  const module_plan* find(std::string_view name) const noexcept {
    for (const auto& m : modules_) {
      if (m.name == name) return &m;
    }
    return nullptr;
  }

  std::vector<module_plan> modules_;
  int world_ = 0;
};

}  // namespace jitembed::parallel
