// run_local_ranks: one process per rank with its rank in the environment, exit codes and signals reported
// per rank, stragglers killed at the deadline or soon after another rank fails, a start failure an error.
// The ranks are /bin/sh one-liners, so every case runs in well under a second (the deadlines are short).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "jitembed/parallel/local_launch.hpp"

using namespace jitembed;
using namespace jitembed::parallel;

namespace {

local_launch_options sh(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  local_launch_options o;
  o.executable = "/bin/sh";
  o.timeout = timeout;
  return o;
}

auto script(std::string s) {
  return [s = std::move(s)](int) { return std::vector<std::string>{"-c", s}; };
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("run_local_ranks: each rank gets its rank, the world size and the extra environment") {
  auto o = sh();
  o.env = {"EXTRA=40"};
  const auto ends = run_local_ranks(3, script("exit $((JITEMBED_RANK + 10 * JITEMBED_WORLD_SIZE + EXTRA))"), o).value();
  REQUIRE(ends.size() == 3);
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(ends[static_cast<std::size_t>(r)].rank == r);
    CHECK(ends[static_cast<std::size_t>(r)].end == rank_exit::how::exited);
    CHECK(ends[static_cast<std::size_t>(r)].code == 70 + r);
  }
  CHECK_FALSE(all_ok(ends));
  CHECK(ends[1].to_string() == "rank 1: exit 71");
  // The launcher's pid, for the ranks' parent-death check.
  const auto pid = run_local_ranks(1, script("test \"$JITEMBED_LAUNCHER_PID\" = \"$PPID\""), sh()).value();
  CHECK(all_ok(pid));
  // Arguments per rank.
  o.env.clear();
  const auto args = run_local_ranks(
                        2,
                        [](int r) {
                          return std::vector<std::string>{"-c", "exit $1", "sh", std::to_string(5 + r)};
                        },
                        o)
                        .value();
  CHECK(args[0].code == 5);
  CHECK(args[1].code == 6);
}

TEST_CASE("run_local_ranks: all ranks exiting 0 is ok, a signal is reported as one") {
  CHECK(all_ok(run_local_ranks(4, script("exit 0"), sh()).value()));
  const auto ends = run_local_ranks(2, script("if [ $JITEMBED_RANK = 1 ]; then kill -9 $$; fi"), sh()).value();
  CHECK(ends[0].ok());
  CHECK(ends[1].end == rank_exit::how::signaled);
  CHECK(ends[1].code == 9);
  CHECK(ends[1].to_string() == "rank 1: killed by signal 9");
}

TEST_CASE("run_local_ranks: ranks still running at the deadline are killed") {
  const auto t0 = std::chrono::steady_clock::now();
  const auto ends =
      run_local_ranks(3, script("[ $JITEMBED_RANK = 0 ] || exec sleep 30"), sh(std::chrono::milliseconds(300))).value();
  CHECK(seconds_since(t0) < 10);
  CHECK(ends[0].ok());
  CHECK(ends[1].end == rank_exit::how::timed_out);
  CHECK(ends[2].end == rank_exit::how::timed_out);
  CHECK(ends[2].to_string() == "rank 2: still running at the deadline, killed");
}

TEST_CASE("run_local_ranks: after a rank fails, the others get failure_grace and are then killed") {
  auto o = sh(std::chrono::seconds(60));
  o.failure_grace = std::chrono::milliseconds(200);
  const auto t0 = std::chrono::steady_clock::now();
  const auto ends = run_local_ranks(3, script("[ $JITEMBED_RANK = 1 ] && exit 3; exec sleep 30"), o).value();
  CHECK(seconds_since(t0) < 10);  // not the 60 s deadline, not the 30 s sleeps
  CHECK(ends[1].code == 3);
  CHECK(ends[0].end == rank_exit::how::killed_after_failure);
  CHECK(ends[2].end == rank_exit::how::killed_after_failure);
  CHECK(ends[0].to_string() == "rank 0: still running after another rank failed, killed");
}

TEST_CASE("run_local_ranks: errors") {
  local_launch_options missing;
  missing.executable = "/nonexistent/jitembed-rank";
  const auto r = run_local_ranks(2, script(""), missing);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == errc::io_error);
  CHECK(r.error().message ==
        "run_local_ranks: cannot start rank 0 ('/nonexistent/jitembed-rank'): No such file or directory");
  CHECK(run_local_ranks(0, script(""), sh()).code() == errc::invalid_argument);
  // args throwing for rank 1: rank 0 (already running) is killed, the error names the rank.
  const auto t0 = std::chrono::steady_clock::now();
  const auto threw = run_local_ranks(
      2,
      [](int rank) {
        if (rank == 1) throw std::runtime_error("no port");
        return std::vector<std::string>{"-c", "exec sleep 30"};
      },
      sh());
  REQUIRE_FALSE(threw);
  CHECK(threw.error().message == "run_local_ranks: args(1) threw: no port");
  CHECK(seconds_since(t0) < 10);
  CHECK(run_local_ranks(1, script(""), sh(std::chrono::milliseconds(0))).code() == errc::invalid_argument);
}

TEST_CASE("local_rank_of_this_process: from the environment run_local_ranks sets") {
  ::unsetenv(kLaunchParentVar);
  ::unsetenv(kLaunchRankVar);
  ::setenv(kLaunchWorldVar, "4", 1);
  CHECK(local_rank_of_this_process().code() == errc::not_found);
  ::setenv(kLaunchRankVar, "3", 1);
  const auto me = local_rank_of_this_process().value();
  CHECK(me.rank == 3);
  CHECK(me.world_size == 4);
  ::setenv(kLaunchRankVar, "4", 1);
  CHECK(local_rank_of_this_process().error().message == "local rank: rank 4 of world 4");
  ::setenv(kLaunchRankVar, "x1", 1);
  CHECK(local_rank_of_this_process().error().message == "local rank: JITEMBED_RANK='x1' is not an integer");
  ::unsetenv(kLaunchRankVar);
  ::unsetenv(kLaunchWorldVar);
}
