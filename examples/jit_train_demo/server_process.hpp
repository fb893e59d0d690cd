// jit_train_demo: a jitembed-server child process on a free loopback port (--port 0): started with
// posix_spawn, its URL read from the "listening on" line, stopped with SIGTERM (it drains and exits 0).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "jitembed/core/error.hpp"

extern char** environ;

namespace jit_train_demo {

using namespace jitembed;

class server_process {
 public:
  server_process() = default;
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;
  server_process(server_process&& o) noexcept
      : pid_(o.pid_), url_(std::move(o.url_)), out_(o.out_), drain_(std::move(o.drain_)) {
    o.pid_ = -1;
    o.out_ = -1;
  }
  ~server_process() { stop(); }

  // Runs `binary args...` and waits (up to `timeout`) for "jitembed-server listening on URL" on its stdout.
  static result<server_process> create(const std::string& binary, const std::vector<std::string>& args,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    int fds[2];
    if (pipe(fds) != 0) return fail(errc::io_error, "pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    std::vector<std::string> all{binary};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, binary.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
      close(fds[0]);
      return fail(errc::not_found, "cannot start '" + binary + "' (pass --server-bin or --endpoints)");
    }
    server_process p;
    p.pid_ = pid;
    p.out_ = fds[0];
    const std::string marker = "listening on ";
    std::string seen;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const auto nl = seen.find('\n', seen.find(marker) == std::string::npos ? seen.size() : seen.find(marker));
      if (const auto at = seen.find(marker); at != std::string::npos && nl != std::string::npos) {
        p.url_ = seen.substr(at + marker.size(), nl - at - marker.size());
        // Keep reading what it prints later, so a full pipe never blocks it.
        p.drain_ = std::thread([fd = p.out_] {
          char sink[4096];
          while (read(fd, sink, sizeof sink) > 0) {
          }
        });
        return p;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return fail(errc::timeout, "'" + binary + "' did not report its port within " + std::to_string(timeout.count()) + " ms");
      pollfd pfd{p.out_, POLLIN, 0};
      if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[512];
      const auto n = read(p.out_, buf, sizeof buf);
      if (n <= 0) {
        int status = 0;
        waitpid(p.pid_, &status, 0);
        p.pid_ = -1;
        return fail(errc::unavailable, "'" + binary + "' exited before listening (status " + std::to_string(status) + "): " + seen);
      }
      seen.append(buf, static_cast<std::size_t>(n));
    }
  }

  const std::string& url() const noexcept { return url_; }
  int pid() const noexcept { return pid_; }

  // SIGTERM, then wait (SIGKILL after 10 s). Returns the exit status (or -1 when not running).
  int stop() {
    int status = -1;
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      bool exited = false;
      for (int i = 0; i < 1000 && !exited; ++i) {
        exited = waitpid(pid_, &status, WNOHANG) == pid_;
        if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (!exited) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
      }
      pid_ = -1;
    }
    if (drain_.joinable()) drain_.join();  // the child's exit closed the pipe's write end
    if (out_ >= 0) close(out_), out_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  std::string url_;
  int out_ = -1;
  std::thread drain_;
};

}  // namespace jit_train_demo
