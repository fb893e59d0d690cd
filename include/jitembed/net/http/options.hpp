// Limits and timeouts of the HTTP server and client (Boost-free, so a CLI or config loader can fill them).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace jitembed::net::http {

struct server_options {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  std::uint16_t port = 0;          // 0: ephemeral, see server::port()
  int io_threads = 2;
  std::size_t max_header_bytes = std::size_t{1} << 20;  // larger → 431
  std::size_t max_body_bytes = std::size_t{64} << 20;   // larger → 413, judged from Content-Length first
  std::chrono::milliseconds header_timeout{10000};      // first byte .. end of header; then 408 + close
  std::chrono::milliseconds body_timeout{30000};        // end of header .. end of body; then 408 + close
  std::chrono::milliseconds idle_timeout{60000};        // keep-alive wait for the next request; then close
  std::chrono::milliseconds write_timeout{30000};       // writing one response; then close
  std::size_t max_connections = 1024;                   // more are accepted and closed at once
  // HTTPS: the server's certificate chain (leaf first) and private key, PEM files. Both empty: plain HTTP.
  // The TLS handshake must finish within header_timeout.
  std::string tls_cert_file;
  std::string tls_key_file;
};

struct client_options {
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds io_timeout{30000};  // whole exchange: write request + read response
  std::size_t pool_size = 8;                    // idle keep-alive connections kept
  std::size_t max_header_bytes = std::size_t{1} << 20;
  std::size_t max_response_bytes = std::size_t{256} << 20;
  // HTTPS: TLS 1.2+ to the server, whose certificate chain must verify against tls_ca_file (PEM; empty: the
  // system's default CA paths) and name the host (DNS name or IP address, as given to the client).
  bool tls = false;
  std::string tls_ca_file;
};

}  // namespace jitembed::net::http
