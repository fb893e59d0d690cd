// The hybrid_parallel example's report of one step: differences against the single-rank reference, the bytes
// each collective moved next to its formula, the op logs and the JSON result line.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "boundary_bytes.hpp"
#include "rank_io.hpp"

namespace hybrid_app {

// (the names rank_io.hpp brings into hybrid_app)
// --- the report ---------------------------------------------------------------------------------------

inline double max_abs(const tensor& a, const tensor& b) {
  double m = a.numel() == b.numel() ? 0.0 : 1e30;
  for (std::uint64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    m = std::max(m, static_cast<double>(std::abs(a.view().data<float>()[i] - b.view().data<float>()[i])));
  }
  return m;
}
inline double max_mag(const tensor& b) {
  double m = 1e-6;
  for (std::uint64_t i = 0; i < b.numel(); ++i)
    m = std::max(m, static_cast<double>(std::abs(b.view().data<float>()[i])));
  return m;
}

inline std::string list(const std::vector<int>& v) {
  std::string s;
  for (int r : v) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

// Time during which the encoder's rank 0 and the LM's rank 0 both computed (their ops' intervals
// intersected): 0 whenever the modules run one after the other.
inline double concurrent_ms(const std::vector<hybrid::timed_op>& a, const std::vector<hybrid::timed_op>& b) {
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

inline int report(const run_config& rc, const hybrid::config& c, const tensors& params,
                  const hybrid::reference_result& ref, const outcome& res, double wall_s) {
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

}  // namespace hybrid_app
