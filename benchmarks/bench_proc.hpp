// Helpers of the client benchmarks: jitembed-server and perf_analyzer as child processes on loopback
// ports, killed on every way out (scope exit, exit(), std::terminate, SIGINT / SIGTERM / SIGHUP).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "jitembed/net/http/client.hpp"

extern char** environ;

namespace jitembed::bench {

// Pids of the children alive now: killed (SIGKILL) by the exit / terminate / signal hooks.
namespace detail {
inline constexpr int kMaxChildren = 64;
inline std::atomic<pid_t> g_children[kMaxChildren];
inline void add_child(pid_t p) {
  for (auto& c : g_children) {
    pid_t z = 0;
    if (c.compare_exchange_strong(z, p)) return;
  }
}
inline void remove_child(pid_t p) {
  for (auto& c : g_children) {
    pid_t q = p;
    if (c.compare_exchange_strong(q, 0)) return;
  }
}
inline void kill_children() noexcept {
  for (auto& c : g_children) {
    const pid_t p = c.exchange(0);
    if (p > 0) ::kill(p, SIGKILL);
  }
}
// Extra cleanup on a signal (a benchmark's temp dir); best effort, the process is going down anyway.
inline std::atomic<void (*)()> g_signal_cleanup{nullptr};
inline void on_signal(int sig) {
  kill_children();
  if (auto f = g_signal_cleanup.load()) f();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}
}  // namespace detail

// Call once at the start of main(): children die with the benchmark however it ends.
inline void install_child_reaper() {
  std::atexit(detail::kill_children);
  std::set_terminate([] {
    detail::kill_children();
    std::abort();
  });
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::signal(s, detail::on_signal);
  ::signal(SIGPIPE, SIG_IGN);
}

inline std::uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  const auto port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A spawned process (posix_spawn), stdout+stderr to a log file; SIGTERM on stop() / destruction.
class child {
 public:
  child(const std::vector<std::string>& argv, const std::string& log, const std::map<std::string, std::string>& env = {}) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::vector<std::string> env_store;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      const auto eq = kv.find('=');
      if (eq != std::string::npos && env.count(kv.substr(0, eq))) continue;
      env_store.push_back(kv);
    }
    for (const auto& [k, v] : env) env_store.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : env_store) envp.push_back(s.data());
    envp.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0].c_str(), &fa, nullptr, args.data(), envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    if (pid_ > 0) detail::add_child(pid_);
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  ~child() { stop(); }
  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  bool running() {
    if (pid_ <= 0) return false;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      status_ = st;
      detail::remove_child(pid_);
      pid_ = -1;
      return false;
    }
    return true;
  }
  // Waits for exit (at most `limit`, then SIGKILL); the exit status, -1 if it did not exit normally.
  int wait(std::chrono::milliseconds limit = std::chrono::hours(1)) {
    if (pid_ > 0) {
      const auto end = std::chrono::steady_clock::now() + limit;
      int st = 0;
      while (::waitpid(pid_, &st, WNOHANG) != pid_) {
        if (std::chrono::steady_clock::now() > end) {
          ::kill(pid_, SIGKILL);
          ::waitpid(pid_, &st, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      status_ = st;
      detail::remove_child(pid_);
      pid_ = -1;
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }
  int stop() {
    if (pid_ > 0) ::kill(pid_, SIGTERM);
    return wait(std::chrono::seconds(15));
  }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
};

// jitembed-server on a free loopback port, ready when /v2/health/ready answers 200.
class server_process {
 public:
  server_process(const std::string& binary, std::vector<std::string> args, const std::string& log) {
    port_ = free_port();
    std::vector<std::string> argv = {binary, "--host", "127.0.0.1", "--port", std::to_string(port_)};
    argv.insert(argv.end(), args.begin(), args.end());
    proc_.emplace(argv, log);
    net::http::client c("127.0.0.1", port_, net::http::client_options{});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline && proc_->running()) {
      auto r = c.request("GET", "/v2/health/ready", {}, "");
      if (r && r->status == 200) {
        ready_ = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::fprintf(stderr, "jitembed-server not ready; log %s:\n%s\n", log.c_str(), read_text(log).c_str());
  }
  bool ready() const { return ready_; }
  std::uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int stop() { return proc_ ? proc_->stop() : -1; }
  // CPU seconds (user + system) the server process has used so far; 0 when unknown.
  double cpu_seconds() const {
    if (!proc_ || proc_->pid() <= 0) return 0;
    const std::string stat = read_text("/proc/" + std::to_string(proc_->pid()) + "/stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream in(stat.substr(close + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && in >> field; ++i) {  // fields 14 and 15: utime, stime (clock ticks)
      if (i == 14) utime = std::stoull(field);
      if (i == 15) stime = std::stoull(field);
    }
    return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }

 private:
  std::uint16_t port_ = 0;
  std::optional<child> proc_;
  bool ready_ = false;
};

inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  const auto k = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

struct perf_analyzer_tool {
  std::string path;
  std::map<std::string, std::string> env;
};

// perf_analyzer from an explicit path, $PERF_ANALYZER or the project's .venv, checked by running --version.
inline std::optional<perf_analyzer_tool> find_perf_analyzer(const std::string& explicit_path) {
  std::vector<std::string> candidates;
  if (!explicit_path.empty()) candidates.push_back(explicit_path);
  if (const char* e = std::getenv("PERF_ANALYZER")) candidates.emplace_back(e);
  #if defined(JITEMBED_VENV_DIR)
  const std::string venv = JITEMBED_VENV_DIR;
#else
  const std::string venv;
#endif
  if (!venv.empty()) {
    candidates.push_back(venv + "/perf_analyzer/bin/perf_analyzer");
    candidates.push_back(venv + "/bin/perf_analyzer");
  }
  perf_analyzer_tool t;
  if (!venv.empty()) {  // the tritonclient-2.47 binary needs libcudart.so.12 from nvidia-cuda-runtime-cu12
    std::string ld = venv + "/lib/python3.11/site-packages/nvidia/cuda_runtime/lib";
    if (const char* old = std::getenv("LD_LIBRARY_PATH")) ld += std::string(":") + old;
    t.env["LD_LIBRARY_PATH"] = ld;
  }
  for (const auto& c : candidates) {
    if (::access(c.c_str(), X_OK) != 0) continue;
    const std::string log = "/tmp/jitembed_bench_pa_version_" + std::to_string(::getpid()) + ".log";
    child p({c, "--version"}, log, t.env);
    if (p.started() && p.wait(std::chrono::seconds(30)) == 0 && read_text(log).find("Perf Analyzer Version") != std::string::npos) {
      t.path = c;
      return t;
    }
  }
  return std::nullopt;
}

// Columns of a perf_analyzer -f CSV, one map per row.
inline std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::vector<std::map<std::string, std::string>> rows;
  auto split = [](const std::string& l) {
    std::vector<std::string> out;
    std::stringstream ss(l);
    std::string x;
    while (std::getline(ss, x, ',')) out.push_back(x);
    return out;
  };
  if (!std::getline(f, line)) return rows;
  const auto head = split(line);
  while (std::getline(f, line)) {
    auto v = split(line);
    if (v.size() != head.size()) continue;
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < v.size(); ++i) row[head[i]] = v[i];
    rows.push_back(std::move(row));
  }
  return rows;
}

// perf_analyzer's JSON input data carries BYTES elements as {"b64": ...}.
inline std::string base64(const std::string& in) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    out += k[(v >> 18) & 63], out += k[(v >> 12) & 63], out += k[(v >> 6) & 63], out += k[v & 63];
  }
  if (i + 1 == in.size()) {
    const unsigned v = static_cast<unsigned char>(in[i]) << 16;
    out += k[(v >> 18) & 63], out += k[(v >> 12) & 63], out += "==";
  } else if (i + 2 == in.size()) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += k[(v >> 18) & 63], out += k[(v >> 12) & 63], out += k[(v >> 6) & 63], out += "=";
  }
  return out;
}

}  // namespace jitembed::bench
