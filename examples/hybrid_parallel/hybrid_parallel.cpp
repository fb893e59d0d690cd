// hybrid_parallel: a small ViT-style encoder run sequence-parallel (Ulysses) feeding a small transformer LM
// run tensor-parallel (Megatron), on a world of Gloo ranks: threads of this process, or (--procs) one process
// per rank started by this one (tcp_store rendezvous on 127.0.0.1). One training step over M microbatches in
// a pipeline schedule (sequential, or 1F1B for disjoint rank sets); the activation crosses between the two
// layouts through the boundary transform (point to point over the world communicator) forward, and its
// gradient crosses back. Prints the max abs difference of the loss, the outputs and every gradient against
// the single-rank full-batch reference (model.hpp), the bytes each collective moved next to its formula, and
// each module's op log ("F0 F1 B0 ..."). Exit code 0 when every relative error is ≤ the tolerance, every
// byte count equals its formula, the op logs agree across a module's ranks and the encoder's log runs ahead
// (some F(m+1) before B(m)) exactly under 1F1B.
//
//   hybrid_parallel [--world 4] [--encoder-ranks 0,1,2,3] [--llm-ranks 0,1] [--batch 2] [--microbatches 1]
//                   [--schedule sequential|1f1b] [--in-flight 2] [--recompute] [--procs] [--tolerance 1e-5] [--device
//                   cpu|cuda]
//                   [--encoder-layout sp|tp] [--boundary ours|public]
//                   [--steps 1] [--lr 0.01] [--checkpoint-dir D --checkpoint-every K] [--resume] [--max-restarts 0]
// (any rank sets of the world: shared, overlapping or disjoint, e.g. --encoder-ranks 0,1 --llm-ranks 2,3)
// --encoder-layout tp: the encoder tensor parallel too (uniform TP, tp_encoder.hpp); --boundary public: the
// public system's boundary (public_boundary.hpp; equal rank sets paired one to one). bench_parallel hybrid
// compares them.
// --steps N (train.hpp): N steps each followed by AdamW on every rank's own parameters, checked against the
// reference trained the same way (losses per step, final parameters), per-module sharded checkpoints,
// --resume from the latest complete one, and (--procs) a restart of every rank after one fails.
// --events (--host-store | --store ADDR): one training rank run by a supervisor (jitembed.ray.hybrid), JSON
// lines on stdout (run_train_events).
// --device cuda (CUDA builds, threads only): the Ulysses attention and the LM's tensor-parallel layers run on
// GPU 0 with cuda_backend (f32), all ranks on the one GPU, their collectives through host_staged_communicator
// over the same Gloo groups; the glue between the layers (LayerNorm, residuals, the local attention, the
// loss) stays the CPU reference math (a demonstration of the device path, not a fast one). Tolerance 1e-4.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "boundary_bytes.hpp"
#include "jitembed/parallel/local_launch.hpp"
#include "train.hpp"
#if defined(JITEMBED_HAS_TCP_STORE)
#include "jitembed/parallel/tcp_store.hpp"
#include "jitembed/parallel/tcp_store_server.hpp"
#endif

