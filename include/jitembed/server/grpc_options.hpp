// Options of the gRPC front end (server/grpc_server.hpp), free of gRPC's headers so that a program can
// fill them in a translation unit that never includes gRPC (jitembed-server: LibTorch's bundled headers
// and gRPC's abseil do not mix in one translation unit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace jitembed::server {

struct grpc_server_options {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  std::uint16_t port = 0;          // 0: ephemeral, see grpc_server::port()
  // Largest request message accepted (larger: RESOURCE_EXHAUSTED from gRPC itself); responses are not capped.
  std::size_t max_message_bytes = std::size_t{64} << 20;
  // TLS (PEM files), as Triton's --grpc-use-ssl / --grpc-server-cert / --grpc-server-key /
  // --grpc-root-cert: with cert and key the port speaks TLS only; a root cert makes clients present a
  // certificate it signed (mutual TLS).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_root_cert_file;
};

}  // namespace jitembed::server
