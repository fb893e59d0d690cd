// The JIT client and loader compiled once for jit_train_demo (JITEMBED_SEPARATE_COMPILATION), in a TU of their
// own: with jitembed::grpc it carries the grpc:// transport, whose gRPC headers never meet the LibTorch headers
// of jit_train_demo.cpp (--model-repository).
#include "jitembed/client/src.hpp"
#include "jitembed/loader/src.hpp"