namespace {

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

void merge(outcome& o, rank_result r) {
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

json tensor_json(const tensor& t) {
  if (!t.defined()) return nullptr;
  json shape = json::array();
  for (std::size_t d = 0; d < t.shape().size(); ++d) shape.push_back(t.size(d));
  const float* p = t.view().data<float>();
  return {{"shape", shape}, {"data", std::vector<float>(p, p + t.numel())}};  // floats print round-trip exact
}
tensor tensor_of(const json& j) {
  if (j.is_null()) return {};
  shape s;
  for (const auto& d : j.at("shape")) s.push_back(d.get<std::int64_t>());
  tensor t = tensor::empty(s, dtype::f32);
  const auto data = j.at("data").get<std::vector<float>>();
  if (data.size() != t.numel()) throw error(errc::corrupt_data, "rank result: tensor data does not match its shape");
  std::copy(data.begin(), data.end(), t.view().data<float>());
  return t;
}
json stats_json(const comm_stats& s) {
  json a = json::array();
  for (std::size_t i = 0; i < kCollCount; ++i)
    a.push_back({s[static_cast<coll>(i)].calls, s[static_cast<coll>(i)].bytes});
  return a;
}
comm_stats stats_of(const json& a) {
  comm_stats s;
  for (std::size_t i = 0; i < kCollCount && i < a.size(); ++i) {
    const auto calls = a[i][0].get<std::uint64_t>(), bytes = a[i][1].get<std::uint64_t>();
    for (std::uint64_t n = 0; n < calls; ++n) s.record(static_cast<coll>(i), n == 0 ? bytes : 0);
  }
  return s;
}

json result_json(const rank_result& r) {
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

rank_result result_of(const json& j) {
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

std::string result_key(int rank) { return "hybrid_parallel/result/" + std::to_string(rank); }

// --- the report ---------------------------------------------------------------------------------------

double max_abs(const tensor& a, const tensor& b) {
  double m = a.numel() == b.numel() ? 0.0 : 1e30;
  for (std::uint64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    m = std::max(m, static_cast<double>(std::abs(a.view().data<float>()[i] - b.view().data<float>()[i])));
  }
  return m;
}
double max_mag(const tensor& b) {
  double m = 1e-6;
  for (std::uint64_t i = 0; i < b.numel(); ++i)
    m = std::max(m, static_cast<double>(std::abs(b.view().data<float>()[i])));
  return m;
}

std::string list(const std::vector<int>& v) {
  std::string s;
  for (int r : v) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

// Time during which the encoder's rank 0 and the LM's rank 0 both computed (their ops' intervals
// intersected): 0 whenever the modules run one after the other.
double concurrent_ms(const std::vector<hybrid::timed_op>& a, const std::vector<hybrid::timed_op>& b) {
  std::int64_t ns = 0;
  for (const auto& x : a) {
    for (const auto& y : b)
      ns += std::max<std::int64_t>(0, std::min(x.end_ns, y.end_ns) - std::max(x.start_ns, y.start_ns));
  }
  return static_cast<double>(ns) / 1e6;
}

struct run_config {
  int world = 4;
  std::vector<int> encoder_ranks, llm_ranks;
  hybrid::step_options so;
  double tolerance = 1e-5;
  bool procs = false;
  std::string device = "cpu";
};

int report(const run_config& rc, const hybrid::config& c, const tensors& params, const hybrid::reference_result& ref,
           const outcome& res, double wall_s) {
  const int mb = rc.so.microbatches;
  const bool enc_tp = rc.so.encoder == hybrid::encoder_layout::tp;
  std::printf("hybrid_parallel: vision encoder %s=%d on ranks %s -> language model TP=%d on ranks %s (%s, %s)%s\n",
              enc_tp ? "TP" : "SP (Ulysses)", res.enc_size, list(rc.encoder_ranks).c_str(), res.lm_size,
              list(rc.llm_ranks).c_str(), rc.device == "cuda" ? "layers on GPU 0, host-staged Gloo" : "CPU",
              rc.procs ? "ranks as processes" : "ranks as threads",
              rc.so.boundary == hybrid::boundary_kind::public_system ? ", the public system's boundary" : "");
  std::string rows;
  for (int m = 0; m < mb; ++m) rows += (m ? "," : "") + std::to_string(hybrid::microbatch_rows(c.batch, mb, m));
  std::printf("step: batch %lld in %d microbatch%s of %s row(s), schedule %s", static_cast<long long>(c.batch), mb,
              mb == 1 ? "" : "es", rows.c_str(), std::string(to_string(rc.so.schedule)).c_str());
  if (rc.so.schedule == pipeline_schedule::one_f_one_b) std::printf(", %d in flight", rc.so.in_flight);
  std::printf("\n");
  bool ok = true;
  double worst = 0;
  std::printf("\n%-22s %14s %14s\n", "vs single rank", "max abs diff", "relative");
  auto check = [&](const std::string& name, double diff, double mag) {
    const double rel = diff / mag;
    worst = std::max(worst, rel);
    ok = ok && rel <= rc.tolerance;
    std::printf("%-22s %14.3g %14.3g%s\n", name.c_str(), diff, rel, rel <= rc.tolerance ? "" : "  > tolerance");
  };
  double loss_diff = res.losses.empty() ? 1e30 : 0;
  for (float l : res.losses) loss_diff = std::max(loss_diff, static_cast<double>(std::abs(l - ref.loss)));
  std::printf("loss: %.7f (reference %.7f) on %zu TP ranks\n",
              static_cast<double>(res.losses.empty() ? NAN : res.losses[0]), static_cast<double>(ref.loss),
              res.losses.size());
  check("loss", loss_diff, std::max(1e-6, static_cast<double>(std::abs(ref.loss))));
  check("encoder output", max_abs(res.enc_out, ref.enc_out), max_mag(ref.enc_out));
  check("logits", max_abs(res.logits, ref.logits), max_mag(ref.logits));
  for (const auto& [name, want] : ref.grads) {
    auto it = res.grads.find(name);
    if (it == res.grads.end()) {
      std::printf("%-22s missing\n", ("grad " + name).c_str());
      ok = false;
      continue;
    }
    check("grad " + name, max_abs(it->second, want), max_mag(want));
  }

  // Bytes per collective next to the formulas (nccl-tests sizes; bus bytes = size × bus factor). Every
  // microbatch repeats the calls; the bytes scale with its rows, so they sum to the full batch's.
  const std::int64_t f = 4, b = c.batch, t = c.tokens(), m = mb;
  std::int64_t enc_param_bytes = 0;
  for (const auto& [name, p] : params) {
    if (name.rfind("enc.", 0) == 0) enc_param_bytes += static_cast<std::int64_t>(p.nbytes());
  }
  const std::int64_t enc_bytes = b * c.patches * c.enc_hidden * f;
  const hybrid::boundary_formula bf = hybrid::expected_boundary_bytes(c, rc.encoder_ranks, rc.llm_ranks, rc.so);
  const std::int64_t boundary_fwd = bf.forward, boundary_bwd = bf.backward;
  struct row {
    const char* group;
    coll op;
    const comm_stats* stats;
    int n;
    std::int64_t calls, bytes;
    const char* formula;
  };
  const std::int64_t s_local = c.patches / std::max(res.enc_size, 1);
  const std::int64_t sp_on = res.enc_size > 1, tp_on = res.lm_size > 1;  // a group of one rank communicates nothing
  const std::int64_t a2a = rc.so.recompute ? 12 : 8;  // --recompute runs the forward's 4 again in backward
  const row table[] = {
      {enc_tp ? "encoder TP" : "encoder SP", coll::all_to_all, &res.enc_stats, res.enc_size,
       enc_tp ? 0 : a2a * m * sp_on, enc_tp ? 0 : a2a * sp_on * b * s_local * c.enc_hidden * f,
       enc_tp            ? "none (tensor parallel: all_reduces)"
       : rc.so.recompute ? "12 x B*(S/sp)*H_e*4 (q,k,v,out fwd, again in bwd; dout,dq,dk,dv bwd), M x the calls"
                         : "8 x B*(S/sp)*H_e*4 (q,k,v,out fwd; dout,dq,dk,dv bwd), M x the calls"},
      enc_tp ? row{"encoder TP", coll::all_reduce, &res.enc_stats, res.enc_size, 4 * m * sp_on,
                   4 * sp_on * b * c.patches * c.enc_hidden * f, "fwd: out+fc2 B*S*H_e*4; bwd: fc1+qkv B*S*H_e*4"}
             : row{"encoder SP", coll::all_reduce, &res.enc_stats, res.enc_size, sp_on, sp_on * enc_param_bytes,
                   "replicated encoder weights, one fused gradient sync after the last microbatch"},
      {"LM TP", coll::all_reduce, &res.lm_stats, res.lm_size, 6 * m * tp_on,
       tp_on * (2 * b * c.text + 4 * b * t) * c.lm_hidden * f,
       "fwd: embed B*T_txt*H, proj+fc2 2*B*T*H; bwd: head B*T_txt*H, fc1+qkv 2*B*T*H"},
      {"LM TP", coll::all_gather, &res.lm_stats, res.lm_size, m * tp_on, tp_on * b * c.text * c.vocab * f,
       "head gather_output B*T_txt*V"},
      {"LM TP", coll::reduce_scatter, &res.lm_stats, res.lm_size, 0, 0, "none"},
  };
  std::printf("\n%-11s %-15s %6s %12s %12s %12s  %s\n", "group", "collective", "calls", "bytes", "formula", "bus bytes",
              "formula terms");
  for (const auto& r : table) {
    const auto& s = (*r.stats)[r.op];
    const bool match = static_cast<std::int64_t>(s.calls) == r.calls && static_cast<std::int64_t>(s.bytes) == r.bytes;
    ok = ok && match;
    std::printf("%-11s %-15s %6llu %12llu %12lld %12.0f  %s%s\n", r.group, std::string(to_string(r.op)).c_str(),
                static_cast<unsigned long long>(s.calls), static_cast<unsigned long long>(s.bytes),
                static_cast<long long>(r.bytes), r.stats->bus_bytes(r.op, r.n), r.formula, match ? "" : "  MISMATCH");
  }
  const bool boundary_ok = static_cast<std::int64_t>(res.boundary_sent) == boundary_fwd + boundary_bwd &&
                           res.boundary_received == res.boundary_sent && res.world_collectives == 0;
  ok = ok && boundary_ok;
  std::printf("%-11s %-15s %6s %12llu %12lld %12s  %s%s\n", "world", "send/recv", "-",
              static_cast<unsigned long long>(res.boundary_sent), static_cast<long long>(boundary_fwd + boundary_bwd),
              "-",
              rc.so.boundary == hybrid::boundary_kind::public_system
                  ? "public boundary, all ranks: all-gather over the encoder, the whole output to each paired LM rank "
                    "and the whole gradient back (boundary_bytes.hpp)"
                  : "boundary, all ranks: fwd = each LM rank gets what it lacks of B*S*H_e; bwd = each encoder rank "
                    "outside the LM group gets its part (boundary_bytes.hpp)",
              boundary_ok ? "" : "  MISMATCH");

  // Op logs: one per module, the same on each of its ranks; the encoder runs ahead exactly under 1F1B.
  auto one_log = [&](const std::map<int, std::string>& logs, const char* what) {
    const std::string first = logs.empty() ? std::string() : logs.begin()->second;
    for (const auto& [r, l] : logs) {
      if (l != first) {
        std::printf("%s op log of rank %d differs: %s vs %s\n", what, r, l.c_str(), first.c_str());
        ok = false;
      }
    }
    return first;
  };
  const std::string enc_log = one_log(res.enc_logs, "encoder"), lm_log = one_log(res.lm_logs, "LM");
  const bool ahead = forward_runs_ahead(enc_log);
  const bool want_ahead = rc.so.schedule == pipeline_schedule::one_f_one_b && mb > 1;
  ok = ok && ahead == want_ahead && !enc_log.empty() && !lm_log.empty();
  // Under the sequential schedule with disjoint rank sets every op waits for a message from the other
  // module's op before it, so the two never compute at the same time; 1F1B overlaps them (not asserted:
  // an oversubscribed machine may still run them one after the other).
  const double together = concurrent_ms(res.enc_timeline, res.lm_timeline);
  bool disjoint = true;
  for (int r : rc.encoder_ranks) {
    disjoint = disjoint && std::find(rc.llm_ranks.begin(), rc.llm_ranks.end(), r) == rc.llm_ranks.end();
  }
  const bool overlap_ok = rc.so.schedule != pipeline_schedule::sequential || !disjoint || together == 0;
  ok = ok && overlap_ok;
  std::printf("\nencoder ops (ranks %s): %s\n", list(rc.encoder_ranks).c_str(), enc_log.c_str());
  std::printf("LM ops      (ranks %s): %s\n", list(rc.llm_ranks).c_str(), lm_log.c_str());
  std::printf("encoder F(m+1) before B(m): %s (%s under %s)%s\n", ahead ? "yes" : "no",
              want_ahead ? "wanted" : "not wanted", std::string(to_string(rc.so.schedule)).c_str(),
              ahead == want_ahead ? "" : "  MISMATCH");
  std::printf("encoder and LM computing at the same time (their rank 0s): %.3f ms of a %.3f s run%s\n", together,
              wall_s, overlap_ok ? "" : "  MISMATCH (sequential: must be 0)");
  std::printf(
      "peak live bytes a rank allocated in the step (the largest over the ranks): encoder %llu, LM %llu, "
      "boundary %llu\n",
      static_cast<unsigned long long>(res.enc_peak), static_cast<unsigned long long>(res.lm_peak),
      static_cast<unsigned long long>(res.boundary_peak));

  const std::string mode = rc.procs ? "processes" : "threads";
  if (ok) {
    std::printf(
        "\nOK (%s, %s, %d microbatch%s, encoder ops %s): the hybrid step equals the single-rank reference "
        "(tolerance %.1g)\n",
        mode.c_str(), std::string(to_string(rc.so.schedule)).c_str(), mb, mb == 1 ? "" : "es", enc_log.c_str(),
        rc.tolerance);
  } else {
    std::printf("\nFAILED (tolerance %.1g)\n", rc.tolerance);
  }
  const json line = {{"bench", "hybrid_parallel"},
                     {"ranks_as", mode},
                     {"world", rc.world},
                     {"encoder_ranks", list(rc.encoder_ranks)},
                     {"llm_ranks", list(rc.llm_ranks)},
                     {"batch", c.batch},
                     {"microbatches", mb},
                     {"schedule", std::string(to_string(rc.so.schedule))},
                     {"in_flight", rc.so.in_flight},
                     {"recompute", rc.so.recompute},
                     {"encoder_layout", enc_tp ? "tp" : "sp"},
                     {"boundary", rc.so.boundary == hybrid::boundary_kind::public_system ? "public" : "ours"},
                     {"encoder_ops", enc_log},
                     {"lm_ops", lm_log},
                     {"encoder_runs_ahead", ahead},
                     {"max_rel_error", worst},
                     {"boundary_bytes", res.boundary_sent},
                     {"concurrent_ms", together},
                     {"peak_bytes_encoder", res.enc_peak},
                     {"peak_bytes_llm", res.lm_peak},
                     {"peak_bytes_boundary", res.boundary_peak},
                     {"wall_s", wall_s},
                     {"ok", ok}};
  std::printf("%s\n", line.dump().c_str());
  return ok ? 0 : 1;
}

// --- ranks as threads / processes ----------------------------------------------------------------------

// Runs fn(world, r) -> T on every rank as a thread over one hash_store; out[r] is rank r's value. 1 (the
// first error printed) when a rank threw.
template <class T, class F>
int on_thread_ranks(int world_size, std::vector<T>& out, F fn) {
  auto st = shared_store(hash_store());
  out.assign(static_cast<std::size_t>(world_size), T{});
  std::vector<std::thread> threads;
  std::mutex mu;
  std::string first_error;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto world = comm_t::create(st, r, world_size).value();
        out[static_cast<std::size_t>(r)] = fn(world, r);
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        if (first_error.empty()) first_error = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!first_error.empty()) {
    std::fprintf(stderr, "hybrid_parallel: %s\n", first_error.c_str());
    return 1;
  }
  return 0;
}

int run_threads(const run_config& rc, const hybrid::config& c, const tensors& params, const hybrid::batch& in,
                const hybrid_plan& plan, outcome& res) {
  std::vector<rank_result> outs;
  const int rc_code = on_thread_ranks(rc.world, outs, [&](comm_t& world, int) {
    if (rc.device == "cpu") {
      hybrid::cpu_mode mode;
      return hybrid::run_step(world, c, params, in, plan, rc.so, mode);
    }
#if defined(JITEMBED_HAS_NCCL)
    JITEMBED_CUDA_CHECK(cudaSetDevice(0));  // every rank on GPU 0
    hybrid::cuda_mode mode;
    return hybrid::run_step(world, c, params, in, plan, rc.so, mode);
#else
    return rank_result{};  // main() refuses --device cuda without CUDA
#endif
  });
  if (rc_code != 0) return rc_code;
  for (auto& o : outs) merge(res, std::move(o));
  return 0;
}

#if defined(JITEMBED_HAS_TCP_STORE)
// A rank as a process (started by launch_ranks with --store): connect, run fn(world) -> json, put that in the
// store under the rank's key.
template <class F>
int as_process_rank(const std::string& store_address, F fn) {
  const launched_rank me = local_rank_of_this_process().value();
  try {
    auto st = shared_store(tcp_store::open(store_address).value());
    gloo_options opt;
    opt.timeout = std::chrono::seconds(30);
    auto world = comm_t::create(st, me.rank, me.world_size, opt).value();
    const json out = fn(world);
    world.barrier().value();  // no rank closes its connections while a peer still uses them
    st.set(result_key(me.rank), out.dump()).value();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hybrid_parallel: rank %d (pid %d): %s\n", me.rank, static_cast<int>(::getpid()), e.what());
    return 1;
  }
  return 0;
}

int run_child(const std::string& store_address, const hybrid::config& c, const tensors& params, const hybrid::batch& in,
              const hybrid_plan& plan, const run_config& rc) {
  return as_process_rank(store_address, [&](comm_t& world) {
    hybrid::cpu_mode mode;
    return result_json(hybrid::run_step(world, c, params, in, plan, rc.so, mode));
  });
}

// The parent of --procs: a tcp_store server on 127.0.0.1 (an ephemeral port), one child process of this
// program per rank, a deadline, then every rank's result from the store (results[r]). When a rank fails and
// restarts are left, every rank is started again with --resume (the latest complete checkpoint) and without
// the test's --kill-rank / --kill-at-step.
int launch_ranks(const run_config& rc, int timeout_s, int max_restarts, std::vector<std::string> child_args,
                 std::vector<json>& results) {
  for (int attempt = 0;; ++attempt) {
    auto server = tcp_store_server::create({}).value();
    local_launch_options opt;
    opt.timeout = std::chrono::seconds(timeout_s);
    std::vector<std::string> args = child_args;
    args.insert(args.end(), {"--store", server.address()});
    auto ends = run_local_ranks(
        rc.world, [&](int) { return args; }, opt);
    if (!ends) {
      std::fprintf(stderr, "hybrid_parallel: %s\n", ends.error().message.c_str());
      return 1;
    }
    if (!all_ok(*ends)) {
      for (const auto& e : *ends) {
        if (!e.ok()) std::printf("hybrid_parallel: %s\n", e.to_string().c_str());
      }
      if (attempt >= max_restarts) return 1;
      std::printf("hybrid_parallel: restart %d of %d: every rank again with --resume\n", attempt + 1, max_restarts);
      std::vector<std::string> next;
      for (std::size_t i = 0; i < child_args.size(); ++i) {
        if (child_args[i] == "--kill-rank" || child_args[i] == "--kill-at-step") {
          ++i;
          continue;
        }
        if (child_args[i] != "--resume") next.push_back(child_args[i]);
      }
      next.push_back("--resume");
      child_args = std::move(next);
      continue;
    }
    auto st = tcp_store::open(server.address()).value();
    results.clear();
    for (int r = 0; r < rc.world; ++r) {
      auto got = st.get(result_key(r), std::chrono::seconds(5));
      if (!got) {
        std::fprintf(stderr, "hybrid_parallel: rank %d left no result: %s\n", r, got.error().message.c_str());
        return 1;
      }
      results.push_back(json::parse(got->begin(), got->end()));
    }
    return 0;
  }
}

int run_procs(const run_config& rc, int timeout_s, const std::vector<std::string>& child_args, outcome& res) {
  std::vector<json> results;
  if (const int code = launch_ranks(rc, timeout_s, /*max_restarts=*/0, child_args, results); code != 0) return code;
  for (const auto& j : results) merge(res, result_of(j));
  return 0;
}
#endif

// --- training: --steps N, AdamW, checkpoints, resume, restart (train.hpp) ---------------------------------

json train_json(const hybrid::train_result& r) {
  json params = json::object();
  for (const auto& [name, t] : r.params) params[name] = tensor_json(t);
  return {{"rank", r.rank},       {"enc_rank", r.enc_rank},         {"enc_size", r.enc_size}, {"lm_rank", r.lm_rank},
          {"lm_size", r.lm_size}, {"resumed_from", r.resumed_from}, {"losses", r.losses},     {"params", params}};
}
hybrid::train_result train_of(const json& j) {
  hybrid::train_result r;
  r.rank = j.at("rank").get<int>();
  r.enc_rank = j.at("enc_rank").get<int>();
  r.enc_size = j.at("enc_size").get<int>();
  r.lm_rank = j.at("lm_rank").get<int>();
  r.lm_size = j.at("lm_size").get<int>();
  r.resumed_from = j.at("resumed_from").get<int>();
  r.losses = j.at("losses").get<std::vector<float>>();
  for (const auto& [name, t] : j.at("params").items()) r.params[name] = tensor_of(t);
  return r;
}

int run_train_threads(const run_config& rc, const hybrid::config& c, const hybrid_plan& plan,
                      const hybrid::train_options& to, std::vector<hybrid::train_result>& out) {
  return on_thread_ranks(rc.world, out, [&](comm_t& world, int) {
    hybrid::cpu_mode mode;
    return hybrid::train_rank(world, c, plan, rc.so, to, mode);
  });
}

#if defined(JITEMBED_HAS_TCP_STORE)
int run_train_child(const std::string& store_address, const hybrid::config& c, const hybrid_plan& plan,
                    const run_config& rc, const hybrid::train_options& to) {
  return as_process_rank(store_address, [&](comm_t& world) {
    hybrid::cpu_mode mode;
    return train_json(hybrid::train_rank(world, c, plan, rc.so, to, mode));
  });
}

// One training rank under an outside supervisor (--events; jitembed.ray's actors): the rank and world come
// from JITEMBED_RANK / JITEMBED_WORLD_SIZE, and it reports on stdout, one JSON object a line: with
// --host-store (rank 0 only) {"event":"store","address":"127.0.0.1:P"} first: it hosts the run's tcp_store
// for the others' --store, as torch's TCPStore master does, and lives until every rank passed the final
// barrier; then {"event":"step",...} after each step (after its checkpoint), and {"event":"done",...}.
int run_train_events(std::string store_address, bool host_store, int pause_at_step, const hybrid::config& c,
                     const hybrid_plan& plan, const run_config& rc, hybrid::train_options to) {
  const auto me = local_rank_of_this_process();
  if (!me) {
    std::fprintf(stderr, "hybrid_parallel: --events: %s\n", me.error().message.c_str());
    return 2;
  }
  auto emit = [](const json& j) {
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);  // a pipe: the supervisor reads each line as it comes
  };
  try {
    std::optional<tcp_store_server> server;
    if (host_store) {
      server.emplace(tcp_store_server::create({}).value());  // 127.0.0.1, an ephemeral port
      store_address = server->address();
      emit({{"event", "store"}, {"rank", me->rank}, {"address", store_address}});
    }
    auto st = shared_store(tcp_store::open(store_address).value());
    gloo_options opt;
    opt.timeout = std::chrono::seconds(30);
    auto world = comm_t::create(st, me->rank, me->world_size, opt).value();
    to.on_step = [&](int s, const rank_result& r, double seconds) {
      emit({{"event", "step"},
            {"rank", r.rank},
            {"step", s},
            {"loss", r.lm_rank >= 0 ? json(r.loss) : json(nullptr)},
            {"seconds", seconds},
            {"tokens", c.batch * c.tokens()},  // of the global batch: every LM sequence, image and text tokens
            {"enc_rank", r.enc_rank},
            {"lm_rank", r.lm_rank},
            {"peak_bytes", {{"encoder", r.enc_peak}, {"llm", r.lm_peak}, {"boundary", r.boundary_peak}}},
            {"boundary_sent", r.boundary_sent},
            {"boundary_received", r.boundary_received}});
      // (tests) every rank stops itself right after reporting this step, before its next one: a supervisor's
      // test kills an actor at a known step on a machine of any speed
      if (s == pause_at_step) std::raise(SIGSTOP);
    };
    hybrid::cpu_mode mode;
    const hybrid::train_result res = hybrid::train_rank(world, c, plan, rc.so, to, mode);
    world.barrier().value();  // no rank (rank 0: the store) goes away while a peer still needs it
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(hybrid::train_digest(res.params, res.losses)));
    emit({{"event", "done"},
          {"rank", res.rank},
          {"resumed_from", res.resumed_from},
          {"losses", res.losses},
          {"tokens_per_step", c.batch * c.tokens()},
          {"digest", hex}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hybrid_parallel: rank %d (pid %d): %s\n", me->rank, static_cast<int>(::getpid()), e.what());
    return 1;
  }
  return 0;
}

int run_train_procs(const run_config& rc, int timeout_s, int max_restarts, std::vector<std::string> child_args,
                    std::vector<hybrid::train_result>& out) {
  std::vector<json> results;
  if (const int code = launch_ranks(rc, timeout_s, max_restarts, std::move(child_args), results); code != 0)
    return code;
  for (const auto& j : results) out.push_back(train_of(j));
  return 0;
}
#endif

// Losses per step and the gathered parameters against the reference trained the same steps (relative:
// |a - b| / |b| per loss, max |a - b| / max |b| per parameter tensor), the loss falling, the digest.
int report_train(const run_config& rc, const hybrid::config& c, const hybrid::train_options& to,
                 const std::vector<hybrid::train_result>& ranks, double wall_s) {
  tensors ref_params = hybrid::make_params(c, 42);
  const std::vector<float> ref_losses = hybrid::train_reference(c, ref_params, to);
  std::vector<float> losses;
  int resumed_from = 0;
  for (const auto& r : ranks) {
    if (r.lm_rank == 0) losses = r.losses;
    resumed_from = std::max(resumed_from, r.resumed_from);
  }
  const tensors params = hybrid::gather_params(ranks);
  bool ok = losses.size() == ref_losses.size() && params.size() == ref_params.size();
  double loss_rel = 0, param_rel = 0;
  std::string worst_param;
  double param_elem = 0;  // max |a - b| / max |b|: reported, not asserted (see docs/parallel.md)
  std::printf("hybrid_parallel: %d training steps, AdamW lr %g, %s, %s%s\n", to.steps, static_cast<double>(to.lr),
              rc.procs ? "ranks as processes" : "ranks as threads", std::string(to_string(rc.so.schedule)).c_str(),
              resumed_from ? (", resumed from step " + std::to_string(resumed_from)).c_str() : "");
  std::printf("%5s %14s %14s\n", "step", "loss", "reference");
  for (std::size_t s = 0; s < losses.size() && s < ref_losses.size(); ++s) {
    loss_rel = std::max(loss_rel, std::abs(static_cast<double>(losses[s]) - ref_losses[s]) /
                                      std::max(1e-6, std::abs(static_cast<double>(ref_losses[s]))));
    std::printf("%5zu %14.9g %14.9g\n", s + 1, static_cast<double>(losses[s]), static_cast<double>(ref_losses[s]));
  }
  for (const auto& [name, want] : ref_params) {
    auto it = params.find(name);
    if (it == params.end()) {
      std::printf("parameter %s missing\n", name.c_str());
      ok = false;
      continue;
    }
    double diff2 = 0, norm2 = 0;
    for (std::uint64_t i = 0; i < want.numel() && it->second.numel() == want.numel(); ++i) {
      const double a = it->second.view().data<float>()[i], b = want.view().data<float>()[i];
      diff2 += (a - b) * (a - b);
      norm2 += b * b;
    }
    const double rel = it->second.numel() == want.numel() ? std::sqrt(diff2 / std::max(norm2, 1e-30)) : 1e30;
    if (rel > param_rel) worst_param = name;
    param_rel = std::max(param_rel, rel);
    param_elem = std::max(param_elem, max_abs(it->second, want) / max_mag(want));
  }
  ok = ok && loss_rel <= rc.tolerance && param_rel <= rc.tolerance;
  // Each step trains on a new random batch: over a few steps the loss is mostly that noise, so the fall is
  // asserted from 10 steps on (20 on the default config: 4.666 -> 4.448).
  const bool falls = losses.size() >= 2 && losses.back() < losses.front();
  const bool want_fall = to.steps >= 10;
  ok = ok && (falls || !want_fall);
  const std::uint64_t digest = hybrid::train_digest(params, losses);
  std::printf(
      "relative error vs reference: losses %.3g (max over steps), parameters %.3g (max over tensors of |a-b|_2 / "
      "|b|_2, %s) (tolerance %.1g); elementwise max|a-b| / max|b| %.3g\n",
      loss_rel, param_rel, worst_param.c_str(), rc.tolerance, param_elem);
  std::printf("loss %s: %.9g -> %.9g%s\n", falls ? "falls" : "does not fall",
              static_cast<double>(losses.empty() ? NAN : losses.front()),
              static_cast<double>(losses.empty() ? NAN : losses.back()), want_fall ? "" : " (asserted from 10 steps)");
  std::printf("digest %016llx (final parameters and losses)\n", static_cast<unsigned long long>(digest));
  if (ok) {
    std::printf("\nOK (%s, %s, %d steps): training equals the single-rank reference (tolerance %.1g)\n",
                rc.procs ? "processes" : "threads", std::string(to_string(rc.so.schedule)).c_str(), to.steps,
                rc.tolerance);
  } else {
    std::printf("\nFAILED (tolerance %.1g)\n", rc.tolerance);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
  const json line = {{"bench", "hybrid_parallel_train"},
                     {"ranks_as", rc.procs ? "processes" : "threads"},
                     {"steps", to.steps},
                     {"resumed_from", resumed_from},
                     {"losses", losses},
                     {"max_rel_error_loss", loss_rel},
                     {"max_rel_error_params", param_rel},
                     {"max_elementwise_error_params", param_elem},
                     {"digest", hex},
                     {"wall_s", wall_s},
                     {"ok", ok}};
  std::printf("%s\n", line.dump().c_str());
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  run_config rc;
  rc.encoder_ranks = {0, 1, 2, 3};
  rc.llm_ranks = {0, 1};
  double tolerance = -1;
  std::int64_t batch = 2;
  std::string schedule = "sequential", store;
  int timeout_s = 60;
  CLI::App app{
      "hybrid_parallel: an SP vision encoder (Ulysses) feeding a TP language model on Gloo ranks, "
      "checked against the single-rank reference"};
  app.add_option("--world", rc.world, "ranks in the world")->check(CLI::Range(1, 16))->capture_default_str();
  app.add_option("--encoder-ranks", rc.encoder_ranks, "ranks of the sequence-parallel vision encoder (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--llm-ranks", rc.llm_ranks, "ranks of the tensor-parallel language model (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--batch", batch, "rows of the global batch")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--microbatches", rc.so.microbatches, "microbatches the batch is cut into (<= --batch)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--schedule", schedule, "sequential, or 1f1b (disjoint rank sets)")
      ->check(CLI::IsMember({"sequential", "1f1b"}))
      ->capture_default_str();
  std::string encoder_layout = "sp", boundary = "ours";
  app.add_option("--encoder-layout", encoder_layout, "sp (Ulysses), or tp (uniform tensor parallelism)")
      ->check(CLI::IsMember({"sp", "tp"}))
      ->capture_default_str();
  app.add_option("--boundary", boundary,
                 "ours (only the bytes a rank lacks), or public (all-gather, whole output to "
                 "the paired rank, whole gradient back)")
      ->check(CLI::IsMember({"ours", "public"}))
      ->capture_default_str();
  app.add_flag("--recompute", rc.so.recompute, "recompute the encoder block in backward (keep only its input)");
  app.add_option("--in-flight", rc.so.in_flight, "1f1b: microbatches in flight on the encoder (>= 2)")
      ->capture_default_str();
  app.add_flag("--procs", rc.procs, "one process per rank (tcp_store on 127.0.0.1), not threads");
  app.add_option("--timeout", timeout_s, "--procs: seconds before the ranks still running are killed")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--store", store, "(set by --procs for its children) the tcp_store to join as a rank")->group("");
  bool events = false, host_store = false;
  int pause_at_step = 0;
  app.add_flag("--events", events,
               "run one training rank (JITEMBED_RANK, JITEMBED_WORLD_SIZE; --store or --host-store) and report JSON "
               "lines on stdout (jitembed.ray)");
  app.add_flag("--host-store", host_store, "--events, rank 0: host the tcp_store on 127.0.0.1 and print its address");
  app.add_option("--pause-at-step", pause_at_step, "(tests, --events) SIGSTOP this rank after reporting that step");
  app.add_option("--tolerance", tolerance, "largest relative error accepted (default 1e-5 on cpu, 1e-4 on cuda)")
      ->check(CLI::PositiveNumber);
  app.add_option("--device", rc.device, "where the layers run")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  hybrid::train_options to;
  int max_restarts = 0;
  app.add_option("--steps", to.steps, "training steps, each followed by AdamW (1: the single-step check)")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("--lr", to.lr, "AdamW learning rate (--steps)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--checkpoint-dir", to.checkpoint_dir, "where every rank saves its shard of each module it holds");
  app.add_option("--checkpoint-every", to.checkpoint_every, "save after every K-th step (0: never)")
      ->check(CLI::Range(0, 10000))
      ->capture_default_str();
  app.add_flag("--resume", to.resume, "continue from the latest complete checkpoint under --checkpoint-dir");
  app.add_option("--max-restarts", max_restarts, "--procs: after a rank fails, start every rank again with --resume")
      ->check(CLI::Range(0, 10))
      ->capture_default_str();
  app.add_option("--kill-rank", to.kill_rank, "(tests) this rank SIGKILLs itself after --kill-at-step's checkpoint");
  app.add_option("--kill-at-step", to.kill_at_step, "(tests) see --kill-rank");
  CLI11_PARSE(app, argc, argv);
  const bool training =
      events || to.steps > 1 || !to.checkpoint_dir.empty() || to.resume || max_restarts > 0 || to.kill_rank >= 0;
  rc.tolerance = tolerance > 0 ? tolerance : rc.device == "cuda" ? 1e-4 : 1e-5;
  rc.so.schedule = parse_pipeline_schedule(schedule).value();
  rc.so.encoder = encoder_layout == "tp" ? hybrid::encoder_layout::tp : hybrid::encoder_layout::sp;
  rc.so.boundary = boundary == "public" ? hybrid::boundary_kind::public_system : hybrid::boundary_kind::ours;
  auto fail_usage = [](const std::string& why) {
    std::fprintf(stderr, "hybrid_parallel: %s\n", why.c_str());
    return 2;
  };
  if (rc.device == "cuda") {
#if defined(JITEMBED_HAS_NCCL)
    if (rc.procs) return fail_usage("--procs runs the CPU layers only (--device cpu)");
    if (jitembed::cuda::device_count() == 0) {
      std::printf("hybrid_parallel --device cuda: no CUDA device, skipped\n");
      return 0;
    }
#else
    return fail_usage("built without CUDA (JITEMBED_WITH_CUDA=OFF)");
#endif
  }
  if (training) {
    if (rc.device != "cpu") return fail_usage("--steps > 1 and checkpoints run the CPU layers only (--device cpu)");
    if ((to.resume || to.checkpoint_every > 0 || max_restarts > 0) && to.checkpoint_dir.empty())
      return fail_usage("--resume, --checkpoint-every and --max-restarts need --checkpoint-dir");
    if ((max_restarts > 0 || to.kill_rank >= 0) && !rc.procs && store.empty() && !events)
      return fail_usage("--max-restarts and --kill-rank need --procs");
    if ((to.kill_rank >= 0) != (to.kill_at_step >= 1)) return fail_usage("--kill-rank needs --kill-at-step");
  }
  if (rc.so.recompute && rc.so.encoder == hybrid::encoder_layout::tp)
    return fail_usage("--recompute is for the sequence-parallel encoder (--encoder-layout sp)");
  if (training && (rc.so.encoder != hybrid::encoder_layout::sp || rc.so.boundary != hybrid::boundary_kind::ours))
    return fail_usage("--steps > 1 and checkpoints run --encoder-layout sp --boundary ours");
  if (rc.so.boundary == hybrid::boundary_kind::public_system && rc.encoder_ranks.size() != rc.llm_ranks.size()) {
    return fail_usage("--boundary public pairs equal groups one to one: " + std::to_string(rc.encoder_ranks.size()) +
                      " encoder ranks, " + std::to_string(rc.llm_ranks.size()) + " language model ranks");
  }
  if (rc.so.microbatches > batch) {
    return fail_usage("--microbatches " + std::to_string(rc.so.microbatches) + " > --batch " + std::to_string(batch));
  }
  if (auto s = two_stage_schedule(rc.so.schedule, rc.so.microbatches, rc.so.in_flight); !s) {
    return fail_usage(s.error().message);
  }
  if (rc.so.schedule == pipeline_schedule::one_f_one_b) {
    for (int r : rc.encoder_ranks) {
      if (std::find(rc.llm_ranks.begin(), rc.llm_ranks.end(), r) != rc.llm_ranks.end()) {
        return fail_usage("schedule 1f1b needs disjoint rank sets (rank " + std::to_string(r) +
                          " is in both modules): use --schedule sequential");
      }
    }
  }
  hybrid::config c;
  c.batch = batch;
  const tensors params = hybrid::make_params(c, 42);
  const hybrid::batch in = hybrid::make_batch(c, 7);
  auto planned = hybrid_plan::create(
      {{"vision_encoder",
        rc.so.encoder == hybrid::encoder_layout::tp ? strategy::tensor_parallel : strategy::sequence_parallel,
        static_cast<int>(rc.encoder_ranks.size()), rc.encoder_ranks},
       {"language_model", strategy::tensor_parallel, static_cast<int>(rc.llm_ranks.size()), rc.llm_ranks}},
      rc.world);
  if (!planned) return fail_usage(planned.error().message);
  const hybrid_plan plan = std::move(planned).value();
  if (events && (rc.procs || max_restarts > 0 || host_store == !store.empty()))
    return fail_usage("--events runs one rank: it needs --store ADDR or --host-store (one of them), not --procs");
  if (host_store && !events) return fail_usage("--host-store needs --events");
#if defined(JITEMBED_HAS_TCP_STORE)
  if (events) return run_train_events(store, host_store, pause_at_step, c, plan, rc, to);
  if (!store.empty()) {
    return training ? run_train_child(store, c, plan, rc, to) : run_child(store, c, params, in, plan, rc);
  }
#else
  if (rc.procs || !store.empty() || events)
    return fail_usage("--procs and --events need the tcp_store component (JITEMBED_WITH_HTTP=ON)");
#endif

  std::vector<std::string> child_args{"--world",          std::to_string(rc.world),
                                      "--encoder-ranks",  list(rc.encoder_ranks),
                                      "--llm-ranks",      list(rc.llm_ranks),
                                      "--batch",          std::to_string(batch),
                                      "--microbatches",   std::to_string(rc.so.microbatches),
                                      "--schedule",       schedule,
                                      "--in-flight",      std::to_string(rc.so.in_flight),
                                      "--encoder-layout", encoder_layout,
                                      "--boundary",       boundary};
  if (rc.so.recompute) child_args.push_back("--recompute");
  const auto t0 = std::chrono::steady_clock::now();
  if (training) {
    char lr[32];
    std::snprintf(lr, sizeof lr, "%.9g", static_cast<double>(to.lr));
    child_args.insert(child_args.end(), {"--steps", std::to_string(to.steps), "--lr", lr});
    if (!to.checkpoint_dir.empty()) {
      child_args.insert(child_args.end(), {"--checkpoint-dir", to.checkpoint_dir, "--checkpoint-every",
                                           std::to_string(to.checkpoint_every)});
    }
    if (to.resume) child_args.push_back("--resume");
    if (to.kill_rank >= 0) {
      child_args.insert(child_args.end(), {"--kill-rank", std::to_string(to.kill_rank), "--kill-at-step",
                                           std::to_string(to.kill_at_step)});
    }
    std::vector<hybrid::train_result> ranks;
    int rc_train = 0;
    if (rc.procs) {
#if defined(JITEMBED_HAS_TCP_STORE)
      rc_train = run_train_procs(rc, timeout_s, max_restarts, child_args, ranks);
#endif
    } else {
      rc_train = run_train_threads(rc, c, plan, to, ranks);
    }
    if (rc_train != 0) return rc_train;
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return report_train(rc, c, to, ranks, wall_s);
  }

  const auto ref = hybrid::run_reference(c, params, in);
  outcome res;
  int rc_run = 0;
  if (rc.procs) {
#if defined(JITEMBED_HAS_TCP_STORE)
    rc_run = run_procs(rc, timeout_s, child_args, res);
#endif
  } else {
    rc_run = run_threads(rc, c, params, in, plan, res);
  }
  if (rc_run != 0) return rc_run;
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report(rc, c, params, ref, res, wall_s);
}
