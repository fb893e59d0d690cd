// A jitembed-server child process on 127.0.0.1 for the loader's fault tests: started with the binary
// CMake names (JITEMBED_SERVER_BIN), its URL read from the "listening on" line it prints (stdout goes to
// a temp file polled under a deadline), SIGKILLed and restarted on the same port.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace loader_test {

class server_process {
 public:
  server_process() = default;
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;
  ~server_process() { kill_now(); }

  // The gRPC endpoint when started with --grpc-port (else 0 / "").
  int grpc_port() const { return grpc_port_; }
  std::string grpc_url() const { return grpc_port_ ? "grpc://127.0.0.1:" + std::to_string(grpc_port_) : std::string(); }

  // Starts `bin args...` (args should include --port); waits up to `limit` for its URL.
  void start(const std::string& bin, const std::vector<std::string>& args, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    static int counter = 0;
    log_ = std::filesystem::temp_directory_path() / ("jitembed-loader-srv-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".log");
    std::filesystem::remove(log_);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<std::string> all{bin};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, bin.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw std::runtime_error("cannot spawn " + bin);
    const auto end = std::chrono::steady_clock::now() + limit;
    const std::string marker = "listening on ";
    while (std::chrono::steady_clock::now() < end) {
      std::ifstream in(log_);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string text = ss.str();
      if (auto p = text.find(marker); p != std::string::npos && text.find('\n', p) != std::string::npos) {
        url_ = text.substr(p + marker.size(), text.find('\n', p) - p - marker.size());
        port_ = std::stoi(url_.substr(url_.rfind(':') + 1));
        const std::string grpc_marker = "gRPC listening on ";  // printed with the line above (--grpc-port)
        if (auto g = text.find(grpc_marker); g != std::string::npos && text.find('\n', g) != std::string::npos) {
          const auto addr = text.substr(g + grpc_marker.size(), text.find('\n', g) - g - grpc_marker.size());
          grpc_port_ = std::stoi(addr.substr(addr.rfind(':') + 1));
        }
        return;
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("jitembed-server exited at start: " + text);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill_now();
    throw std::runtime_error("jitembed-server did not report its port");
  }

  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    std::error_code ec;
    std::filesystem::remove(log_, ec);
  }

  const std::string& url() const noexcept { return url_; }
  int port() const noexcept { return port_; }
  bool running() const noexcept { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
  std::filesystem::path log_;
  std::string url_;
  int port_ = 0;
  int grpc_port_ = 0;
};

}  // namespace loader_test
