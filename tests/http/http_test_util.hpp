// Test helpers for net/http: a raw blocking TCP socket (to send what a real client would not) and
// a small response reader.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace http_test {

class raw_socket {
 public:
  explicit raw_socket(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  raw_socket(const raw_socket&) = delete;
  raw_socket& operator=(const raw_socket&) = delete;
  ~raw_socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }

  bool send(std::string_view s) {
    while (!s.empty()) {
      const auto n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      s.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  // Reads whatever arrives until the peer closes or `timeout` passes without data; closed() tells which.
  std::string read_until_close(std::chrono::milliseconds timeout) {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return out;
      char buf[65536];
      const auto n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        return out;
      }
      out.append(buf, static_cast<std::size_t>(n));
    }
  }

  // Reads until `count` complete responses (head + Content-Length body) are buffered, or timeout/close.
  std::string read_responses(int count, std::chrono::milliseconds timeout) {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (complete_responses(out) < count) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[65536];
      const auto n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
  }

  bool closed() const { return closed_; }

  // Counts complete responses in `s` (1xx interim responses count too).
  static int complete_responses(std::string_view s) {
    int n = 0;
    while (true) {
      const auto end = s.find("\r\n\r\n");
      if (end == std::string_view::npos) return n;
      std::size_t len = 0;
      const auto head = s.substr(0, end);
      const auto cl = head.find("Content-Length: ");
      if (cl != std::string_view::npos) len = std::strtoull(std::string(head.substr(cl + 16)).c_str(), nullptr, 10);
      if (s.size() < end + 4 + len) return n;
      s.remove_prefix(end + 4 + len);
      ++n;
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
};

inline bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace http_test
