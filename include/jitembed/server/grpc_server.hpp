// The service's KServe v2 gRPC front end (inference.GRPCInferenceService, as Triton serves it) over the same
// core as HTTP, on gRPC's callback API. Component jitembed::grpc.
#pragma once

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "jitembed/core/error.hpp"
#include "jitembed/net/http/detail/tls_server.hpp"
#include "jitembed/server/detail/grpc_calls.hpp"
#include "jitembed/server/grpc_options.hpp"
#include "jitembed/server/service.hpp"

namespace jitembed::server {

// A running gRPC front end of a service. A movable value; the service's core stays alive while it runs
// (a service destroyed first drains: calls then answer UNAVAILABLE).
class grpc_server final {
 public:
  // Binds and starts. Errors: io_error (cannot bind, unreadable TLS files), invalid_argument (a TLS cert
  // without its key or the reverse, a file not PEM, a key not matching its certificate; stream limits of 0).
  static result<grpc_server> create(grpc_server_options opts, service& svc) {
    if (opts.stream.window == 0 || opts.stream.queued_bytes == 0)
      return fail(errc::invalid_argument, "gRPC stream limits: window and queued_bytes must be at least 1");
    auto st = std::make_unique<state>(svc.core_, opts.stream);
    ::grpc::ServerBuilder builder;
    std::shared_ptr<::grpc::ServerCredentials> creds = ::grpc::InsecureServerCredentials();
    if (!opts.tls_cert_file.empty() || !opts.tls_key_file.empty()) {
      // checked here so that a bad file is named (gRPC itself only fails to start: "cannot listen")
      JITEMBED_ASSIGN_OR_RETURN(auto checked,
                                net::http::detail::tls_server_context(opts.tls_cert_file, opts.tls_key_file, "gRPC"));
      if (!opts.tls_root_cert_file.empty())
        JITEMBED_TRY(net::http::detail::check_tls_ca_file(checked, opts.tls_root_cert_file, "gRPC"));
      ::grpc::SslServerCredentialsOptions ssl(opts.tls_root_cert_file.empty()
                                                  ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                  : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
      JITEMBED_ASSIGN_OR_RETURN(auto cert, detail::read_pem(opts.tls_cert_file, "certificate"));
      JITEMBED_ASSIGN_OR_RETURN(auto key, detail::read_pem(opts.tls_key_file, "private key"));
      ssl.pem_key_cert_pairs.push_back({std::move(key), std::move(cert)});
      if (!opts.tls_root_cert_file.empty()) {
        JITEMBED_ASSIGN_OR_RETURN(ssl.pem_root_certs, detail::read_pem(opts.tls_root_cert_file, "root certificate"));
      }
      creds = ::grpc::SslServerCredentials(ssl);
    }
    const bool v6 = opts.host.find(':') != std::string::npos;
    const std::string address = (v6 ? "[" + opts.host + "]" : opts.host) + ":" + std::to_string(opts.port);
    builder.AddListeningPort(address, creds, &st->port);
    builder.RegisterCallbackGenericService(&st->service);
    builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<std::size_t>(opts.max_message_bytes, INT32_MAX)));
    builder.SetMaxSendMessageSize(-1);
    st->server = builder.BuildAndStart();
    if (!st->server || st->port == 0) return fail(errc::io_error, "gRPC: cannot listen on " + address);
    return grpc_server(std::move(st));
  }

  grpc_server(grpc_server&&) noexcept = default;
  grpc_server& operator=(grpc_server&& other) noexcept {
    if (this != &other) {
      stop(std::chrono::milliseconds(0));
      st_ = std::move(other.st_);
    }
    return *this;
  }
  ~grpc_server() { stop(std::chrono::milliseconds(0)); }

  // The bound port (the ephemeral one when options.port was 0).
  std::uint16_t port() const noexcept { return st_ ? static_cast<std::uint16_t>(st_->port) : 0; }

  // Stops accepting calls; calls in flight get `grace` to finish, then are cancelled. Idempotent.
  void stop(std::chrono::milliseconds grace) {
    if (!st_ || !st_->server) return;
    st_->server->Shutdown(std::chrono::system_clock::now() + grace);
    st_->server->Wait();
    st_->server.reset();
  }

 private:
  struct state {
    state(std::shared_ptr<detail::service_core> core, grpc_stream_limits limits) : service(std::move(core), limits) {}
    detail::kserve_grpc_service service;
    std::unique_ptr<::grpc::Server> server;
    int port = 0;
  };
  explicit grpc_server(std::unique_ptr<state> st) noexcept : st_(std::move(st)) {}

  std::unique_ptr<state> st_;
};

}  // namespace jitembed::server
