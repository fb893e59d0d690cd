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
#include "rank_io.hpp"
#include "ranks.hpp"
#include "report.hpp"
#include "train.hpp"
#if defined(JITEMBED_HAS_TCP_STORE)
#include "jitembed/parallel/tcp_store.hpp"
#include "jitembed/parallel/tcp_store_server.hpp"
#endif

namespace {

using namespace hybrid_app;  // jitembed, jitembed::parallel, json and the hybrid:: names (rank_io.hpp)

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
