// The hybrid_parallel example's per-rank results: merged into one outcome, and as JSON through the store
// when ranks are processes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "step.hpp"

namespace hybrid_app {

// The names the example's code uses unqualified, for every header of hybrid_app and the main.
using namespace jitembed;
using namespace jitembed::parallel;
using hybrid::comm_t;
using hybrid::rank_result;
using hybrid::tensors;
using json = nlohmann::json;

// Everything the ranks hand back, merged.
struct outcome {
  std::vector<float> losses;
  tensor enc_out, logits;
  tensors grads;
  comm_stats enc_stats, lm_stats;
  std::uint64_t boundary_sent = 0, boundary_received = 0, world_collectives = 0;  // summed over the ranks
  int enc_size = 0, lm_size = 0;
  std::map<int, std::string> enc_logs, lm_logs;                // by world rank
  std::vector<hybrid::timed_op> enc_timeline, lm_timeline;     // of the groups' rank 0
  std::uint64_t enc_peak = 0, lm_peak = 0, boundary_peak = 0;  // the largest over the ranks
};

inline void merge(outcome& o, rank_result r) {
  if (r.lm_rank >= 0) {
    o.losses.push_back(r.loss);
    o.lm_logs[r.rank] = r.lm_log;
  }
  if (r.enc_rank >= 0) o.enc_logs[r.rank] = r.enc_log;
  if (r.lm_rank == 0) {
    o.logits = r.logits;
    o.lm_stats = r.lm_stats;
    o.lm_size = r.lm_size;
    for (const auto& t : r.timeline) {
      if (t.stage == 'L') o.lm_timeline.push_back(t);
    }
  }
  if (r.enc_rank == 0) {
    o.enc_out = r.enc_out;
    o.enc_stats = r.enc_stats;
    o.enc_size = r.enc_size;
    for (const auto& t : r.timeline) {
      if (t.stage == 'E') o.enc_timeline.push_back(t);
    }
  }
  for (auto& [name, t] : r.grads) o.grads[name] = t;
  o.enc_peak = std::max(o.enc_peak, r.enc_peak);
  o.lm_peak = std::max(o.lm_peak, r.lm_peak);
  o.boundary_peak = std::max(o.boundary_peak, r.boundary_peak);
  o.boundary_sent += r.boundary_sent;
  o.boundary_received += r.boundary_received;
  o.world_collectives += r.world_collectives;
}

// --- a rank's result as JSON, through the store (ranks as processes) -------------------------------------

inline json tensor_json(const tensor& t) {
  if (!t.defined()) return nullptr;
  json shape = json::array();
  for (std::size_t d = 0; d < t.shape().size(); ++d) shape.push_back(t.size(d));
  const float* p = t.view().data<float>();
  return {{"shape", shape}, {"data", std::vector<float>(p, p + t.numel())}};  // floats print round-trip exact
}
inline tensor tensor_of(const json& j) {
  if (j.is_null()) return {};
  shape s;
  for (const auto& d : j.at("shape")) s.push_back(d.get<std::int64_t>());
  tensor t = tensor::empty(s, dtype::f32);
  const auto data = j.at("data").get<std::vector<float>>();
  if (data.size() != t.numel()) throw error(errc::corrupt_data, "rank result: tensor data does not match its shape");
  std::copy(data.begin(), data.end(), t.view().data<float>());
  return t;
}
inline json stats_json(const comm_stats& s) {
  json a = json::array();
  for (std::size_t i = 0; i < kCollCount; ++i)
    a.push_back({s[static_cast<coll>(i)].calls, s[static_cast<coll>(i)].bytes});
  return a;
}
inline comm_stats stats_of(const json& a) {
  comm_stats s;
  for (std::size_t i = 0; i < kCollCount && i < a.size(); ++i) {
    const auto calls = a[i][0].get<std::uint64_t>(), bytes = a[i][1].get<std::uint64_t>();
    for (std::uint64_t n = 0; n < calls; ++n) s.record(static_cast<coll>(i), n == 0 ? bytes : 0);
  }
  return s;
}

inline json result_json(const rank_result& r) {
  json grads = json::object();
  for (const auto& [name, t] : r.grads) grads[name] = tensor_json(t);
  json timeline = json::array();
  for (const auto& t : r.timeline) {
    timeline.push_back({std::string(1, t.stage), std::string(1, t.kind), t.microbatch, t.start_ns, t.end_ns});
  }
  return {{"rank", r.rank},
          {"enc_rank", r.enc_rank},
          {"enc_size", r.enc_size},
          {"lm_rank", r.lm_rank},
          {"lm_size", r.lm_size},
          {"loss", std::isnan(r.loss) ? json(nullptr) : json(r.loss)},
          {"enc_out", tensor_json(r.enc_out)},
          {"logits", tensor_json(r.logits)},
          {"grads", grads},
          {"enc_stats", stats_json(r.enc_stats)},
          {"lm_stats", stats_json(r.lm_stats)},
          {"boundary_sent", r.boundary_sent},
          {"boundary_received", r.boundary_received},
          {"world_collectives", r.world_collectives},
          {"peaks", {r.enc_peak, r.lm_peak, r.boundary_peak}},
          {"enc_log", r.enc_log},
          {"lm_log", r.lm_log},
          {"timeline", timeline}};
}

inline rank_result result_of(const json& j) {
  rank_result r;
  r.rank = j.at("rank").get<int>();
  r.enc_rank = j.at("enc_rank").get<int>();
  r.enc_size = j.at("enc_size").get<int>();
  r.lm_rank = j.at("lm_rank").get<int>();
  r.lm_size = j.at("lm_size").get<int>();
  r.loss = j.at("loss").is_null() ? NAN : j.at("loss").get<float>();
  r.enc_out = tensor_of(j.at("enc_out"));
  r.logits = tensor_of(j.at("logits"));
  for (const auto& [name, t] : j.at("grads").items()) r.grads[name] = tensor_of(t);
  r.enc_stats = stats_of(j.at("enc_stats"));
  r.lm_stats = stats_of(j.at("lm_stats"));
  r.boundary_sent = j.at("boundary_sent").get<std::uint64_t>();
  r.boundary_received = j.at("boundary_received").get<std::uint64_t>();
  r.world_collectives = j.at("world_collectives").get<std::uint64_t>();
  r.enc_peak = j.at("peaks")[0].get<std::uint64_t>();
  r.lm_peak = j.at("peaks")[1].get<std::uint64_t>();
  r.boundary_peak = j.at("peaks")[2].get<std::uint64_t>();
  r.enc_log = j.at("enc_log").get<std::string>();
  r.lm_log = j.at("lm_log").get<std::string>();
  for (const auto& t : j.at("timeline")) {
    r.timeline.push_back({t[0].get<std::string>()[0], t[1].get<std::string>()[0], t[2].get<int>(),
                          t[3].get<std::int64_t>(), t[4].get<std::int64_t>()});
  }
  return r;
}

inline std::string result_key(int rank) { return "hybrid_parallel/result/" + std::to_string(rank); }

}  // namespace hybrid_app
