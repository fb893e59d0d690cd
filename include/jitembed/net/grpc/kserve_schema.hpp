// The KServe v2 / Triton gRPC messages (package `inference`, service GRPCInferenceService), written here
// with KServe's and Triton's field names and numbers (facts of grpc_service.proto and, for
// ModelConfigResponse, the part of model_config.proto jitembed fills), built at run time into a
// DescriptorPool of dynamic messages (net/protobuf/schema.hpp): the library is header-only (no generated
// .pb.cc), like the model repository's config.pbtxt schema (server/repository/detail/schema.hpp). Message names are not
// on the wire; the method paths ("/inference.GRPCInferenceService/ModelInfer") are.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/message.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "jitembed/net/protobuf/schema.hpp"

namespace jitembed::net::grpc {

// The service's full name: gRPC method paths are "/" + kServiceName + "/" + method.
inline constexpr std::string_view kServiceName = "inference.GRPCInferenceService";

inline constexpr std::string_view kKServeSchema = R"pb(
  syntax = "proto3"
  ;
package inference;

// ---- model_config.proto: what ModelConfigResponse carries from jitembed (the rest is never filled)
enum DataType {
  TYPE_INVALID = 0; TYPE_BOOL = 1; TYPE_UINT8 = 2; TYPE_UINT16 = 3; TYPE_UINT32 = 4; TYPE_UINT64 = 5;
  TYPE_INT8 = 6; TYPE_INT16 = 7; TYPE_INT32 = 8; TYPE_INT64 = 9; TYPE_FP16 = 10; TYPE_FP32 = 11;
  TYPE_FP64 = 12; TYPE_STRING = 13; TYPE_BF16 = 14;
}
message ModelInstanceGroup {
  enum Kind { KIND_AUTO = 0; KIND_GPU = 1; KIND_CPU = 2; KIND_MODEL = 3; }
  string name = 1;
  Kind kind = 4;
  int32 count = 2;
  repeated int32 gpus = 3;
}
message ModelInput {
  enum Format { FORMAT_NONE = 0; FORMAT_NHWC = 1; FORMAT_NCHW = 2; }
  string name = 1;
  DataType data_type = 2;
  Format format = 3;
  repeated int64 dims = 4;
  bool optional = 8;
}
message ModelOutput {
  string name = 1;
  DataType data_type = 2;
  repeated int64 dims = 3;
}
message ModelVersionPolicy {
  message Latest { uint32 num_versions = 1; }
  message All {}
  message Specific { repeated int64 versions = 1; }
  oneof policy_choice { Latest latest = 1; All all = 2; Specific specific = 3; }
}
message ModelDynamicBatching {
  repeated int32 preferred_batch_size = 1;
  uint64 max_queue_delay_microseconds = 2;
  bool preserve_ordering = 3;
}
message ModelParameter { string string_value = 1; }
message ModelConfig {
  string name = 1;
  string platform = 2;
  string backend = 17;
  ModelVersionPolicy version_policy = 3;
  int32 max_batch_size = 4;
  repeated ModelInput input = 5;
  repeated ModelOutput output = 6;
  repeated ModelInstanceGroup instance_group = 7;
  map<string, ModelParameter> parameters = 14;
  oneof scheduling_choice { ModelDynamicBatching dynamic_batching = 11; }
}

// ---- grpc_service.proto
message ServerLiveRequest {}
message ServerLiveResponse { bool live = 1; }
message ServerReadyRequest {}
message ServerReadyResponse { bool ready = 1; }
message ModelReadyRequest { string name = 1; string version = 2; }
message ModelReadyResponse { bool ready = 1; }
message ServerMetadataRequest {}
message ServerMetadataResponse { string name = 1; string version = 2; repeated string extensions = 3; }
message ModelMetadataRequest { string name = 1; string version = 2; }
message ModelMetadataResponse {
  message TensorMetadata { string name = 1; string datatype = 2; repeated int64 shape = 3; }
  string name = 1;
  repeated string versions = 2;
  string platform = 3;
  repeated TensorMetadata inputs = 4;
  repeated TensorMetadata outputs = 5;
}
message InferParameter {
  oneof parameter_choice {
    bool bool_param = 1; int64 int64_param = 2; string string_param = 3; double double_param = 4;
    uint64 uint64_param = 5;
  }
}
message InferTensorContents {
  repeated bool bool_contents = 1;
  repeated int32 int_contents = 2;
  repeated int64 int64_contents = 3;
  repeated uint32 uint_contents = 4;
  repeated uint64 uint64_contents = 5;
  repeated float fp32_contents = 6;
  repeated double fp64_contents = 7;
  repeated bytes bytes_contents = 8;
}
message ModelInferRequest {
  message InferInputTensor {
    string name = 1;
    string datatype = 2;
    repeated int64 shape = 3;
    map<string, InferParameter> parameters = 4;
    InferTensorContents contents = 5;
  }
  message InferRequestedOutputTensor {
    string name = 1;
    map<string, InferParameter> parameters = 2;
  }
  string model_name = 1;
  string model_version = 2;
  string id = 3;
  map<string, InferParameter> parameters = 4;
  repeated InferInputTensor inputs = 5;
  repeated InferRequestedOutputTensor outputs = 6;
  repeated bytes raw_input_contents = 7;
}
message ModelInferResponse {
  message InferOutputTensor {
    string name = 1;
    string datatype = 2;
    repeated int64 shape = 3;
    map<string, InferParameter> parameters = 4;
    InferTensorContents contents = 5;
  }
  string model_name = 1;
  string model_version = 2;
  string id = 3;
  map<string, InferParameter> parameters = 4;
  repeated InferOutputTensor outputs = 5;
  repeated bytes raw_output_contents = 6;
}
message ModelStreamInferResponse { string error_message = 1; ModelInferResponse infer_response = 2; }
message ModelConfigRequest { string name = 1; string version = 2; }
message ModelConfigResponse { ModelConfig config = 1; }
message ModelStatisticsRequest { string name = 1; string version = 2; }
message StatisticDuration { uint64 count = 1; uint64 ns = 2; }
message InferStatistics {
  StatisticDuration success = 1;
  StatisticDuration fail = 2;
  StatisticDuration queue = 3;
  StatisticDuration compute_input = 4;
  StatisticDuration compute_infer = 5;
  StatisticDuration compute_output = 6;
  StatisticDuration cache_hit = 7;
  StatisticDuration cache_miss = 8;
}
message InferBatchStatistics {
  uint64 batch_size = 1;
  StatisticDuration compute_input = 2;
  StatisticDuration compute_infer = 3;
  StatisticDuration compute_output = 4;
}
message ModelStatistics {
  string name = 1;
  string version = 2;
  uint64 last_inference = 3;
  uint64 inference_count = 4;
  uint64 execution_count = 5;
  InferStatistics inference_stats = 6;
  repeated InferBatchStatistics batch_stats = 7;
}
message ModelStatisticsResponse { repeated ModelStatistics model_stats = 1; }
message ModelRepositoryParameter {
  oneof parameter_choice { bool bool_param = 1; int64 int64_param = 2; string string_param = 3; bytes bytes_param = 4; }
}
message RepositoryIndexRequest { string repository_name = 1; bool ready = 2; }
message RepositoryIndexResponse {
  message ModelIndex { string name = 1; string version = 2; string state = 3; string reason = 4; }
  repeated ModelIndex models = 1;
}
message RepositoryModelLoadRequest {
  string repository_name = 1;
  string model_name = 2;
  map<string, ModelRepositoryParameter> parameters = 3;
}
message RepositoryModelLoadResponse {}
message RepositoryModelUnloadRequest {
  string repository_name = 1;
  string model_name = 2;
  map<string, ModelRepositoryParameter> parameters = 3;
}
message RepositoryModelUnloadResponse {}
message SystemSharedMemoryStatusRequest { string name = 1; }
message SystemSharedMemoryStatusResponse {
  message RegionStatus { string name = 1; string key = 2; uint64 offset = 3; uint64 byte_size = 4; }
  map<string, RegionStatus> regions = 1;
}
message SystemSharedMemoryRegisterRequest { string name = 1; string key = 2; uint64 offset = 3; uint64 byte_size = 4; }
message SystemSharedMemoryRegisterResponse {}
message SystemSharedMemoryUnregisterRequest { string name = 1; }
message SystemSharedMemoryUnregisterResponse {}
message CudaSharedMemoryStatusRequest { string name = 1; }
message CudaSharedMemoryStatusResponse {
  message RegionStatus { string name = 1; uint64 device_id = 2; uint64 byte_size = 3; }
  map<string, RegionStatus> regions = 1;
}
message CudaSharedMemoryRegisterRequest { string name = 1; bytes raw_handle = 2; int64 device_id = 3; uint64 byte_size = 4; }
message CudaSharedMemoryRegisterResponse {}
message CudaSharedMemoryUnregisterRequest { string name = 1; }
message CudaSharedMemoryUnregisterResponse {}
)pb";

