// jitembed-server's gRPC front end, started from its own translation unit (server_grpc.cpp): LibTorch's
// bundled headers (a TorchScript build of jitembed-server) and gRPC's abseil cannot share one.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "jitembed/core/error.hpp"
#include "jitembed/server/grpc_options.hpp"
#include "jitembed/server/service.hpp"

namespace jitembed_tools {

class grpc_front {
 public:
  virtual ~grpc_front() = default;
  virtual std::uint16_t port() const = 0;
  virtual void stop(std::chrono::milliseconds grace) = 0;
};

jitembed::result<std::unique_ptr<grpc_front>> start_grpc_front(jitembed::server::grpc_server_options opts,
                                                               jitembed::server::service& svc);

}  // namespace jitembed_tools
