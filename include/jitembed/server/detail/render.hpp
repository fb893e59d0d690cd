// JSON and Prometheus renderings of models for the service: KServe metadata, Triton model config, Triton
// statistics, metrics text.
#pragma once

#include <cstdint>
#include <cstdio>
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
inline ojson tensor_metadata(std::string_view name, std::string_view datatype, const std::vector<std::int64_t>& item_shape) {
  ojson shape = ojson::array({-1});
  for (auto d : item_shape) shape.push_back(d);
  return ojson{{"name", name}, {"datatype", datatype}, {"shape", shape}};
}

// GET /v2/models/{m}[/versions/{v}]: KServe model metadata; `versions` lists every loaded version.
// "parameters" carries what a client needs to build cache keys (cache/key.hpp) for this model's outputs:
// the model's fingerprint (model.version()) and preprocess_key.
inline ojson model_metadata(const model_instance& inst, const std::vector<std::string>& versions) {
  const auto& m = inst.model();
  ojson j;
  j["name"] = inst.name();
  j["versions"] = versions;
  j["platform"] = "jitembed";
  j["inputs"] = ojson::array({tensor_metadata(input_name(m.input_modality()), "BYTES", {1})});
  ojson outs = ojson::array();
  for (const auto& o : m.outputs()) outs.push_back(tensor_metadata(o.name, net::kserve::to_string(net::kserve::from_dtype(o.type)), o.shape));
  j["outputs"] = std::move(outs);
  j["parameters"] = ojson{{"fingerprint", m.version()}, {"preprocess_key", m.preprocess_key()}};
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
  j["input"] = ojson::array({ojson{{"name", input_name(m.input_modality())},
                                   {"data_type", "TYPE_STRING"},
                                   {"format", "FORMAT_NONE"},
                                   {"dims", ojson::array({1})}}});
  ojson outs = ojson::array();
  for (const auto& o : m.outputs())
    outs.push_back(ojson{{"name", o.name},
                         {"data_type", "TYPE_" + std::string(net::kserve::to_string(net::kserve::from_dtype(o.type)))},
                         {"dims", o.shape}});
  j["output"] = std::move(outs);
  ojson preferred = ojson::array();
  for (auto p : bo.preferred_batch_sizes) preferred.push_back(p);
  j["dynamic_batching"] = ojson{{"preferred_batch_size", preferred},
                                {"max_queue_delay_microseconds", bo.max_queue_delay.count()}};
  j["instance_group"] = ojson::array({ojson{{"name", inst.name()}, {"count", bo.runner_threads},
                                            {"kind", m.dev().is_cpu() ? "KIND_CPU" : "KIND_GPU"}}});
  j["parameters"] = ojson::object();
  for (auto it = inst.config().params.begin(); it != inst.config().params.end(); ++it)
    j["parameters"][it.key()] = ojson{{"string_value", it->is_string() ? it->get<std::string>() : it->dump()}};
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
  j["inference_stats"] = ojson{
      {"success", count_ns(c.success.load(), c.success_ns.load())},
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
    batches.push_back(ojson{{"batch_size", n},
                            {"compute_input", count_ns(cnt, 0)},
                            {"compute_infer", count_ns(cnt, static_cast<std::uint64_t>(mean_compute_ns * static_cast<double>(cnt)))},
                            {"compute_output", count_ns(cnt, 0)}});
  }
  j["batch_stats"] = std::move(batches);
  return j;
}

