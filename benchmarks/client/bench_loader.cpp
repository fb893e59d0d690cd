// bench_loader: a trainer loop fed by jit_loader from local jitembed-server processes whose text-embed
// model sleeps per row (emulated GPU encoder time that uses no CPU), next to the same trainer embedding
// in-process in each step (inline: the same model, the same sleep, run on the step's batch), in one run.
//
//   part "depth":   trainer stall vs prefetch depth D (requests_in_flight 1, 2, 4, 8, 16) at a fixed
//                   capacity (1 server, 1 instance: capacity 1.25x the trainer's demand);
//   part "servers": a faster trainer (demand 3.2x one server) fed by 1, 2, 4 servers: throughput.
//
// Targets: where service capacity >= demand, stall (time blocked in next()) <= 2% of the wall time; and
// jit/inline (inline step time / jit step time) >= 0.9x the ideal (t_train + t_embed) / max(t_train,
// t_embed / N), t_train and t_embed measured in the inline run, N the number of servers (one server has
// the in-process encoder's speed: the ideal is then (t_train + t_embed) / max(t_train, t_embed)).
//
//   bench_loader [--server PATH] [--steps N] [--row-us U] [parts: depth servers]
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "bench_util.hpp"
#include "bench_proc.hpp"
#include "jitembed/loader/jit_loader.hpp"
#include "jitembed/models/emulated_latency.hpp"
#include "jitembed/models/text_embed.hpp"

