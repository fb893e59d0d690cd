// The JIT client, the loader and the data set's index (format/src.hpp) compiled once for the repository's own
// programs (cmake/JitembedClientImpl.cmake); with jitembed::grpc it carries the grpc:// transport, whose gRPC
// headers stay out of the programs' TUs.
#include "jitembed/client/src.hpp"
#include "jitembed/format/src.hpp"
#include "jitembed/loader/src.hpp"
