// The JIT client and loader compiled once for the repository's own programs (cmake/JitembedClientImpl.cmake);
// with jitembed::grpc it carries the grpc:// transport, whose gRPC headers stay out of the programs' TUs.
#include "jitembed/client/src.hpp"
#include "jitembed/loader/src.hpp"
