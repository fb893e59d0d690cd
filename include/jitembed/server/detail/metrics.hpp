// The Prometheus text of GET /metrics: per model version, request and row counters, batcher queue and
// compute times, admission, and the batch-size histogram.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/batching/dynamic_batcher.hpp"
#include "jitembed/server/model_instance.hpp"

namespace jitembed::server::detail {

// Prometheus text for a set of model versions.
inline std::string metrics_text(const std::vector<const model_instance*>& insts) {
  std::string out;
  const auto labels = [](const model_instance& i) {
    return "{model=\"" + i.name() + "\",version=\"" + i.version() + "\"}";
  };
  const auto family = [&](std::string_view name, std::string_view type, std::string_view help, auto&& value_of) {
    out += "# HELP " + std::string(name) + " " + std::string(help) + "\n# TYPE " + std::string(name) + " " +
           std::string(type) + "\n";
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
  family("jitembed_admission_rejected_total", "counter",
         "Requests answered 503 at once because max_inflight_rows was reached",
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
