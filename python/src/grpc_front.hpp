// jitembed.Server's gRPC front end (KServe v2 inference.GRPCInferenceService beside HTTP), behind a small
// interface so that only grpc_front.cpp compiles gRPC's server headers (as tools/server_grpc.hpp does).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "jitembed/core/error.hpp"
#include "jitembed/server/grpc_options.hpp"
#include "jitembed/server/service.hpp"

namespace jitembed::python {

class grpc_front {
 public:
  virtual ~grpc_front() = default;
  virtual std::uint16_t port() const = 0;
  virtual void stop(std::chrono::milliseconds grace) = 0;
};

// Serves `svc` over gRPC until stop() (or destruction); errors: the server's (a busy port, unreadable TLS files).
// Without the grpc component (JITEMBED_PYTHON_GRPC unset) every call fails unsupported_format, naming why.
result<std::unique_ptr<grpc_front>> start_grpc_front(server::grpc_server_options opts, server::service& svc);

}  // namespace jitembed::python
