// tcp_store_server: hosts a TCP rendezvous store (like the server inside PyTorch's TCPStore) on an I/O
// thread; ranks reach it with tcp_store::open(server.address()).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "jitembed/core/detail/capture.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/parallel/detail/tcp_store_host.hpp"
#include "jitembed/parallel/tcp_store_options.hpp"

namespace jitembed::parallel {

struct tcp_store_server_options {
  std::string host = "127.0.0.1";  // address to bind (a name is resolved); loopback unless asked otherwise
  std::uint16_t port = 0;          // 0: an ephemeral port, see port()
  tcp_store_options limits;        // io_timeout, max_key_bytes, max_value_bytes (connect_timeout is unused)
};

// The server. create() binds and starts the I/O thread; destruction (or stop()) closes every connection
// (clients waiting in get() see it close) and joins the thread. Movable; a moved-from server may only be
// destroyed or assigned to.
class tcp_store_server {
 public:
  // invalid_argument for a zero io_timeout; io_error when the host does not resolve or the port cannot be
  // bound.
  static result<tcp_store_server> create(tcp_store_server_options opts = {}) {
    if (opts.limits.io_timeout.count() <= 0)
      return fail(errc::invalid_argument,
                  "tcp_store_server: io_timeout " + std::to_string(opts.limits.io_timeout.count()) + " ms must be > 0");
    return jitembed::core_detail::capture("tcp_store_server", [&]() -> result<tcp_store_server> {
      auto host = std::make_unique<detail::tcp_store_host>(opts.limits);
      JITEMBED_ASSIGN_OR_RETURN(auto bound, host->start(opts.host, opts.port));
      return tcp_store_server(std::move(host), std::move(opts.host), bound);
    });
  }

  tcp_store_server(tcp_store_server&&) noexcept = default;
  tcp_store_server& operator=(tcp_store_server&&) noexcept = default;
  ~tcp_store_server() = default;  // the host stops in its destructor

  // The bound port, the host as given, and "host:port" (IPv6 in brackets) for tcp_store::open.
  std::uint16_t port() const noexcept { return port_; }
  const std::string& host() const noexcept { return host_; }
  std::string address() const {
    const bool v6 = host_.find(':') != std::string::npos;
    return (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
  }

  // Closes the acceptor and every connection, then joins the I/O thread (idempotent).
  void stop() {
    if (h_) h_->stop();
  }

 private:
  tcp_store_server(std::unique_ptr<detail::tcp_store_host> h, std::string host, std::uint16_t port) noexcept
      : h_(std::move(h)), host_(std::move(host)), port_(port) {}

  std::unique_ptr<detail::tcp_store_host> h_;
  std::string host_;
  std::uint16_t port_ = 0;
};

}  // namespace jitembed::parallel
