// The gRPC front's method table (inference.GRPCInferenceService, routed by path) and its message bytes:
// parsing a request, serializing an answer, reading a string field (server/grpc_server.hpp is the API).
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "jitembed/net/grpc/kserve_schema.hpp"

namespace jitembed::server::detail {

namespace pb = google::protobuf;

enum class grpc_method : std::uint8_t {
  server_live,
  server_ready,
  model_ready,
  server_metadata,
  model_metadata,
  model_infer,
  model_stream_infer,
  model_config,
  model_statistics,
  repository_index,
  repository_load,
  repository_unload,
  shm_status,
  shm_register,
  shm_unregister,
  cuda_shm_status,
  cuda_shm_register,
  cuda_shm_unregister,
};

struct grpc_method_info {
  std::string_view name;
  grpc_method method;
  std::string_view request;  // message type
};

inline constexpr grpc_method_info kGrpcMethods[] = {
    {"ServerLive", grpc_method::server_live, "ServerLiveRequest"},
    {"ServerReady", grpc_method::server_ready, "ServerReadyRequest"},
    {"ModelReady", grpc_method::model_ready, "ModelReadyRequest"},
    {"ServerMetadata", grpc_method::server_metadata, "ServerMetadataRequest"},
    {"ModelMetadata", grpc_method::model_metadata, "ModelMetadataRequest"},
    {"ModelInfer", grpc_method::model_infer, "ModelInferRequest"},
    {"ModelStreamInfer", grpc_method::model_stream_infer, "ModelInferRequest"},
    {"ModelConfig", grpc_method::model_config, "ModelConfigRequest"},
    {"ModelStatistics", grpc_method::model_statistics, "ModelStatisticsRequest"},
    {"RepositoryIndex", grpc_method::repository_index, "RepositoryIndexRequest"},
    {"RepositoryModelLoad", grpc_method::repository_load, "RepositoryModelLoadRequest"},
    {"RepositoryModelUnload", grpc_method::repository_unload, "RepositoryModelUnloadRequest"},
    {"SystemSharedMemoryStatus", grpc_method::shm_status, "SystemSharedMemoryStatusRequest"},
    {"SystemSharedMemoryRegister", grpc_method::shm_register, "SystemSharedMemoryRegisterRequest"},
    {"SystemSharedMemoryUnregister", grpc_method::shm_unregister, "SystemSharedMemoryUnregisterRequest"},
    {"CudaSharedMemoryStatus", grpc_method::cuda_shm_status, "CudaSharedMemoryStatusRequest"},
    {"CudaSharedMemoryRegister", grpc_method::cuda_shm_register, "CudaSharedMemoryRegisterRequest"},
    {"CudaSharedMemoryUnregister", grpc_method::cuda_shm_unregister, "CudaSharedMemoryUnregisterRequest"},
};

// "/inference.GRPCInferenceService/ModelInfer" -> its entry; nullptr for any other path.
inline const grpc_method_info* find_grpc_method(std::string_view path) {
  const std::string_view svc = net::grpc::kServiceName;
  if (path.size() < svc.size() + 2 || path[0] != '/' || path.substr(1, svc.size()) != svc ||
      path[svc.size() + 1] != '/')
    return nullptr;
  const auto name = path.substr(svc.size() + 2);
  for (const auto& m : kGrpcMethods)
    if (m.name == name) return &m;
  return nullptr;
}

inline bool parse_message(const ::grpc::ByteBuffer& in, pb::Message& msg) {
  ::grpc::ByteBuffer copy(in);  // the reader takes a non-const buffer; copying a ByteBuffer shares its slices
  ::grpc::ProtoBufferReader reader(&copy);
  return msg.ParseFromZeroCopyStream(&reader);
}

inline ::grpc::ByteBuffer serialize_message(const pb::Message& msg) {
  const std::string bytes = msg.SerializeAsString();
  ::grpc::Slice s(bytes.data(), bytes.size());
  return ::grpc::ByteBuffer(&s, 1);
}

inline std::string string_field(const pb::Message& m, const char* name) {
  const auto* f = m.GetDescriptor()->FindFieldByName(name);
  return f ? m.GetReflection()->GetString(m, f) : std::string();
}

}  // namespace jitembed::server::detail
