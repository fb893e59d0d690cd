// Shared benchmark harness: best-of-N wall timing, a human-readable table, then one JSON object per
// result line ({"bench": ..., "metric": value, ...}) so runs can be compared. Comparisons are always
// measured side by side in one process and reported as ratios.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jitembed::bench {

// Runs fn `reps` times after one warm-up and returns the best (minimum) seconds of one run.
template <class F>
double best_seconds(int reps, F&& fn) {
  fn();
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

// Alternates a and b `rounds` times (so drift hits both alike) and returns their best seconds.
template <class A, class B>
std::pair<double, double> side_by_side(int rounds, A&& a, B&& b) {
  a();
  b();
  double ba = 1e300, bb = 1e300;
  for (int i = 0; i < rounds; ++i) {
    ba = std::min(ba, best_seconds(1, a));
    bb = std::min(bb, best_seconds(1, b));
  }
  return {ba, bb};
}

// A benchmark program's command line (CLI11): --help, the program's own options (added to `app` before
// CLI11_PARSE(cli.app, argc, argv)) and, when the program has parts, the parts to run as positional names
// (none named: all). An unknown flag or part is refused with its name and a non-zero exit.
class command_line {
 public:
  explicit command_line(std::string description, std::vector<std::string> parts = {})
      : app(std::move(description)), parts_(std::move(parts)) {
    if (!parts_.empty())
      app.add_option("PART", selected_, "parts to run (default: all)")->check(CLI::IsMember(parts_));
  }

  CLI::App app;

  // True when part `name` was asked for (or none was named).
  bool wanted(std::string_view name) const {
    return selected_.empty() || std::find(selected_.begin(), selected_.end(), name) != selected_.end();
  }

 private:
  std::vector<std::string> parts_;
  std::vector<std::string> selected_;
};

// Collects rows; print() writes the table and then the JSON lines.
class reporter {
 public:
  // One result: bench name, the figure, its unit, an optional target (ratio >= target passes).
  void add(std::string bench, std::string metric, double value, std::string unit, nlohmann::json extra = {},
           double target = 0.0) {
    nlohmann::json j = {{"bench", bench}, {metric, value}, {"unit", unit}};
    if (target > 0) {
      j["target"] = target;
      j["meets_target"] = value >= target;
    }
    for (auto& [k, v] : extra.items()) j[k] = v;
    rows_.push_back({std::move(bench), std::move(metric), value, std::move(unit), target, std::move(j)});
  }

  void print() const {
    std::printf("%-44s %-22s %14s %-10s %s\n", "bench", "metric", "value", "unit", "target");
    for (const auto& r : rows_) {
      std::string tgt = r.target > 0 ? (">= " + fmt(r.target) + (r.value >= r.target ? "  ok" : "  MISSED")) : "";
      std::printf("%-44s %-22s %14s %-10s %s\n", r.bench.c_str(), r.metric.c_str(), fmt(r.value).c_str(),
                  r.unit.c_str(), tgt.c_str());
    }
    std::printf("\n");
    for (const auto& r : rows_) std::printf("%s\n", r.json.dump().c_str());
    std::fflush(stdout);
  }

 private:
  static std::string fmt(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return buf;
  }
  struct row {
    std::string bench, metric;
    double value;
    std::string unit;
    double target;
    nlohmann::json json;
  };
  std::vector<row> rows_;
};

}  // namespace jitembed::bench
