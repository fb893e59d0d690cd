// Microbatch schedules of a two-stage pipeline (a first module feeding a last one, e.g. a vision encoder
// feeding a language model): one global order of forwards, backwards and boundary exchanges, pure (no
// communication), that every rank runs its part of.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/error.hpp"

namespace jitembed::parallel {

enum class pipeline_schedule : std::uint8_t {
  // Microbatch after microbatch: first F(m), exchange, last F(m) B(m), exchange, first B(m). The only one
  // for stages that share ranks (nothing can overlap on a rank that runs both).
  sequential,
  // One-forward-one-backward for disjoint stages: the first stage runs F(0) … F(k-1), then alternates B(m)
  // and F(m+k), so its forward of m+1 runs while the last stage does F(m) B(m); k microbatches in flight.
  one_f_one_b,
};

constexpr std::string_view to_string(pipeline_schedule s) noexcept {
  switch (s) {
    case pipeline_schedule::sequential:
      return "sequential";
    case pipeline_schedule::one_f_one_b:
      return "1f1b";
  }
  return "unknown";
}

// "sequential" or "1f1b" -> invalid_argument naming the accepted names.
inline result<pipeline_schedule> parse_pipeline_schedule(std::string_view name) {
  if (name == "sequential") return pipeline_schedule::sequential;
  if (name == "1f1b") return pipeline_schedule::one_f_one_b;
  return fail(errc::invalid_argument, "pipeline: unknown schedule '" + std::string(name) + "' (sequential, 1f1b)");
}

enum class pipeline_stage : std::uint8_t { first, last };

// One step of the global order. forward / backward: `stage` runs microbatch `microbatch`. exchange: the
// boundary moves the activation of microbatch `activation` first → last and the gradient of microbatch
// `gradient` last → first, in one batch (-1: none that way); ranks of both stages take part.
struct pipeline_op {
  enum class kind : std::uint8_t { forward, backward, exchange };
  kind op = kind::forward;
  pipeline_stage stage = pipeline_stage::first;  // forward / backward only
  int microbatch = -1;                           // forward / backward only
  int activation = -1, gradient = -1;            // exchange only

  static pipeline_op forward(pipeline_stage s, int m) { return {kind::forward, s, m, -1, -1}; }
  static pipeline_op backward(pipeline_stage s, int m) { return {kind::backward, s, m, -1, -1}; }
  static pipeline_op exchange(int activation, int gradient) {
    return {kind::exchange, pipeline_stage::first, -1, activation, gradient};
  }
  bool runs_on(pipeline_stage s) const noexcept { return op == kind::exchange || stage == s; }
  friend bool operator==(const pipeline_op&, const pipeline_op&) = default;
};

// The global order of one training step over `microbatches` microbatches. Every rank runs the ops of its
// stage(s) in this order (a rank in both stages runs all of them), so every collective of a stage's group
// and every exchange meets the same sequence on all of its ranks: no deadlock, and the exchanges of a pair
// of ranks match in order. one_f_one_b: `in_flight` (k >= 2) bounds the microbatches whose first-stage
// forward has run and backward has not; step s exchanges activation s and gradient s-k+1. invalid_argument
// for microbatches < 1 or a 1f1b in_flight < 2 (k = 1 would need a gradient in the step that delivers its
// own activation). in_flight above microbatches acts as microbatches.
inline result<std::vector<pipeline_op>> two_stage_schedule(pipeline_schedule schedule, int microbatches,
                                                           int in_flight = 2) {
  using st = pipeline_stage;
  if (microbatches < 1) {
    return fail(errc::invalid_argument, "pipeline: " + std::to_string(microbatches) + " microbatches (need >= 1)");
  }
  std::vector<pipeline_op> ops;
  if (schedule == pipeline_schedule::sequential) {
    for (int m = 0; m < microbatches; ++m) {
      ops.push_back(pipeline_op::forward(st::first, m));
      ops.push_back(pipeline_op::exchange(m, -1));
      ops.push_back(pipeline_op::forward(st::last, m));
      ops.push_back(pipeline_op::backward(st::last, m));
      ops.push_back(pipeline_op::exchange(-1, m));
      ops.push_back(pipeline_op::backward(st::first, m));
    }
    return ops;
  }
  if (schedule != pipeline_schedule::one_f_one_b) return fail(errc::invalid_argument, "pipeline: unknown schedule");
  if (in_flight < 2) {
    return fail(errc::invalid_argument, "pipeline: 1f1b needs in_flight >= 2 (got " + std::to_string(in_flight) + ")");
  }
  const int k = std::min(in_flight, microbatches + 1);  // k > M changes nothing past M + 1
  // Step s carries activation s (s < M) and gradient g = s-k+1 (g >= 0). Before it: the first stage's F(s)
  // and the last stage's F(g) B(g) (activation g arrived at step g < s); after it: the first stage's B(g).
  for (int s = 0; s < microbatches + k - 1; ++s) {
    const int g = s - k + 1;
    const int a = s < microbatches ? s : -1;
    if (a >= 0) ops.push_back(pipeline_op::forward(st::first, a));
    if (g >= 0) {
      ops.push_back(pipeline_op::forward(st::last, g));
      ops.push_back(pipeline_op::backward(st::last, g));
    }
    ops.push_back(pipeline_op::exchange(a, g));
    if (g >= 0) ops.push_back(pipeline_op::backward(st::first, g));
  }
  return ops;
}

// The ops a rank of one stage runs: its forwards, backwards and every exchange, in order.
inline std::vector<pipeline_op> ops_of(std::span<const pipeline_op> ops, pipeline_stage s) {
  std::vector<pipeline_op> out;
  for (const auto& op : ops) {
    if (op.runs_on(s)) out.push_back(op);
  }
  return out;
}

// A stage's compute ops as "F0 F1 B0 F2 B1 ..." (exchanges and the other stage left out): the op log.
inline std::string op_log(std::span<const pipeline_op> ops, pipeline_stage s) {
  std::string log;
  for (const auto& op : ops) {
    if (op.op == pipeline_op::kind::exchange || op.stage != s) continue;
    if (!log.empty()) log += ' ';
    log += (op.op == pipeline_op::kind::forward ? 'F' : 'B') + std::to_string(op.microbatch);
  }
  return log;
}

// Whether the log ("F0 F1 B0 ...") runs some F(m+1) before B(m): the overlap 1F1B gives the first stage.
inline bool forward_runs_ahead(std::string_view log) {
  std::vector<std::string> words;
  std::size_t at = 0;
  while (at < log.size()) {
    const auto sp = log.find(' ', at);
    words.emplace_back(log.substr(at, sp == std::string_view::npos ? std::string_view::npos : sp - at));
    at = sp == std::string_view::npos ? log.size() : sp + 1;
  }
  auto index = [&](char kind, int m) {
    const std::string w = kind + std::to_string(m);
    return static_cast<std::ptrdiff_t>(std::find(words.begin(), words.end(), w) - words.begin());
  };
  for (int m = 0;; ++m) {
    const auto f = index('F', m + 1), b = index('B', m);
    if (f == static_cast<std::ptrdiff_t>(words.size()) || b == static_cast<std::ptrdiff_t>(words.size())) return false;
    if (f < b) return true;
  }
}

}  // namespace jitembed::parallel
