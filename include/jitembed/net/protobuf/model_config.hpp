// Triton's ModelConfig schema (facts of model_config.proto). Fields jitembed never reads are `reserved`, which
// the text parser skips, while any other unknown name (a typo) is an error.
#pragma once

#include <string_view>

#include "jitembed/net/protobuf/schema.hpp"

namespace jitembed::net::protobuf {

inline constexpr std::string_view kModelConfigFile = "model_config.proto";

inline constexpr std::string_view kModelConfigProto = R"pb(
  syntax = "proto3"
  ;
package inference;

enum DataType {
  TYPE_INVALID = 0; TYPE_BOOL = 1; TYPE_UINT8 = 2; TYPE_UINT16 = 3; TYPE_UINT32 = 4; TYPE_UINT64 = 5;
  TYPE_INT8 = 6; TYPE_INT16 = 7; TYPE_INT32 = 8; TYPE_INT64 = 9; TYPE_FP16 = 10; TYPE_FP32 = 11;
  TYPE_FP64 = 12; TYPE_STRING = 13; TYPE_BF16 = 14;
}

message ModelRateLimiter {
  message Resource { reserved "name", "global", "count"; }
  repeated Resource resources = 1;
  reserved "priority";
}

message ModelInstanceGroup {
  enum Kind { KIND_AUTO = 0; KIND_GPU = 1; KIND_CPU = 2; KIND_MODEL = 3; }
  message SecondaryDevice { reserved "kind", "device_id"; }
  string name = 1;
  Kind kind = 4;
  int32 count = 2;
  ModelRateLimiter rate_limiter = 6;
  repeated int32 gpus = 3;
  repeated SecondaryDevice secondary_devices = 8;
  repeated string profile = 5;
  bool passive = 7;
  string host_policy = 9;
}

message ModelTensorReshape { repeated int64 shape = 1; }

message ModelInput {
  enum Format { FORMAT_NONE = 0; FORMAT_NHWC = 1; FORMAT_NCHW = 2; }
  string name = 1;
  DataType data_type = 2;
  Format format = 3;
  repeated int64 dims = 4;
  ModelTensorReshape reshape = 5;
  bool is_shape_tensor = 6;
  bool allow_ragged_batch = 7;
  bool optional = 8;
  bool is_non_linear_format_io = 9;
}

message ModelOutput {
  string name = 1;
  DataType data_type = 2;
  repeated int64 dims = 3;
  ModelTensorReshape reshape = 5;
  string label_filename = 4;
  bool is_shape_tensor = 6;
  bool is_non_linear_format_io = 7;
}

message BatchInput { reserved "kind", "target_name", "data_type", "source_input"; }
message BatchOutput { reserved "target_name", "kind", "source_input"; }

message ModelVersionPolicy {
  message Latest { uint32 num_versions = 1; }
  message All {}
  message Specific { repeated int64 versions = 1; }
  oneof policy_choice {
    Latest latest = 1;
    All all = 2;
    Specific specific = 3;
  }
}

message ModelOptimizationPolicy {
  message Cuda {
    message GraphSpec {
      message Shape { repeated int64 dim = 1; }
      message LowerBound { int32 batch_size = 1; map<string, Shape> input = 2; }
      int32 batch_size = 1;
      map<string, Shape> input = 2;
      LowerBound graph_lower_bound = 3;
    }
    reserved "graphs", "busy_wait_events", "output_copy_stream";
    repeated GraphSpec graph_spec = 3;
  }
  message ExecutionAccelerators {
    message Accelerator { string name = 1; map<string, string> parameters = 2; }
    repeated Accelerator gpu_execution_accelerator = 1;
    repeated Accelerator cpu_execution_accelerator = 2;
  }
  reserved "graph", "priority", "input_pinned_memory", "output_pinned_memory", "gather_kernel_buffer_threshold",
           "eager_batching";
  Cuda cuda = 3;
  ExecutionAccelerators execution_accelerators = 4;
}

message ModelQueuePolicy {
  enum TimeoutAction { REJECT = 0; DELAY = 1; }
  TimeoutAction timeout_action = 1;
  uint64 default_timeout_microseconds = 2;
  bool allow_timeout_override = 3;
  uint32 max_queue_size = 4;
}

message ModelDynamicBatching {
  repeated int32 preferred_batch_size = 1;
  uint64 max_queue_delay_microseconds = 2;
  bool preserve_ordering = 3;
  uint64 priority_levels = 4;
  uint64 default_priority_level = 5;
  ModelQueuePolicy default_queue_policy = 6;
  map<uint64, ModelQueuePolicy> priority_queue_policy = 7;
}

message ModelSequenceBatching {
  message Control { reserved "kind", "int32_false_true", "fp32_false_true", "bool_false_true", "data_type"; }
  message ControlInput { reserved "name"; repeated Control control = 2; }
  message InitialState { reserved "data_type", "dims", "zero_data", "data_file", "name"; }
  message State {
    reserved "input_name", "output_name", "data_type", "dims", "use_same_buffer_for_input_output", "use_growable_memory";
    repeated InitialState initial_state = 5;
  }
  reserved "direct", "oldest", "max_sequence_idle_microseconds", "iterative_sequence";
  repeated ControlInput control_input = 2;
  repeated State state = 5;
}
message ModelEnsembling {
  message Step {
    reserved "model_name", "model_version", "model_namespace";
    map<string, string> input_map = 3;
    map<string, string> output_map = 4;
  }
  repeated Step step = 1;
  reserved "max_inflight_requests";
}
message ModelParameter { string string_value = 1; }
message ModelWarmup {
  message Input { reserved "data_type", "dims", "zero_data", "random_data", "input_data_file"; }
  reserved "name", "batch_size", "count";
  map<string, Input> inputs = 3;
}
message ModelOperations { repeated string op_library_filename = 1; }
message ModelTransactionPolicy { bool decoupled = 1; }
message ModelRepositoryAgents {
  message Agent { reserved "name"; map<string, string> parameters = 2; }
  repeated Agent agents = 1;
}
message ModelResponseCache { bool enable = 1; }
message ModelMetrics {
  message MetricControl { reserved "metric_identifier", "histogram_options"; }
  repeated MetricControl metric_control = 1;
}

message ModelConfig {
  string name = 1;
  string platform = 2;
  string backend = 17;
  string runtime = 25;
  ModelVersionPolicy version_policy = 3;
  int32 max_batch_size = 4;
  repeated ModelInput input = 5;
  repeated ModelOutput output = 6;
  repeated BatchInput batch_input = 20;
  repeated BatchOutput batch_output = 21;
  ModelOptimizationPolicy optimization = 12;
  oneof scheduling_choice {
    ModelDynamicBatching dynamic_batching = 11;
    ModelSequenceBatching sequence_batching = 13;
    ModelEnsembling ensemble_scheduling = 15;
  }
  repeated ModelInstanceGroup instance_group = 7;
  string default_model_filename = 8;
  map<string, string> cc_model_filenames = 9;
  map<string, string> metric_tags = 10;
  map<string, ModelParameter> parameters = 14;
  repeated ModelWarmup model_warmup = 16;
  ModelOperations model_operations = 18;
  ModelTransactionPolicy model_transaction_policy = 19;
  ModelRepositoryAgents model_repository_agents = 23;
  ModelResponseCache response_cache = 24;
  ModelMetrics model_metrics = 26;
}
)pb";

// ModelConfig's schema, built once on first use (thread-safe).
inline const dynamic_schema& model_config_schema() {
  static const dynamic_schema s("inference", {{std::string(kModelConfigFile), kModelConfigProto}}, "ModelConfig");
  return s;
}

}  // namespace jitembed::net::protobuf
