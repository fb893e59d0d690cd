// Test and benchmark helpers: a throwaway redis-server on a free loopback port (started with fork/exec,
// killed with the owner, also when the owner dies), and a listening socket that never answers.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace jitembed::test {

// A port that was free a moment ago (bind 127.0.0.1:0, read it back, close).
inline int pick_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind 127.0.0.1:0 failed");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

// Absolute path of `name` on PATH, or "" when it is not there.
inline std::string find_on_path(const std::string& name) {
  const char* env = std::getenv("PATH");
  const std::string_view path = env ? env : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = path.find(':', start);
    const std::string_view dir = path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    std::string full(dir.empty() ? std::string_view(".") : dir);
    full += '/';
    full += name;
    if (::access(full.c_str(), X_OK) == 0) return full;
    if (end == std::string_view::npos) return {};
    start = end + 1;
  }
}

// True when a PING to 127.0.0.1:port answers PONG within `timeout_ms`.
inline bool redis_pings(int port, int timeout_ms = 200) {
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  bool ok = false;
  if (c && !c->err && redisSetTimeout(c, tv) == REDIS_OK) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
    ok = r && r->type == REDIS_REPLY_STATUS && std::string(r->str, r->len) == "PONG";
    if (r) freeReplyObject(r);
  }
  if (c) redisFree(c);
  return ok;
}

// A redis-server child process on 127.0.0.1:port, no persistence. Throws when redis-server is not on PATH
// or does not answer PING within 5 s.
class redis_server {
 public:
  // extra_args: more redis-server options, e.g. {"--unixsocket", path}.
  explicit redis_server(int port = 0, std::vector<std::string> extra_args = {}) : extra_args_(std::move(extra_args)) {
    exe_ = find_on_path("redis-server");
    if (exe_.empty())
      throw std::runtime_error("redis-server not found on PATH: install it (Debian: apt-get install redis-server)");
    if (port != 0) {
      port_ = port;
      start();
      return;
    }
    for (int attempt = 0;; ++attempt) {  // the free port may be taken between pick and bind: try again
      port_ = pick_free_port();
      try {
        start();
        return;
      } catch (const std::runtime_error&) {
        if (attempt == 2) throw;
      }
    }
  }
  ~redis_server() { stop(SIGTERM); }
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;

  int port() const noexcept { return port_; }
  bool running() const noexcept { return pid_ > 0; }

  // Starts (again) on the same port and waits until it answers PING.
  void start() {
    if (pid_ > 0) return;
    const std::string port_s = std::to_string(port_);
    std::vector<std::string> args = {exe_, "--port", port_s, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                     "--daemonize", "no", "--logfile", "", "--loglevel", "warning"};
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
      if (::getppid() != parent) ::_exit(127);
      const int devnull = ::open("/dev/null", O_RDWR);
      if (devnull >= 0) {
        ::dup2(devnull, 0);
        ::dup2(devnull, 1);
        ::dup2(devnull, 2);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    pid_ = pid;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      if (redis_pings(port_)) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited: port taken or bad arguments
        pid_ = -1;
        throw std::runtime_error("redis-server exited on port " + port_s);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop(SIGKILL);
    throw std::runtime_error("redis-server did not answer PING on port " + port_s + " within 5 s");
  }

  // Stops the server (SIGKILL simulates a crash) and reaps it.
  void stop(int sig = SIGKILL) noexcept {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  std::vector<std::string> extra_args_;
  std::string exe_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// A socket on 127.0.0.1 that listens (so connects succeed through the kernel backlog) but never accepts
// or answers: a hung server.
class silent_server {
 public:
  silent_server() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      if (fd_ >= 0) ::close(fd_);
      throw std::runtime_error("silent_server: cannot listen on 127.0.0.1:0");
    }
    port_ = ntohs(a.sin_port);
  }
  ~silent_server() { ::close(fd_); }
  silent_server(const silent_server&) = delete;
  silent_server& operator=(const silent_server&) = delete;
  int port() const noexcept { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A raw hiredis connection for tests to poke at the server behind the store's back.
class raw_redis {
 public:
  explicit raw_redis(int port) {
    timeval tv{1, 0};
    c_ = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c_ || c_->err) throw std::runtime_error("raw_redis: cannot connect to port " + std::to_string(port));
    redisSetTimeout(c_, tv);
  }
  ~raw_redis() { redisFree(c_); }
  raw_redis(const raw_redis&) = delete;
  raw_redis& operator=(const raw_redis&) = delete;

  // Runs a command given as arguments (binary-safe); returns the reply (caller frees) or throws.
  redisReply* command(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(redisCommandArgv(c_, static_cast<int>(args.size()), argv.data(), lens.data()));
    if (!r) throw std::runtime_error(std::string("raw_redis: ") + c_->errstr);
    return r;
  }
  void set(const std::string& key, const std::string& value) { freeReplyObject(command({"SET", key, value})); }
  // SETs pipelined in one round trip.
  void set_many(const std::vector<std::pair<std::string, std::string>>& kv) {
    for (const auto& [k, v] : kv) redisAppendCommand(c_, "SET %b %b", k.data(), k.size(), v.data(), v.size());
    for (std::size_t i = 0; i < kv.size(); ++i) {
      void* r = nullptr;
      if (redisGetReply(c_, &r) != REDIS_OK) throw std::runtime_error(std::string("raw_redis: ") + c_->errstr);
      freeReplyObject(r);
    }
  }
  // The string stored under key, or "<nil>" when there is none.
  std::string get(const std::string& key) {
    redisReply* r = command({"GET", key});
    std::string s = r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : std::string("<nil>");
    freeReplyObject(r);
    return s;
  }
  long long integer(const std::vector<std::string>& args) {
    redisReply* r = command(args);
    const long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return v;
  }
  bool exists(const std::string& key) { return integer({"EXISTS", key}) == 1; }

 private:
  redisContext* c_ = nullptr;
};

}  // namespace jitembed::test
