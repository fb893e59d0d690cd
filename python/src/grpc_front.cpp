// jitembed.Server's gRPC front end (grpc_front.hpp says why a separate translation unit).
#include "grpc_front.hpp"

#if JITEMBED_PYTHON_GRPC
#include "jitembed/server/grpc_server.hpp"
#endif

namespace jitembed::python {

#if JITEMBED_PYTHON_GRPC
namespace {
class grpc_front_impl final : public grpc_front {
 public:
  explicit grpc_front_impl(server::grpc_server s) : server_(std::move(s)) {}
  std::uint16_t port() const override { return server_.port(); }
  void stop(std::chrono::milliseconds grace) override { server_.stop(grace); }

 private:
  server::grpc_server server_;
};
}  // namespace

result<std::unique_ptr<grpc_front>> start_grpc_front(server::grpc_server_options opts, server::service& svc) {
  JITEMBED_ASSIGN_OR_RETURN(auto s, server::grpc_server::create(std::move(opts), svc));
  return std::unique_ptr<grpc_front>(std::make_unique<grpc_front_impl>(std::move(s)));
}
#else
result<std::unique_ptr<grpc_front>> start_grpc_front(server::grpc_server_options, server::service&) {
  return fail(errc::unsupported_format,
              "grpc_port: this jitembed module is built without the grpc component "
              "(gRPC, Debian libgrpc++-dev, was not found)");
}
#endif

}  // namespace jitembed::python
