// The service core's typed answers and how they are built from a model instance. Each lists its fields through
// fields(v): the HTTP front writes JSON from that list, the gRPC front protobuf messages of the same names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "jitembed/net/kserve/datatype.hpp"
#include "jitembed/server/config.hpp"
#include "jitembed/server/model_instance.hpp"
#include "jitembed/server/repository/model_source.hpp"

namespace jitembed::server::detail {

inline std::string_view input_name(models::modality m) { return models::to_string(m); }

// An optional field is left out of an answer when empty.
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

// A value that HTTP renders as the JSON text of `value` in a string (gRPC's messages have no such field).
template <class T>
struct json_text {
  T value;
};

struct tensor_metadata {
  std::string name, datatype;
  std::vector<std::int64_t> shape;  // the batch dim (-1) first
  template <class V> void fields(V&& v) const { v("name", name), v("datatype", datatype), v("shape", shape); }
};

// "parameters" of the metadata: what a client builds cache keys (cache/key.hpp) from (the fingerprint,
// model.version(), and preprocess_key) and how the model is fed ("preprocessing": image | video | text |
// none; "tensor_input": its declared input).
struct metadata_parameters {
  std::string fingerprint, preprocess_key, preprocessing;
  json_text<tensor_metadata> tensor_input;
  template <class V> void fields(V&& v) const {
    v("fingerprint", fingerprint), v("preprocess_key", preprocess_key), v("preprocessing", preprocessing),
        v("tensor_input", tensor_input);
  }
};

struct server_metadata {
  std::string name, version;
  std::vector<std::string> extensions;
  template <class V> void fields(V&& v) const { v("name", name), v("version", version), v("extensions", extensions); }
};

// KServe model metadata; `versions` lists every loaded version.
struct model_metadata {
  std::string name;
  std::vector<std::string> versions;
  std::string platform;
  std::vector<tensor_metadata> inputs, outputs;
  metadata_parameters parameters;
  template <class V> void fields(V&& v) const {
    v("name", name), v("versions", versions), v("platform", platform), v("inputs", inputs), v("outputs", outputs),
        v("parameters", parameters);
  }
};

// Triton's model configuration (what perf_analyzer reads).
struct config_tensor {
  std::string name, data_type;
  std::optional<std::string> format;  // inputs only
  std::vector<std::int64_t> dims;
  template <class V> void fields(V&& v) const { v("name", name), v("data_type", data_type), v("format", format), v("dims", dims); }
};
struct config_batching {
  std::vector<std::size_t> preferred_batch_size;
  std::int64_t max_queue_delay_microseconds = 0;
  template <class V> void fields(V&& v) const {
    v("preferred_batch_size", preferred_batch_size), v("max_queue_delay_microseconds", max_queue_delay_microseconds);
  }
};
struct config_instance_group {
  std::string name;
  std::size_t count = 0;
  std::string kind;
  template <class V> void fields(V&& v) const { v("name", name), v("count", count), v("kind", kind); }
};
struct config_parameter {
  std::string string_value;
  template <class V> void fields(V&& v) const { v("string_value", string_value); }
};
struct model_config_answer {
  std::string name, platform, backend;
  version_policy policy;
  std::size_t max_batch_size = 0;
  std::vector<config_tensor> input, output;
  config_batching dynamic_batching;
  std::vector<config_instance_group> instance_group;
  std::vector<std::pair<std::string, config_parameter>> parameters;  // a map, in this order
  template <class V> void fields(V&& v) const {
    v("name", name), v("platform", platform), v("backend", backend), v("version_policy", policy),
        v("max_batch_size", max_batch_size), v("input", input), v("output", output),
        v("dynamic_batching", dynamic_batching), v("instance_group", instance_group), v("parameters", parameters);
  }
};

// One row of the repository index; a field that says nothing is left out.
struct index_entry {
  index_entry(const repository_entry& entry) : e(entry) {}  // not an aggregate: clang 14 has no paren-init of one
  const repository_entry& e;
  template <class V>
  void fields(V&& v) const {
    const auto given = [](const auto& x) { return x.empty() ? std::nullopt : std::optional(x); };
    v("name", e.name), v("version", given(e.version)), v("state", given(std::string(to_string(e.state)))),
        v("reason", given(e.reason)), v("ignored", given(e.ignored));
  }
};
struct index_answer {
  std::vector<index_entry> models;
  template <class V>
  void fields(V&& v) const {
    v("models", models);
  }
};

// Triton's statistics.
struct count_ns {
  std::uint64_t count = 0, ns = 0;
  template <class V> void fields(V&& v) const { v("count", count), v("ns", ns); }
};
struct infer_statistics {
  count_ns success, fail, queue, compute_input, compute_infer, compute_output, cache_hit, cache_miss;
  template <class V> void fields(V&& v) const {
    v("success", success), v("fail", fail), v("queue", queue), v("compute_input", compute_input),
        v("compute_infer", compute_infer), v("compute_output", compute_output), v("cache_hit", cache_hit),
        v("cache_miss", cache_miss);
  }
};
struct batch_statistics {
  std::size_t batch_size = 0;
  count_ns compute_input, compute_infer, compute_output;
  template <class V> void fields(V&& v) const {
    v("batch_size", batch_size), v("compute_input", compute_input), v("compute_infer", compute_infer),
        v("compute_output", compute_output);
  }
};
struct model_statistics {
  std::string name, version;
  std::uint64_t last_inference = 0, inference_count = 0, execution_count = 0;
  infer_statistics inference_stats;
  std::vector<batch_statistics> batch_stats;
  template <class V> void fields(V&& v) const {
    v("name", name), v("version", version), v("last_inference", last_inference), v("inference_count", inference_count),
        v("execution_count", execution_count), v("inference_stats", inference_stats), v("batch_stats", batch_stats);
  }
};
struct statistics {
  std::vector<model_statistics> model_stats;
  template <class V> void fields(V&& v) const { v("model_stats", model_stats); }
};

inline std::string kserve_type(dtype t) { return std::string(net::kserve::to_string(net::kserve::from_dtype(t))); }

// Outputs of a batch of rows: each output's item shape with the batch dim (-1) in front.
inline tensor_metadata batched(std::string_view name, std::string datatype, const std::vector<std::int64_t>& item) {
  tensor_metadata t{std::string(name), std::move(datatype), {-1}};
  t.shape.insert(t.shape.end(), item.begin(), item.end());
  return t;
}

// What a model is fed through: raw fields of its modality (a BYTES input named so) when it preprocesses,
// else its declared input tensor, as Triton serves a tensor model. A model with preprocessing takes its
// declared tensor too (a trainer that decodes itself): "tensor_input" names it in the parameters.
inline std::string preprocessing_of(const models::any_model& m) {
  return std::string(m.has_preprocess() ? input_name(m.input_modality()) : std::string_view("none"));
}

inline model_metadata metadata_of(const model_instance& inst, std::vector<std::string> versions) {
  const auto& m = inst.model();
  const auto& declared = m.inputs().front();
  auto tensor_input = batched(declared.name, kserve_type(declared.type), declared.shape);
  model_metadata a{.name = inst.name(), .versions = std::move(versions), .platform = "jitembed"};
  a.inputs.push_back(m.has_preprocess() ? batched(input_name(m.input_modality()), "BYTES", {1}) : tensor_input);
  for (const auto& o : m.outputs()) a.outputs.push_back(batched(o.name, kserve_type(o.type), o.shape));
  a.parameters = {std::string(m.version()), std::string(m.preprocess_key()), preprocessing_of(m), {std::move(tensor_input)}};
  return a;
}

inline model_config_answer config_of(const model_instance& inst, const version_policy& policy) {
  const auto& m = inst.model();
  const auto& bo = inst.batch_options();
  model_config_answer a{.name = inst.name(), .platform = "jitembed", .backend = "jitembed", .policy = policy,
                        .max_batch_size = bo.max_batch_size};
  const auto& declared = m.inputs().front();
  a.input.push_back(m.has_preprocess()
                        ? config_tensor{std::string(input_name(m.input_modality())), "TYPE_STRING", "FORMAT_NONE", {1}}
                        : config_tensor{declared.name, "TYPE_" + kserve_type(declared.type), "FORMAT_NONE", declared.shape});
  for (const auto& o : m.outputs()) a.output.push_back({o.name, "TYPE_" + kserve_type(o.type), std::nullopt, o.shape});
  a.dynamic_batching = {{bo.preferred_batch_sizes.begin(), bo.preferred_batch_sizes.end()}, bo.max_queue_delay.count()};
  a.instance_group.push_back({inst.name(), bo.runner_threads, m.device().is_cpu() ? "KIND_CPU" : "KIND_GPU"});
  const auto& params = inst.config().params;
  for (auto it = params.begin(); it != params.end(); ++it)
    a.parameters.push_back({it.key(), {it->is_string() ? it->get<std::string>() : it->dump()}});
  // The cache-key identity, where a Triton model publishes it (its config's parameters): gRPC's
  // ModelMetadataResponse has no parameters, so a grpc:// client reads it here.
  for (auto [key, value] : {std::pair<const char*, std::string>{"fingerprint", std::string(m.version())},
                            std::pair<const char*, std::string>{"preprocess_key", std::string(m.preprocess_key())},
                            std::pair<const char*, std::string>{"preprocessing", preprocessing_of(m)}})
    if (!params.contains(key)) a.parameters.push_back({key, {std::move(value)}});
  return a;
}

inline model_statistics statistics_of(const model_instance& inst) {
  const auto s = inst.batcher().stats();
  const auto& c = inst.counters();
  const auto us_to_ns = [](double us) { return static_cast<std::uint64_t>(us * 1000.0); };
  model_statistics a{.name = inst.name(), .version = inst.version(), .last_inference = c.last_inference_ms.load(),
                     .inference_count = c.inferences.load(), .execution_count = s.batches};
  // perf_analyzer aborts unless the three compute counts are equal ("compute counts must be the same").
  a.inference_stats = {{c.success.load(), c.success_ns.load()},  {c.failure.load(), c.failure_ns.load()},
                       {s.queue_time.count, us_to_ns(s.queue_time.sum_us)}, {s.compute_time.count, 0},
                       {s.compute_time.count, us_to_ns(s.compute_time.sum_us)}, {s.compute_time.count, 0}, {}, {}};
  const double mean_compute_ns = s.compute_time.mean_us() * 1000.0;
  for (std::size_t n = 1; n < s.batch_sizes.size(); ++n) {
    if (const auto cnt = s.batch_sizes[n])
      a.batch_stats.push_back(
          {n, {cnt, 0}, {cnt, static_cast<std::uint64_t>(mean_compute_ns * static_cast<double>(cnt))}, {cnt, 0}});
  }
  return a;
}

}  // namespace jitembed::server::detail
