// Two-stage pipeline schedules (pure, no communication): the exact orders, the dependencies every order must
// keep (an activation is sent after its forward, a backward runs after its gradient arrived), the in-flight
// bound of 1F1B, the op logs and the errors.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "jitembed/parallel/pipeline_schedule.hpp"

using namespace jitembed;
using namespace jitembed::parallel;

namespace {

using st = pipeline_stage;

std::vector<std::pair<int, int>> exchanges(const std::vector<pipeline_op>& ops) {
  std::vector<std::pair<int, int>> out;
  for (const auto& op : ops) {
    if (op.op == pipeline_op::kind::exchange) out.emplace_back(op.activation, op.gradient);
  }
  return out;
}

// Checks what any valid two-stage order keeps; returns the largest number of microbatches in flight on the
// first stage (forward run, backward not yet).
int check_dependencies(const std::vector<pipeline_op>& ops, int microbatches) {
  std::map<std::string, int> at;  // "EF3", "LB0", "XA2" (activation 2 exchanged), "XG1" -> position
  int in_flight = 0, most = 0;
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    const auto& op = ops[static_cast<std::size_t>(i)];
    std::vector<std::string> keys;
    if (op.op == pipeline_op::kind::exchange) {
      CHECK((op.activation >= 0 || op.gradient >= 0));  // no empty step
      if (op.activation >= 0) keys.push_back("XA" + std::to_string(op.activation));
      if (op.gradient >= 0) keys.push_back("XG" + std::to_string(op.gradient));
    } else {
      const std::string k = std::string(op.stage == st::first ? "E" : "L") +
                            (op.op == pipeline_op::kind::forward ? "F" : "B") + std::to_string(op.microbatch);
      keys.push_back(k);
      if (k[0] == 'E') {
        in_flight += k[1] == 'F' ? 1 : -1;
        most = std::max(most, in_flight);
      }
    }
    for (const auto& k : keys) {
      CHECK_MESSAGE(at.count(k) == 0, k << " twice");
      at[k] = i;
    }
  }
  for (int m = 0; m < microbatches; ++m) {
    CAPTURE(m);
    const auto s = std::to_string(m);
    for (const char* k : {"EF", "XA", "LF", "LB", "XG", "EB"}) REQUIRE(at.count(k + s) == 1);
    CHECK(at["EF" + s] < at["XA" + s]);       // the activation leaves after its forward
    CHECK(at["XA" + s] < at["LF" + s]);       // and arrives before the LM's forward
    CHECK(at["LB" + s] == at["LF" + s] + 1);  // the LM's layers keep one microbatch: F and B back to back
    CHECK(at["LB" + s] < at["XG" + s]);
    CHECK(at["XG" + s] < at["EB" + s]);
    if (m > 0) CHECK(at["EF" + std::to_string(m - 1)] < at["EF" + s]);  // microbatches in order
  }
  CHECK(at.size() == static_cast<std::size_t>(6 * microbatches));
  CHECK(in_flight == 0);
  return most;
}

}  // namespace

TEST_CASE("pipeline schedule: sequential runs one microbatch after the other") {
  const auto ops = two_stage_schedule(pipeline_schedule::sequential, 3).value();
  CHECK(op_log(ops, st::first) == "F0 B0 F1 B1 F2 B2");
  CHECK(op_log(ops, st::last) == "F0 B0 F1 B1 F2 B2");
  CHECK(exchanges(ops) == std::vector<std::pair<int, int>>{{0, -1}, {-1, 0}, {1, -1}, {-1, 1}, {2, -1}, {-1, 2}});
  CHECK(ops[0] == pipeline_op::forward(st::first, 0));
  CHECK(ops[2] == pipeline_op::forward(st::last, 0));
  CHECK(check_dependencies(ops, 3) == 1);
  CHECK_FALSE(forward_runs_ahead(op_log(ops, st::first)));
  // in_flight means nothing here.
  CHECK(two_stage_schedule(pipeline_schedule::sequential, 3, 1).value() == ops);
}

TEST_CASE("pipeline schedule: 1F1B runs the encoder's F(m+1) before B(m), with its gradient in the same step") {
  const auto ops = two_stage_schedule(pipeline_schedule::one_f_one_b, 4).value();
  CHECK(op_log(ops, st::first) == "F0 F1 B0 F2 B1 F3 B2 B3");
  CHECK(op_log(ops, st::last) == "F0 B0 F1 B1 F2 B2 F3 B3");
  // Step s sends activation s and takes back gradient s-1: neither stage waits for the other direction.
  CHECK(exchanges(ops) == std::vector<std::pair<int, int>>{{0, -1}, {1, 0}, {2, 1}, {3, 2}, {-1, 3}});
  CHECK(check_dependencies(ops, 4) == 2);
  CHECK(forward_runs_ahead(op_log(ops, st::first)));
  CHECK_FALSE(forward_runs_ahead(op_log(ops, st::last)));
  // Each stage's part: its own compute ops and every exchange, in the global order.
  const auto enc = ops_of(ops, st::first), lm = ops_of(ops, st::last);
  CHECK(enc.size() == 8 + 5);
  CHECK(lm.size() == 8 + 5);
  CHECK(exchanges(enc) == exchanges(lm));
  CHECK(op_log(enc, st::last).empty());
}

TEST_CASE("pipeline schedule: 1F1B bounds the microbatches in flight, every order keeps the dependencies") {
  for (int m = 1; m <= 7; ++m) {
    for (int k = 2; k <= 5; ++k) {
      CAPTURE(m);
      CAPTURE(k);
      const auto ops = two_stage_schedule(pipeline_schedule::one_f_one_b, m, k).value();
      CHECK(check_dependencies(ops, m) == std::min(k, m));
      CHECK(forward_runs_ahead(op_log(ops, st::first)) == (m > 1));
      CHECK(exchanges(ops).size() == static_cast<std::size_t>(m + std::min(k, m + 1) - 1));
    }
    CHECK(check_dependencies(two_stage_schedule(pipeline_schedule::sequential, m).value(), m) == 1);
  }
  CHECK(op_log(two_stage_schedule(pipeline_schedule::one_f_one_b, 5, 3).value(), st::first) ==
        "F0 F1 F2 B0 F3 B1 F4 B2 B3 B4");
  CHECK(op_log(two_stage_schedule(pipeline_schedule::one_f_one_b, 1).value(), st::first) == "F0 B0");
}

TEST_CASE("pipeline schedule: names and errors") {
  CHECK(parse_pipeline_schedule("1f1b").value() == pipeline_schedule::one_f_one_b);
  CHECK(parse_pipeline_schedule("sequential").value() == pipeline_schedule::sequential);
  CHECK(to_string(pipeline_schedule::one_f_one_b) == "1f1b");
  const auto bad = parse_pipeline_schedule("gpipe");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == errc::invalid_argument);
  CHECK(bad.error().message == "pipeline: unknown schedule 'gpipe' (sequential, 1f1b)");
  const auto none = two_stage_schedule(pipeline_schedule::sequential, 0);
  REQUIRE_FALSE(none);
  CHECK(none.error().message == "pipeline: 0 microbatches (need >= 1)");
  const auto one = two_stage_schedule(pipeline_schedule::one_f_one_b, 4, 1);
  REQUIRE_FALSE(one);
  CHECK(one.error().code == errc::invalid_argument);
  CHECK(one.error().message == "pipeline: 1f1b needs in_flight >= 2 (got 1)");
  CHECK_FALSE(forward_runs_ahead(""));
  CHECK(forward_runs_ahead("F0 F1 B0 B1"));
}