// Prometheus text for a set of model versions.
inline std::string metrics_text(const std::vector<const model_instance*>& insts) {
  std::string out;
  const auto labels = [](const model_instance& i) { return "{model=\"" + i.name() + "\",version=\"" + i.version() + "\"}"; };
  const auto family = [&](std::string_view name, std::string_view type, std::string_view help, auto&& value_of) {
    out += "# HELP " + std::string(name) + " " + std::string(help) + "\n# TYPE " + std::string(name) + " " + std::string(type) + "\n";
    for (const auto* i : insts) out += std::string(name) + labels(*i) + " " + value_of(*i) + "\n";
  };
  std::vector<batching::batcher_stats> stats;
  for (const auto* i : insts) stats.push_back(i->batcher().stats());
  const auto stat = [&](const model_instance& i) -> const batching::batcher_stats& {
    for (std::size_t k = 0; k < insts.size(); ++k)
      if (insts[k] == &i) return stats[k];
    return stats.front();
  };
  const auto num = [](auto v) { return std::to_string(v); };
  const auto dbl = [](double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3f", v);
    return std::string(buf);
  };
  family("jitembed_request_success_total", "counter", "Successful inference requests",
         [&](const model_instance& i) { return num(i.counters().success.load()); });
  family("jitembed_request_failure_total", "counter", "Failed inference requests",
         [&](const model_instance& i) { return num(i.counters().failure.load()); });
  family("jitembed_inference_count_total", "counter", "Rows inferred (a request of N rows counts N)",
         [&](const model_instance& i) { return num(i.counters().inferences.load()); });
  family("jitembed_execution_count_total", "counter", "Batches run by the model",
         [&](const model_instance& i) { return num(stat(i).batches); });
  family("jitembed_queue_duration_us_total", "counter", "Cumulative time rows waited in the batcher queue (us)",
         [&](const model_instance& i) { return dbl(stat(i).queue_time.sum_us); });
  family("jitembed_compute_duration_us_total", "counter", "Cumulative model compute time of batches (us)",
         [&](const model_instance& i) { return dbl(stat(i).compute_time.sum_us); });
  family("jitembed_request_duration_us_total", "counter", "Cumulative end-to-end time of successful requests (us)",
         [&](const model_instance& i) { return dbl(static_cast<double>(i.counters().success_ns.load()) / 1000.0); });
  family("jitembed_pending_requests", "gauge", "Rows queued or running in the batcher",
         [&](const model_instance& i) { return num(stat(i).pending()); });
  family("jitembed_queue_rejected_total", "counter", "Rows rejected because the queue was full",
         [&](const model_instance& i) { return num(stat(i).rejected_queue_full); });
  family("jitembed_inflight_rows", "gauge", "Rows admitted (decode to response); bounded by max_inflight_rows",
         [&](const model_instance& i) { return num(i.admitted_rows()); });
  family("jitembed_admission_rejected_total", "counter", "Requests answered 503 at once because max_inflight_rows was reached",
         [&](const model_instance& i) { return num(i.counters().rejected_admission.load()); });
  out += "# HELP jitembed_batch_size Rows per batch run by the model\n# TYPE jitembed_batch_size histogram\n";
  for (std::size_t k = 0; k < insts.size(); ++k) {
    const auto& s = stats[k];
    const std::string l = "model=\"" + insts[k]->name() + "\",version=\"" + insts[k]->version() + "\"";
    std::uint64_t cum = 0, sum = 0;
    std::size_t next_edge = 1;
    for (std::size_t n = 1; n < s.batch_sizes.size(); ++n) {
      cum += s.batch_sizes[n];
      sum += s.batch_sizes[n] * n;
      if (n == next_edge || n + 1 == s.batch_sizes.size()) {
        out += "jitembed_batch_size_bucket{" + l + ",le=\"" + std::to_string(n) + "\"} " + std::to_string(cum) + "\n";
        while (next_edge <= n) next_edge *= 2;
      }
    }
    out += "jitembed_batch_size_bucket{" + l + ",le=\"+Inf\"} " + std::to_string(cum) + "\n";
    out += "jitembed_batch_size_sum{" + l + "} " + std::to_string(sum) + "\n";
    out += "jitembed_batch_size_count{" + l + "} " + std::to_string(cum) + "\n";
  }
  return out;
}

}  // namespace jitembed::server::detail
