// Ranks as processes on this machine (what torchrun --standalone does): start one child per rank with its
// rank in the environment, wait for all within a deadline, kill stragglers. The rendezvous (a tcp_store or a
// file_store the children open) is the caller's; this file only starts, watches and reaps processes.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "jitembed/core/error.hpp"

extern char** environ;

namespace jitembed::parallel {

struct local_launch_options {
  std::string executable = "/proc/self/exe";  // what every rank runs (default: this program)
  // The whole run: ranks still running at the deadline are killed (SIGKILL) and reported as timed out.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // After a rank fails (exit code != 0 or a signal), how long the others may still run before they are
  // killed: long enough for them to notice the dead peer and report it, short enough not to hang.
  std::chrono::milliseconds failure_grace{std::chrono::seconds(5)};
  std::vector<std::string> env;  // "NAME=value" entries added to each child's environment
};

// How one rank's process ended.
struct rank_exit {
  enum class how : std::uint8_t { exited, signaled, timed_out, killed_after_failure };
  int rank = 0;
  how end = how::exited;
  int code = 0;  // exit code (exited) or signal number (signaled)

  bool ok() const noexcept { return end == how::exited && code == 0; }
  std::string to_string() const {
    const std::string r = "rank " + std::to_string(rank) + ": ";
    switch (end) {
      case how::exited:
        return r + "exit " + std::to_string(code);
      case how::signaled:
        return r + "killed by signal " + std::to_string(code);
      case how::timed_out:
        return r + "still running at the deadline, killed";
      case how::killed_after_failure:
        return r + "still running after another rank failed, killed";
    }
    return r + "unknown";
  }
};

// The environment names a launched rank reads (local_rank_of_this_process).
inline constexpr const char* kLaunchRankVar = "JITEMBED_RANK";
inline constexpr const char* kLaunchWorldVar = "JITEMBED_WORLD_SIZE";
inline constexpr const char* kLaunchParentVar = "JITEMBED_LAUNCHER_PID";

// Runs `world` processes of opt.executable, rank r with argv[1..] = args(r) and JITEMBED_RANK=r,
// JITEMBED_WORLD_SIZE=world, JITEMBED_LAUNCHER_PID (this process) and opt.env in its environment (stdout and
// stderr inherited), and waits for all of them. Returns how each ended, in rank order: a failed rank is a
// value here, not an error. Errors: invalid_argument (world < 1, a timeout <= 0), io_error when a process
// cannot be started (the ones already started are killed and reaped first; likewise invalid_argument when
// args throws). Blocks the calling thread, which should live until it returns: a rank that called
// local_rank_of_this_process gets SIGKILL when the thread that started it ends (PR_SET_PDEATHSIG).
inline result<std::vector<rank_exit>> run_local_ranks(int world,
                                                      const std::function<std::vector<std::string>(int rank)>& args,
                                                      const local_launch_options& opt = {}) {
  using clock = std::chrono::steady_clock;
  if (world < 1) return fail(errc::invalid_argument, "run_local_ranks: world size " + std::to_string(world));
  if (opt.timeout.count() <= 0 || opt.failure_grace.count() < 0) {
    return fail(errc::invalid_argument, "run_local_ranks: timeout " + std::to_string(opt.timeout.count()) +
                                            " ms must be > 0 (failure_grace >= 0)");
  }
  std::vector<pid_t> pids;
  std::vector<rank_exit> ends(static_cast<std::size_t>(world));
  auto kill_all = [&](rank_exit::how why, const std::vector<bool>& done) {
    for (std::size_t r = 0; r < pids.size(); ++r) {
      if (done[r]) continue;
      ::kill(pids[r], SIGKILL);
      int status = 0;
      while (::waitpid(pids[r], &status, 0) < 0 && errno == EINTR) {
      }
      ends[r].end = why;
    }
  };
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> argv_s{opt.executable};
    try {
      for (auto& a : args(r)) argv_s.push_back(std::move(a));
    } catch (const std::exception& e) {  // no rank outlives a launcher that gives up
      kill_all(rank_exit::how::killed_after_failure, std::vector<bool>(pids.size(), false));
      return fail(errc::invalid_argument, "run_local_ranks: args(" + std::to_string(r) + ") threw: " + e.what());
    }
    std::vector<std::string> env_s;
    for (char** e = environ; e && *e; ++e) {
      const std::string_view kv(*e);
      const bool ours = kv.starts_with(std::string(kLaunchRankVar) + "=") ||
                        kv.starts_with(std::string(kLaunchWorldVar) + "=") ||
                        kv.starts_with(std::string(kLaunchParentVar) + "=");
      if (!ours) env_s.emplace_back(kv);
    }
    env_s.push_back(std::string(kLaunchRankVar) + "=" + std::to_string(r));
    env_s.push_back(std::string(kLaunchWorldVar) + "=" + std::to_string(world));
    env_s.push_back(std::string(kLaunchParentVar) + "=" + std::to_string(::getpid()));
    env_s.insert(env_s.end(), opt.env.begin(), opt.env.end());
    std::vector<char*> argv, envp;
    for (auto& a : argv_s) argv.push_back(a.data());
    for (auto& e : env_s) envp.push_back(e.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, opt.executable.c_str(), nullptr, nullptr, argv.data(), envp.data());
    if (rc != 0) {
      kill_all(rank_exit::how::killed_after_failure, std::vector<bool>(pids.size(), false));
      return fail(errc::io_error, "run_local_ranks: cannot start rank " + std::to_string(r) + " ('" + opt.executable +
                                      "'): " + std::strerror(rc));
    }
    pids.push_back(pid);
    ends[static_cast<std::size_t>(r)].rank = r;
  }
  // Poll with waitpid(WNOHANG) rather than waiting for SIGCHLD: a library must not install signal handlers
  // or block signals in its caller's threads. 2 ms of latency per reap is nothing next to a rank's start.
  std::vector<bool> done(pids.size(), false);
  std::size_t left = pids.size();
  const auto deadline = clock::now() + opt.timeout;
  auto stop_at = deadline;
  while (left > 0) {
    bool reaped = false;
    for (std::size_t r = 0; r < pids.size(); ++r) {
      if (done[r]) continue;
      int status = 0;
      const pid_t got = ::waitpid(pids[r], &status, WNOHANG);
      if (got != pids[r]) continue;
      done[r] = true;
      --left;
      reaped = true;
      auto& e = ends[r];
      if (WIFEXITED(status)) {
        e.end = rank_exit::how::exited;
        e.code = WEXITSTATUS(status);
      } else {
        e.end = rank_exit::how::signaled;
        e.code = WIFSIGNALED(status) ? WTERMSIG(status) : -1;
      }
      if (!e.ok()) stop_at = std::min(stop_at, clock::now() + opt.failure_grace);
    }
    if (left == 0) break;
    if (clock::now() >= stop_at) {
      kill_all(stop_at < deadline ? rank_exit::how::killed_after_failure : rank_exit::how::timed_out, done);
      break;
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return ends;
}

// Whether every rank exited with code 0.
inline bool all_ok(const std::vector<rank_exit>& ends) noexcept {
  for (const auto& e : ends) {
    if (!e.ok()) return false;
  }
  return !ends.empty();
}

struct launched_rank {
  int rank = 0;
  int world_size = 0;
};

// In a process run_local_ranks started: its rank and world size from the environment. It also asks the
// kernel to SIGKILL this process when its launcher dies (PR_SET_PDEATHSIG), and exits at once (code 125)
// when the launcher is already gone, so that no rank outlives a killed launcher. not_found when the
// variables are absent (a process not started by run_local_ranks), invalid_argument when malformed.
inline result<launched_rank> local_rank_of_this_process() {
  auto read_int = [](const char* name) -> result<long long> {
    const char* v = std::getenv(name);
    if (v == nullptr) return fail(errc::not_found, std::string("local rank: ") + name + " is not set");
    long long x = 0;
    const std::string_view s(v);
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
    if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) {
      return fail(errc::invalid_argument, std::string("local rank: ") + name + "='" + v + "' is not an integer");
    }
    return x;
  };
  JITEMBED_ASSIGN_OR_RETURN(const long long rank, read_int(kLaunchRankVar));
  JITEMBED_ASSIGN_OR_RETURN(const long long world, read_int(kLaunchWorldVar));
  if (world < 1 || rank < 0 || rank >= world || world > (1 << 20)) {
    return fail(errc::invalid_argument,
                "local rank: rank " + std::to_string(rank) + " of world " + std::to_string(world));
  }
  if (std::getenv(kLaunchParentVar) != nullptr) {
    JITEMBED_ASSIGN_OR_RETURN(const long long parent, read_int(kLaunchParentVar));
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (static_cast<long long>(::getppid()) != parent) std::_Exit(125);  // died before prctl took effect
  }
  return launched_rank{static_cast<int>(rank), static_cast<int>(world)};
}

}  // namespace jitembed::parallel
