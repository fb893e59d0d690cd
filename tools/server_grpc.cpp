// jitembed-server's gRPC front end (server_grpc.hpp says why a separate translation unit).
#include "server_grpc.hpp"

#include "jitembed/server/grpc_server.hpp"

namespace jitembed_tools {

namespace {
class grpc_front_impl final : public grpc_front {
 public:
  explicit grpc_front_impl(jitembed::server::grpc_server s) : server_(std::move(s)) {}
  std::uint16_t port() const override { return server_.port(); }
  void stop(std::chrono::milliseconds grace) override { server_.stop(grace); }

 private:
  jitembed::server::grpc_server server_;
};
}  // namespace

jitembed::result<std::unique_ptr<grpc_front>> start_grpc_front(jitembed::server::grpc_server_options opts,
                                                               jitembed::server::service& svc) {
  JITEMBED_ASSIGN_OR_RETURN(auto s, jitembed::server::grpc_server::create(std::move(opts), svc));
  return std::unique_ptr<grpc_front>(std::make_unique<grpc_front_impl>(std::move(s)));
}

}  // namespace jitembed_tools
