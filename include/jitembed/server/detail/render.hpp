// JSON renderings of models for the service: KServe metadata, Triton model config, Triton statistics
// (the Prometheus text is server/detail/metrics.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/net/kserve/datatype.hpp"
#include "jitembed/server/model_instance.hpp"

namespace jitembed::server::detail {

using ojson = nlohmann::ordered_json;

inline std::string_view input_name(models::modality m) { return models::to_string(m); }

// Outputs of a batch of rows: each output's item shape with the batch dim (-1) in front.
inline ojson tensor_metadata(std::string_view name, std::string_view datatype,
                             const std::vector<std::int64_t>& item_shape) {
  ojson shape = ojson::array({-1});
  for (auto d : item_shape) shape.push_back(d);
  return ojson{{"name", name}, {"datatype", datatype}, {"shape", shape}};
}

// What a model is fed through: raw fields of its modality (a BYTES input named so) when it preprocesses,
// else its declared input tensor, as Triton serves a tensor model. A model with preprocessing takes its
// declared tensor too (a trainer that decodes itself): "tensor_input" names it in the parameters below.
inline std::string_view preprocessing_of(const models::any_model& m) {
  return m.has_preprocess() ? input_name(m.input_modality()) : std::string_view("none");
}

// GET /v2/models/{m}[/versions/{v}]: KServe model metadata; `versions` lists every loaded version.
// "parameters" carries what a client needs to build cache keys (cache/key.hpp) for this model's outputs:
// the model's fingerprint (model.version()) and preprocess_key; and how the model is fed: "preprocessing"
// (image | video | text | none) and "tensor_input" (its declared input).
inline ojson model_metadata(const model_instance& inst, const std::vector<std::string>& versions) {
  const auto& m = inst.model();
  const auto& declared = m.inputs().front();
  const auto declared_type = net::kserve::to_string(net::kserve::from_dtype(declared.type));
  ojson j;
  j["name"] = inst.name();
  j["versions"] = versions;
  j["platform"] = "jitembed";
  j["inputs"] = ojson::array({m.has_preprocess() ? tensor_metadata(input_name(m.input_modality()), "BYTES", {1})
                                                 : tensor_metadata(declared.name, declared_type, declared.shape)});
  ojson outs = ojson::array();
  for (const auto& o : m.outputs())
    outs.push_back(tensor_metadata(o.name, net::kserve::to_string(net::kserve::from_dtype(o.type)), o.shape));
  j["outputs"] = std::move(outs);
  j["parameters"] = ojson{{"fingerprint", m.version()},
                          {"preprocess_key", m.preprocess_key()},
                          {"preprocessing", preprocessing_of(m)},
                          {"tensor_input", tensor_metadata(declared.name, declared_type, declared.shape).dump()}};
  return j;
}

// GET /v2/models/{m}/config: Triton's model configuration JSON (what perf_analyzer reads).
inline ojson model_config_json(const model_instance& inst, const version_policy& policy) {
  const auto& m = inst.model();
  const auto& bo = inst.batch_options();
  ojson j;
  j["name"] = inst.name();
  j["platform"] = "jitembed";
  j["backend"] = "jitembed";
  j["version_policy"] = ojson::parse(to_json(policy).dump());
  j["max_batch_size"] = bo.max_batch_size;
  const auto& declared = m.inputs().front();
  j["input"] = ojson::array(
      {m.has_preprocess()
           ? ojson{{"name", input_name(m.input_modality())}, {"data_type", "TYPE_STRING"}, {"format", "FORMAT_NONE"}, {"dims", ojson::array({1})}}
           : ojson{{"name", declared.name},
                   {"data_type", "TYPE_" + std::string(net::kserve::to_string(net::kserve::from_dtype(declared.type)))},
                   {"format", "FORMAT_NONE"},
                   {"dims", declared.shape}}});
  ojson outs = ojson::array();
  for (const auto& o : m.outputs())
    outs.push_back(ojson{{"name", o.name},
                         {"data_type", "TYPE_" + std::string(net::kserve::to_string(net::kserve::from_dtype(o.type)))},
                         {"dims", o.shape}});
  j["output"] = std::move(outs);
  ojson preferred = ojson::array();
  for (auto p : bo.preferred_batch_sizes) preferred.push_back(p);
  j["dynamic_batching"] =
      ojson{{"preferred_batch_size", preferred}, {"max_queue_delay_microseconds", bo.max_queue_delay.count()}};
  j["instance_group"] = ojson::array({ojson{
      {"name", inst.name()}, {"count", bo.runner_threads}, {"kind", m.device().is_cpu() ? "KIND_CPU" : "KIND_GPU"}}});
  j["parameters"] = ojson::object();
  for (auto it = inst.config().params.begin(); it != inst.config().params.end(); ++it)
    j["parameters"][it.key()] = ojson{{"string_value", it->is_string() ? it->get<std::string>() : it->dump()}};
  // The cache-key identity, where a Triton model publishes it (its config's parameters): gRPC's
  // ModelMetadataResponse has no parameters, so a grpc:// client reads it here.
  for (const auto& [key, value] :
       {std::pair<const char*, std::string>{"fingerprint", std::string(m.version())},
        std::pair<const char*, std::string>{"preprocess_key", std::string(m.preprocess_key())},
        std::pair<const char*, std::string>{"preprocessing", std::string(preprocessing_of(m))}})
    if (!j["parameters"].contains(key)) j["parameters"][key] = ojson{{"string_value", value}};
  return j;
}

inline ojson count_ns(std::uint64_t count, std::uint64_t ns) { return ojson{{"count", count}, {"ns", ns}}; }

// One entry of Triton's {"model_stats": [...]}.
inline ojson model_stats_json(const model_instance& inst) {
  const auto s = inst.batcher().stats();
  const auto& c = inst.counters();
  ojson j;
  j["name"] = inst.name();
  j["version"] = inst.version();
  j["last_inference"] = c.last_inference_ms.load();
  j["inference_count"] = c.inferences.load();
  j["execution_count"] = s.batches;
  const auto us_to_ns = [](double us) { return static_cast<std::uint64_t>(us * 1000.0); };
  j["inference_stats"] =
      ojson{{"success", count_ns(c.success.load(), c.success_ns.load())},
            {"fail", count_ns(c.failure.load(), c.failure_ns.load())},
            {"queue", count_ns(s.queue_time.count, us_to_ns(s.queue_time.sum_us))},
            // perf_analyzer aborts unless the three compute counts are equal ("compute counts must be the same").
            {"compute_input", count_ns(s.compute_time.count, 0)},
            {"compute_infer", count_ns(s.compute_time.count, us_to_ns(s.compute_time.sum_us))},
            {"compute_output", count_ns(s.compute_time.count, 0)},
            {"cache_hit", count_ns(0, 0)},
            {"cache_miss", count_ns(0, 0)}};
  ojson batches = ojson::array();
  const double mean_compute_ns = s.compute_time.mean_us() * 1000.0;
  for (std::size_t n = 1; n < s.batch_sizes.size(); ++n) {
    if (!s.batch_sizes[n]) continue;
    const auto cnt = s.batch_sizes[n];
    batches.push_back(
        ojson{{"batch_size", n},
              {"compute_input", count_ns(cnt, 0)},
              {"compute_infer", count_ns(cnt, static_cast<std::uint64_t>(mean_compute_ns * static_cast<double>(cnt)))},
              {"compute_output", count_ns(cnt, 0)}});
  }
  j["batch_stats"] = std::move(batches);
  return j;
}

}  // namespace jitembed::server::detail