// The schema's messages as dynamic messages. One per process (kserve_schema::get()); thread-safe.
class kserve_schema {
 public:
  static const kserve_schema& get() {
    static const kserve_schema s;
    return s;
  }

  // The prototype of "inference.<name>" (nested: "ModelInferRequest.InferInputTensor"); throws
  // std::logic_error for a name the schema lacks (a bug here, not bad input).
  const google::protobuf::Message& prototype(std::string_view name) const {
    const auto* d = pool_.FindMessageTypeByName("inference." + std::string(name));
    if (!d) throw std::logic_error("jitembed: KServe gRPC schema has no message '" + std::string(name) + "'");
    return *factory_.GetPrototype(d);
  }
  // A new empty message of that type.
  std::unique_ptr<google::protobuf::Message> make(std::string_view name) const {
    return std::unique_ptr<google::protobuf::Message>(prototype(name).New());
  }
  const google::protobuf::DescriptorPool& pool() const noexcept { return pool_; }

 private:
  kserve_schema() {
    protobuf::build_schema(pool_, kKServeSchema, "jitembed/kserve_grpc.proto", "KServe gRPC");
    factory_.SetDelegateToGeneratedFactory(false);
  }

  google::protobuf::DescriptorPool pool_;
  mutable google::protobuf::DynamicMessageFactory factory_{&pool_};
};

}  // namespace jitembed::net::grpc
