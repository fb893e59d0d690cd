// Options of the gRPC front end, free of gRPC's headers: jitembed-server fills them where LibTorch's headers
// are included, which do not mix with gRPC's abseil.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace jitembed::server {

// Back-pressure of one ModelStreamInfer stream: no request is read while it holds `window` answers (running
// or unwritten) or `queued_bytes` of answers the client has not taken, so a client that never reads stalls in
// gRPC's flow control instead of growing the server. Both at least 1.
struct grpc_stream_limits {
  std::size_t window = 128;
  std::size_t queued_bytes = std::size_t{64} << 20;
};

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
  grpc_stream_limits stream;
};

}  // namespace jitembed::server