namespace {

using namespace jitembed;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

#ifndef JITEMBED_SERVER_PATH
#define JITEMBED_SERVER_PATH ""
#endif

constexpr std::size_t kBatch = 32;       // samples per training step
constexpr std::size_t kPerRequest = 8;   // B: rows per embed request
constexpr std::size_t kWarmupSteps = 5;  // not measured: loader start, connections, the first prefetch
constexpr int kTextDim = 8, kTextLen = 16;

double secs(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

std::string g_temp_dir;  // removed on SIGINT / SIGTERM / SIGHUP too

// A directory of caption files (one sample each).
struct temp_captions {
  fs::path dir;
  format::dataset data;
  explicit temp_captions(std::size_t n) {
    dir = fs::temp_directory_path() / ("jitembed-bench-loader-" + std::to_string(::getpid()));
    g_temp_dir = dir.string();
    bench::detail::g_signal_cleanup = [] {
      std::error_code ec;
      fs::remove_all(g_temp_dir, ec);
    };
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (std::size_t i = 0; i < n; ++i) {
      char stem[32];
      std::snprintf(stem, sizeof stem, "s%06zu.txt", i);
      const std::string caption = "a photo of sample " + std::to_string(i) + (i % 3 ? " with a few more words" : " on a table");
      std::ofstream(dir / stem, std::ios::binary) << caption;
    }
    auto d = format::dataset::open(dir.string());
    if (!d) {
      std::fprintf(stderr, "bench_loader: dataset::open: %s\n", d.error().message.c_str());
      std::exit(1);
    }
    data = std::move(*d);
  }
  ~temp_captions() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

models::any_model inline_model(std::chrono::microseconds per_row) {
  models::text_embed_options o;
  o.dim = kTextDim;
  o.max_length = kTextLen;
  models::latency_options l;
  l.per_item = per_row;
  return models::any_model(models::emulated_latency(models::any_model(models::text_embed::create(o).value()), l));
}

struct run_result {
  std::size_t steps = 0;
  double wall_s = 0;     // measured steps, wall time
  double wait_s = 0;     // jit: time blocked in next(); inline: 0
  double max_wait_s = 0;
  std::vector<double> waits_us;  // each measured next()
  double train_s = 0;    // time in the trainer's sleep
  double embed_s = 0;    // inline: time embedding in the step
  std::uint64_t failed = 0;
  std::uint64_t hedges = 0, retries = 0, resubmits = 0, requests = 0;
  std::string error;
  double step_s() const { return steps ? wall_s / static_cast<double>(steps) : 0; }
  double stall() const { return wall_s > 0 ? wait_s / wall_s : 0; }
  double samples_per_s() const { return wall_s > 0 ? static_cast<double>(steps * kBatch) / wall_s : 0; }
};

// Inline: each step reads its samples, embeds them in-process (one run() over the batch), then trains.
run_result run_inline(const format::dataset& data, const models::any_model& m, std::size_t steps, std::chrono::microseconds t_train) {
  run_result r;
  std::size_t next_index = 0;
  for (std::size_t k = 0; k < kWarmupSteps + steps; ++k) {
    const bool measured = k >= kWarmupSteps;
    const auto t0 = clock_type::now();
    std::vector<tensor> batch;
    batch.reserve(kBatch);
    for (std::size_t i = 0; i < kBatch; ++i, ++next_index) {
      auto s = data.get(next_index % data.size());
      const auto* f = s ? s->first(format::field_kind::text) : nullptr;
      auto text = f ? f->text() : result<std::string>(fail(errc::invalid_argument, "no text"));
      auto in = text ? m.preprocess(as_bytes_view(*text), {}) : result<tensor>(text.error());
      if (!in) {
        ++r.failed;
        continue;
      }
      batch.push_back(std::move(*in));
    }
    auto out = m.run(batch);
    if (!out) ++r.failed;
    const auto t1 = clock_type::now();
    std::this_thread::sleep_for(t_train);
    const auto t2 = clock_type::now();
    if (measured) {
      r.embed_s += secs(t1 - t0);
      r.train_s += secs(t2 - t1);
      r.wall_s += secs(t2 - t0);
      ++r.steps;
    }
  }
  return r;
}

// JIT: jit_loader over `urls` (a fresh client and loader per run), D chunks of B rows in flight.
run_result run_jit(const format::dataset& data, const std::vector<std::string>& urls, std::size_t depth, std::size_t steps,
                   std::chrono::microseconds t_train) {
  run_result r;
  client::client_options co;
  co.endpoints.list = urls;
  auto cl = client::jit_client::create(std::move(co));
  if (!cl) {
    r.error = "jit_client::create: " + cl.error().message;
    return r;
  }
  loader::loader_options lo;
  lo.embeddings = {{"caption", "text-embed", models::modality::text, "pooled", ""}};
  lo.batch_size = kBatch;
  lo.samples_per_request = kPerRequest;
  lo.requests_in_flight = depth;
  lo.workers = 2;
  lo.max_buffered = depth * kPerRequest + 2 * kBatch;
  lo.shuffle = false;
  auto l = loader::jit_loader::create(data, *cl, lo);
  if (!l) {
    r.error = "jit_loader::create: " + l.error().message;
    return r;
  }
  clock_type::time_point start;
  for (std::size_t k = 0; k < kWarmupSteps + steps; ++k) {
    const bool measured = k >= kWarmupSteps;
    if (k == kWarmupSteps) start = clock_type::now();
    const auto t0 = clock_type::now();
    auto b = l->next();
    const auto t1 = clock_type::now();
    if (!b || !*b) {
      r.error = b ? "end of epoch before the last step (data set too small)" : "next(): " + b.error().message;
      break;
    }
    for (const auto& s : (*b)->samples)
      if (!s.ok() || !s.find("caption")) ++r.failed;
    std::this_thread::sleep_for(t_train);
    const auto t2 = clock_type::now();
    if (measured) {
      r.wait_s += secs(t1 - t0);
      r.max_wait_s = std::max(r.max_wait_s, secs(t1 - t0));
      r.waits_us.push_back(secs(t1 - t0) * 1e6);
      r.train_s += secs(t2 - t1);
      ++r.steps;
    }
  }
  r.wall_s = secs(clock_type::now() - start);
  const auto st = l->stats();
  r.hedges = st.client.hedges;
  r.retries = st.client.retries;
  r.resubmits = st.resubmits;
  r.requests = st.requests;
  l->close();
  cl->close();
  return r;
}

struct ideal_model {
  double t_train, t_embed;
  double ideal(std::size_t servers) const {
    return (t_train + t_embed) / std::max(t_train, t_embed / static_cast<double>(servers));
  }
};

}  // namespace

int main(int argc, char** argv) {
  bench::install_child_reaper();
  std::string server_bin = JITEMBED_SERVER_PATH;
  std::size_t steps = 100;
  int row_us = 500;
  bench::command_line cli{"bench_loader: the JIT loader's stall against prefetch depth and server count, jit vs inline",
                          {"depth", "servers"}};
  cli.app.add_option("--server", server_bin, "jitembed-server to start")->capture_default_str();
  cli.app.add_option("--steps", steps, "training steps per measurement")->check(CLI::Range(10, 1000000))->capture_default_str();
  cli.app.add_option("--row-us", row_us, "emulated encoder time per row (us)")->check(CLI::Range(1, 10000000))->capture_default_str();
  CLI11_PARSE(cli.app, argc, argv);
  if (server_bin.empty() || ::access(server_bin.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "bench_loader: jitembed-server not found ('%s'); pass --server PATH\n", server_bin.c_str());
    return 2;
  }
  const auto per_row = std::chrono::microseconds(row_us);
  // Per-row sleep, one instance, no batching delay: a server embeds 1e6 / row_us rows per second, however
  // the rows are batched (the in-process model runs at the same rate).
  const std::string model_flag = "text-embed:text_dim=" + std::to_string(kTextDim) + ",text_max_length=" + std::to_string(kTextLen) +
                                 ",sleep_us_per_row=" + std::to_string(row_us) + ",instances=1";
  // t_embed of one step = kBatch x row_us. depth: t_train = 1.25 t_embed (capacity 1.25x demand);
  // servers: t_train = t_embed / 3.2 (needs 4 servers for capacity >= demand: 4 / 3.2 = 1.25x).
  const auto t_embed_nominal = per_row * static_cast<std::int64_t>(kBatch);
  const auto t_train_depth = t_embed_nominal * 5 / 4;
  const auto t_train_servers = t_embed_nominal * 10 / 32;
  const bool do_depth = cli.wanted("depth");
  const bool do_servers = cli.wanted("servers");
  const std::size_t servers_steps = steps * 2;
  temp_captions ds(kBatch * (kWarmupSteps + std::max(steps, servers_steps)) + 4 * kBatch);

  std::vector<std::unique_ptr<bench::server_process>> servers;
  for (int i = 0; i < (do_servers ? 4 : 1); ++i) {
    servers.push_back(std::make_unique<bench::server_process>(
        server_bin, std::vector<std::string>{"--model", model_flag, "--max-queue-delay-us", "0"},
        "/tmp/bench_loader_server" + std::to_string(i) + ".log"));
    if (!servers.back()->ready()) return 1;
  }
  auto urls = [&](std::size_t n) {
    std::vector<std::string> u;
    for (std::size_t i = 0; i < n; ++i) u.push_back(servers[i]->url());
    return u;
  };
  const auto model = inline_model(per_row);
  int rc = 0;
  std::vector<std::string> lines;
  const auto fail_run = [&](const char* what, const run_result& r) {
    if (!r.error.empty()) std::fprintf(stderr, "bench_loader %s: %s\n", what, r.error.c_str()), rc = 1;
    if (r.failed) std::fprintf(stderr, "bench_loader %s: %llu failed samples\n", what, static_cast<unsigned long long>(r.failed)), rc = 1;
  };

  if (do_depth) {
    const auto inl = run_inline(ds.data, model, steps, t_train_depth);
    fail_run("depth inline", inl);
    const ideal_model im{inl.train_s / static_cast<double>(inl.steps), inl.embed_s / static_cast<double>(inl.steps)};
    const double ideal = im.ideal(1);
    std::printf("trainer stall vs prefetch depth D: 1 server x 1 instance, B=%zu rows/request, batch %zu, t_train %.1f ms, "
                "t_embed %.2f ms (inline, measured), capacity/demand %.2f, %zu steps\n",
                kPerRequest, kBatch, im.t_train * 1e3, im.t_embed * 1e3, im.t_train / im.t_embed, steps);
    std::printf("%-6s %10s %10s %10s %10s %10s %12s %10s %10s %8s %8s %s\n", "D", "step ms", "inline ms", "stall %", "p50 wait us", "max wait ms", "jit/inline",
                "ideal", "0.9 ideal", "hedges", "retries", "result");
    for (const std::size_t d : {1, 2, 4, 8, 16}) {
      const auto r = run_jit(ds.data, urls(1), d, steps, t_train_depth);
      fail_run(("depth D=" + std::to_string(d)).c_str(), r);
      const double speedup = r.step_s() > 0 ? inl.step_s() / r.step_s() : 0;
      const bool stall_pass = r.error.empty() && r.stall() <= 0.02;
      const bool speed_pass = r.error.empty() && speedup >= 0.9 * ideal;
      std::printf("%-6zu %10.2f %10.2f %10.2f %10.1f %10.2f %12.3f %10.3f %10.3f %8llu %8llu %s\n", d, r.step_s() * 1e3, inl.step_s() * 1e3,
                  r.stall() * 100, bench::percentile(r.waits_us, 0.5), r.max_wait_s * 1e3, speedup, ideal, 0.9 * ideal, static_cast<unsigned long long>(r.hedges),
                  static_cast<unsigned long long>(r.retries), stall_pass && speed_pass ? "pass" : "FAIL");
      lines.push_back(nlohmann::json{{"bench", "loader/stall vs depth D=" + std::to_string(d)},
                                     {"stall_fraction", r.stall()},
                                     {"stall_threshold", 0.02},
                                     {"stall_pass", stall_pass},
                                     {"jit_over_inline", speedup},
                                     {"ideal", ideal},
                                     {"speedup_threshold", 0.9 * ideal},
                                     {"speedup_pass", speed_pass},
                                     {"pass", stall_pass && speed_pass},
                                     {"depth", d},
                                     {"servers", 1},
                                     {"capacity_over_demand", im.t_train / im.t_embed},
                                     {"jit_step_ms", r.step_s() * 1e3},
                                     {"inline_step_ms", inl.step_s() * 1e3},
                                     {"t_train_ms", im.t_train * 1e3},
                                     {"t_embed_ms", im.t_embed * 1e3},
                                     {"max_wait_ms", r.max_wait_s * 1e3},
                                     {"p50_wait_us", bench::percentile(r.waits_us, 0.5)},
                                     {"p99_wait_us", bench::percentile(r.waits_us, 0.99)},
                                     {"samples_per_s", r.samples_per_s()},
                                     {"steps", r.steps},
                                     {"batch", kBatch},
                                     {"rows_per_request", kPerRequest},
                                     {"row_us", row_us},
                                     {"requests", r.requests},
                                     {"hedges", r.hedges},
                                     {"retries", r.retries},
                                     {"resubmits", r.resubmits},
                                     {"failed_samples", r.failed}}
                          .dump());
    }
    std::printf("\n");
  }

  if (do_servers) {
    const auto inl = run_inline(ds.data, model, servers_steps, t_train_servers);
    fail_run("servers inline", inl);
    const ideal_model im{inl.train_s / static_cast<double>(inl.steps), inl.embed_s / static_cast<double>(inl.steps)};
    const std::size_t depth = 16;
    std::printf("throughput vs servers: D=%zu, B=%zu, batch %zu, t_train %.2f ms, t_embed %.2f ms (inline, measured), %zu steps\n",
                depth, kPerRequest, kBatch, im.t_train * 1e3, im.t_embed * 1e3, servers_steps);
    std::printf("%-8s %12s %10s %10s %10s %12s %10s %10s %10s %8s %s\n", "servers", "samples/s", "scaling", "step ms", "stall %",
                "jit/inline", "ideal", "0.9 ideal", "cap/dem", "hedges", "result");
    double base = 0;
    for (const std::size_t n : {1, 2, 4}) {
      const auto r = run_jit(ds.data, urls(n), depth, servers_steps, t_train_servers);
      fail_run(("servers N=" + std::to_string(n)).c_str(), r);
      if (n == 1) base = r.samples_per_s();
      const double scaling = base > 0 ? r.samples_per_s() / base : 0;
      const double speedup = r.step_s() > 0 ? inl.step_s() / r.step_s() : 0;
      const double ideal = im.ideal(n);
      const double cap = static_cast<double>(n) * im.t_train / im.t_embed;
      const bool stall_applies = cap >= 1.0;
      const bool stall_pass = r.error.empty() && (!stall_applies || r.stall() <= 0.02);
      const bool speed_pass = r.error.empty() && speedup >= 0.9 * ideal;
      std::printf("%-8zu %12.0f %10.3f %10.2f %10.2f %12.3f %10.3f %10.3f %10.2f %8llu %s\n", n, r.samples_per_s(), scaling,
                  r.step_s() * 1e3, r.stall() * 100, speedup, ideal, 0.9 * ideal, cap, static_cast<unsigned long long>(r.hedges),
                  stall_pass && speed_pass ? "pass" : "FAIL");
      lines.push_back(nlohmann::json{{"bench", "loader/throughput servers=" + std::to_string(n)},
                                     {"samples_per_s", r.samples_per_s()},
                                     {"scaling_vs_1", scaling},
                                     {"ideal_scaling_vs_1", std::min(static_cast<double>(n), im.t_embed / im.t_train)},
                                     {"jit_over_inline", speedup},
                                     {"ideal", ideal},
                                     {"speedup_threshold", 0.9 * ideal},
                                     {"speedup_pass", speed_pass},
                                     {"stall_fraction", r.stall()},
                                     {"p50_wait_us", bench::percentile(r.waits_us, 0.5)},
                                     {"p99_wait_us", bench::percentile(r.waits_us, 0.99)},
                                     {"max_wait_ms", r.max_wait_s * 1e3},
                                     {"stall_threshold_applies", stall_applies},
                                     {"stall_pass", stall_pass},
                                     {"pass", stall_pass && speed_pass},
                                     {"servers", n},
                                     {"depth", depth},
                                     {"capacity_over_demand", cap},
                                     {"jit_step_ms", r.step_s() * 1e3},
                                     {"inline_step_ms", inl.step_s() * 1e3},
                                     {"inline_samples_per_s", inl.samples_per_s()},
                                     {"t_train_ms", im.t_train * 1e3},
                                     {"t_embed_ms", im.t_embed * 1e3},
                                     {"steps", r.steps},
                                     {"row_us", row_us},
                                     {"requests", r.requests},
                                     {"hedges", r.hedges},
                                     {"retries", r.retries},
                                     {"resubmits", r.resubmits},
                                     {"failed_samples", r.failed}}
                          .dump());
    }
    std::printf("\n");
  }

  for (const auto& l : lines) std::printf("%s\n", l.c_str());
  std::fflush(stdout);
  for (auto& s : servers) s->stop();
  return rc;
}
