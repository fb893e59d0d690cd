// bench_server: drives jitembed-server (spawned on a loopback port) with N client threads over keep-alive
// HTTP (net::http::client), KServe v2 binary requests: per-request overhead at concurrency 1, and image-latent
// throughput / p50 / p99 vs concurrency with dynamic batching on vs off; the shipped batching defaults
// against batching off, with pass/fail thresholds (part "defaults"); perf_analyzer as a second load
// generator when one is found. Table + JSON lines via bench_util.hpp.
//
//   bench_server [--server PATH] [--perf-analyzer PATH] [--seconds S] [--rounds R]
//                [parts: overhead image defaults perf_analyzer]
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_proc.hpp"
#include "bench_util.hpp"
#include "jitembed/codec/jpeg.hpp"
#include "jitembed/net/http/client.hpp"
#include "jitembed/net/kserve.hpp"

extern char** environ;

namespace {

using namespace jitembed;
using namespace jitembed::bench;
namespace http = jitembed::net::http;
namespace kserve = jitembed::net::kserve;
using clock_type = std::chrono::steady_clock;

#ifndef JITEMBED_SERVER_PATH
#define JITEMBED_SERVER_PATH ""
#endif
#ifndef JITEMBED_VENV_DIR
#define JITEMBED_VENV_DIR ""
#endif

// One pre-encoded KServe v2 binary request (body + headers), reused by every client thread.
struct prepared_request {
  std::string target;
  http::header_list headers;
  std::string body;
};

prepared_request make_request(const std::string& model, const std::string& input, std::string_view element,
                              const std::string& output) {
  kserve::infer_request r;
  r.model = model;
  r.inputs.push_back(kserve::infer_tensor::from_strings(input, {1, 1}, {element}, true));
  r.outputs.push_back(kserve::requested_output{output, true, {}});
  auto m = kserve::encode_request(r).value();
  prepared_request p;
  p.target = "/v2/models/" + model + "/infer";
  p.body = m.flatten();
  p.headers.emplace_back("Content-Type", "application/octet-stream");
  if (m.header_length) p.headers.emplace_back("Inference-Header-Content-Length", std::to_string(*m.header_length));
  return p;
}

struct load_result {
  double seconds = 0;
  std::size_t ok = 0, failed = 0;
  double p50_us = 0, p99_us = 0, mean_us = 0;
  std::string first_error;
  double rps() const { return seconds > 0 ? static_cast<double>(ok) / seconds : 0; }
};

// `concurrency` threads, each with its own keep-alive connection, send `req` back to back for `seconds`
// (after a warm-up of 0.3 s whose requests are not counted).
load_result drive(std::uint16_t port, const prepared_request& req, int concurrency, double seconds) {
  std::atomic<int> phase{0};  // 0 warm-up, 1 measure, 2 stop
  std::vector<std::vector<double>> lat(static_cast<std::size_t>(concurrency));
  std::vector<std::size_t> failed(static_cast<std::size_t>(concurrency), 0);
  std::vector<std::string> errors(static_cast<std::size_t>(concurrency));
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&, t] {
      http::client_options o;
      o.pool_size = 1;
      http::client c("127.0.0.1", port, o);
      auto& my = lat[static_cast<std::size_t>(t)];
      my.reserve(1 << 16);
      while (true) {
        const int ph = phase.load(std::memory_order_relaxed);
        if (ph == 2) break;
        const auto t0 = clock_type::now();
        auto r = c.request("POST", req.target, req.headers, req.body);
        const auto t1 = clock_type::now();
        if (ph != 1 || phase.load(std::memory_order_relaxed) != 1) continue;
        if (r && r->status == 200) {
          my.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        } else {
          if (failed[static_cast<std::size_t>(t)]++ == 0)
            errors[static_cast<std::size_t>(t)] = r ? ("HTTP " + std::to_string(r->status) + " " + r->body.substr(0, 200))
                                                   : r.error().message;
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  phase = 1;
  const auto t0 = clock_type::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  phase = 2;
  const auto t1 = clock_type::now();
  for (auto& th : threads) th.join();
  load_result res;
  res.seconds = std::chrono::duration<double>(t1 - t0).count();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  for (std::size_t i = 0; i < failed.size(); ++i) {
    res.failed += failed[i];
    if (res.first_error.empty() && !errors[i].empty()) res.first_error = errors[i];
  }
  res.ok = all.size();
  double sum = 0;
  for (double x : all) sum += x;
  res.mean_us = all.empty() ? 0 : sum / static_cast<double>(all.size());
  res.p50_us = percentile(all, 0.50);
  res.p99_us = percentile(all, 0.99);
  return res;
}

// A 256x256 JPEG of a gradient with noise (quality 90, 4:2:0).
std::string make_jpeg_256() {
  const std::int64_t dims[] = {256, 256, 3};
  tensor img = tensor::empty(shape(dims), dtype::u8);
  auto* p = img.data<std::uint8_t>();
  std::uint32_t s = 12345;
  for (int y = 0; y < 256; ++y)
    for (int x = 0; x < 256; ++x) {
      s ^= s << 13, s ^= s >> 17, s ^= s << 5;
      const int n = static_cast<int>(s % 24u) - 12;
      p[(y * 256 + x) * 3 + 0] = static_cast<std::uint8_t>(std::clamp(x + n, 0, 255));
      p[(y * 256 + x) * 3 + 1] = static_cast<std::uint8_t>(std::clamp(y - n, 0, 255));
      p[(y * 256 + x) * 3 + 2] = static_cast<std::uint8_t>((x * 3 + y * 5) & 255);
    }
  auto jpg = codec::encode_jpeg(img, codec::jpeg_encode_options{}).value();
  return std::string(reinterpret_cast<const char*>(jpg.data()), jpg.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::string server_bin = JITEMBED_SERVER_PATH, pa_path;
  double seconds = 2.5;
  int rounds = 6;  // part "defaults": alternating on/off slices per concurrency
  bench::command_line cli{"bench_server: jitembed-server over loopback (per-request overhead, images, batching on/off, perf_analyzer)",
                          {"overhead", "image", "defaults", "perf_analyzer"}};
  cli.app.add_option("--server", server_bin, "jitembed-server to start")->capture_default_str();
  cli.app.add_option("--perf-analyzer", pa_path, "perf_analyzer binary (default: found on PATH / by install-deps)");
  cli.app.add_option("--seconds", seconds, "seconds per measurement")->check(CLI::PositiveNumber)->capture_default_str();
  cli.app.add_option("--rounds", rounds, "alternating on/off slices per concurrency (part defaults)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  CLI11_PARSE(cli.app, argc, argv);
  if (server_bin.empty() || ::access(server_bin.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "bench_server: jitembed-server not found ('%s'); pass --server PATH\n", server_bin.c_str());
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  bench::reporter rep;
  int rc = 0;

  // 1. Per-request overhead: concurrency 1, no batching delay. There is no no-op model: text-embed shrunk
  //    to D = 8, L = 8 with a 1-character text and only the pooled output stands in (a few µs of model time).
  if (cli.wanted("overhead")) {
    server_process s(server_bin, {"--model", "text-embed:text_dim=8,text_max_length=8", "--max-queue-delay-us", "0"},
                     "/tmp/bench_server_overhead.log");
    if (!s.ready()) return 1;
    const auto req = make_request("text-embed", "text", "x", "pooled");
    const auto r = drive(s.port(), req, 1, seconds);
    const nlohmann::json extra = {{"model", "text-embed D=8 L=8"}, {"text_bytes", 1}, {"concurrency", 1}, {"requests", r.ok},
                                  {"failed", r.failed}, {"p99_us", r.p99_us}, {"target_max_us", 150},
                                  {"meets_target", r.p50_us <= 150.0}};
    rep.add("server/overhead text-embed 1B c=1", "p50_us", r.p50_us, "us", extra);
    rep.add("server/overhead text-embed 1B c=1", "req_per_s", r.rps(), "req/s", {{"p99_us", r.p99_us}});
    if (r.failed) std::fprintf(stderr, "overhead: %zu failed requests, first: %s\n", r.failed, r.first_error.c_str()), rc = 1;
    s.stop();
  }

  // 2. image-latent on 256-px JPEGs, dynamic batching on (max_batch 32, delay 2 ms) vs off (max_batch 1).
  const std::string jpeg = make_jpeg_256();
  const std::vector<int> levels = {1, 8, 32};
  struct mode {
    const char* name;
    std::vector<std::string> args;
  };
  const std::vector<mode> modes = {
      {"batching_on", {"--model", "image-latent", "--max-batch", "32", "--max-queue-delay-us", "2000"}},
      {"batching_off", {"--model", "image-latent", "--max-batch", "1", "--max-queue-delay-us", "0"}}};
  std::map<std::string, std::map<int, load_result>> image;
  if (cli.wanted("image")) {
    const auto req = make_request("image-latent", "image", jpeg, "latent");
    for (const auto& m : modes) {
      server_process s(server_bin, m.args, std::string("/tmp/bench_server_") + m.name + ".log");
      if (!s.ready()) return 1;
      for (int c : levels) {
        const auto r = drive(s.port(), req, c, seconds);
        image[m.name][c] = r;
        rep.add(std::string("server/image-latent 256px ") + m.name + " c=" + std::to_string(c), "req_per_s", r.rps(),
                "req/s", {{"p50_us", r.p50_us}, {"p99_us", r.p99_us}, {"requests", r.ok}, {"failed", r.failed},
                          {"jpeg_bytes", jpeg.size()}});
        if (r.failed) std::fprintf(stderr, "%s c=%d: %zu failed, first: %s\n", m.name, c, r.failed, r.first_error.c_str()), rc = 1;
      }
      s.stop();
    }
    for (int c : levels) {
      const double off = image["batching_off"][c].rps();
      const double ratio = off > 0 ? image["batching_on"][c].rps() / off : 0;
      rep.add("server/image-latent batching on/off c=" + std::to_string(c), "ratio", ratio, "x", {{"concurrency", c}},
              c == 32 ? 4.0 : 0.0);
    }
  }

  // 3. The shipped defaults (no batcher flags: the model's max batch, max_queue_delay_us 1000, idle
  //    dispatch) against batching off (max batch 1, no delay). Both servers are up at once and driven in
  //    short alternating slices (the order flips every round); each round gives one on/off ratio and the
  //    median ratio is reported, so drift on the shared machine hits both alike. Batching must never
  //    hurt: median on/off >= 0.9 at concurrency 1 and >= 1.0 at 32.
  if (cli.wanted("defaults")) {
    const auto req = make_request("image-latent", "image", jpeg, "latent");
    server_process on(server_bin, {"--model", "image-latent"}, "/tmp/bench_server_defaults_on.log");
    server_process off(server_bin, {"--model", "image-latent", "--max-batch", "1", "--max-queue-delay-us", "0"},
                       "/tmp/bench_server_defaults_off.log");
    if (!on.ready() || !off.ready()) return 1;
    struct level {
      int concurrency;
      double threshold;
    };
    const int slices = std::max(3, rounds);
    const double slice_s = std::max(0.5, seconds / 2);
    const auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      const std::size_t n = v.size();
      return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
    };
    std::printf("%-30s %10s %10s %8s %17s %10s %8s %s\n", "defaults vs batching off", "on req/s", "off req/s", "ratio",
                "ratio range", "cpu ratio", "threshold", "result");
    std::vector<std::string> lines;
    // Rows and batches the batching server has run so far (its Triton statistics).
    const auto counts = [&]() -> std::pair<double, double> {
      http::client c("127.0.0.1", on.port(), http::client_options{});
      auto r = c.get("/v2/models/image-latent/stats");
      if (!r || r->status != 200) return {0, 0};
      const auto j = nlohmann::json::parse(r->body, nullptr, false);
      if (j.is_discarded()) return {0, 0};
      const auto& m = j["model_stats"][0];
      return {m["inference_count"].get<double>(), m["execution_count"].get<double>()};
    };
    for (const level lv : {level{1, 0.9}, level{32, 1.0}}) {
      const auto before = counts();
      std::vector<double> ratios, on_rps, off_rps, on_p50, off_p50, on_p99, off_p99, on_cpu, off_cpu;
      // Server CPU per request (warm-up included on both sides): less sensitive to other load than req/s.
      const auto measured = [&](server_process& s, std::vector<double>& cpu) {
        const double c0 = s.cpu_seconds();
        auto res = drive(s.port(), req, lv.concurrency, slice_s);
        const double used = s.cpu_seconds() - c0;
        if (res.ok) cpu.push_back(used * 1e6 / static_cast<double>(res.ok));
        return res;
      };
      for (int r = 0; r < slices; ++r) {
        load_result a, b;
        if (r % 2 == 0) {
          a = measured(on, on_cpu);
          b = measured(off, off_cpu);
        } else {
          b = measured(off, off_cpu);
          a = measured(on, on_cpu);
        }
        if (a.failed || b.failed)
          std::fprintf(stderr, "defaults c=%d: %zu / %zu failed, first: %s\n", lv.concurrency, a.failed, b.failed,
                       (a.first_error.empty() ? b.first_error : a.first_error).c_str()), rc = 1;
        if (b.rps() > 0) ratios.push_back(a.rps() / b.rps());
        on_rps.push_back(a.rps()), off_rps.push_back(b.rps());
        on_p50.push_back(a.p50_us), off_p50.push_back(b.p50_us);
        on_p99.push_back(a.p99_us), off_p99.push_back(b.p99_us);
      }
      const auto after = counts();
      const double mean_batch = after.second > before.second ? (after.first - before.first) / (after.second - before.second) : 0;
      const double ratio = median(ratios);
      const bool pass = ratio >= lv.threshold;
      const double lo = ratios.empty() ? 0 : *std::min_element(ratios.begin(), ratios.end());
      const double hi = ratios.empty() ? 0 : *std::max_element(ratios.begin(), ratios.end());
      char range[64];
      std::snprintf(range, sizeof range, "%.2f..%.2f", lo, hi);
      char thr[16];
      std::snprintf(thr, sizeof thr, ">= %.1f", lv.threshold);
      // Server CPU per request off/on: > 1 when batching costs less CPU per request. Less sensitive to other
      // load on the machine than req/s (what saturated throughput follows), reported beside the verdict.
      const double cpu_ratio = median(on_cpu) > 0 ? median(off_cpu) / median(on_cpu) : 0;
      std::printf("%-30s %10.1f %10.1f %8.3f %17s %10.3f %8s %s\n", ("image-latent 256px c=" + std::to_string(lv.concurrency)).c_str(),
                  median(on_rps), median(off_rps), ratio, range, cpu_ratio, thr, pass ? "pass" : "FAIL");
      const nlohmann::json j = {{"bench", "server/defaults image-latent 256px on/off c=" + std::to_string(lv.concurrency)},
                                {"ratio", ratio},
                                {"threshold", lv.threshold},
                                {"pass", pass},
                                {"ratio_min", lo},
                                {"ratio_max", hi},
                                {"concurrency", lv.concurrency},
                                {"on_req_per_s", median(on_rps)},
                                {"off_req_per_s", median(off_rps)},
                                {"on_p50_us", median(on_p50)},
                                {"off_p50_us", median(off_p50)},
                                {"on_p99_us", median(on_p99)},
                                {"off_p99_us", median(off_p99)},
                                {"on_server_cpu_us_per_req", median(on_cpu)},
                                {"on_mean_batch", mean_batch},
                                {"cpu_ratio", cpu_ratio},
                                {"off_server_cpu_us_per_req", median(off_cpu)},
                                {"slices", slices},
                                {"slice_seconds", slice_s}};
      lines.push_back(j.dump());
    }
    std::printf("\n");
    for (const auto& l : lines) std::printf("%s\n", l.c_str());
    std::printf("\n");
    std::fflush(stdout);
    on.stop();
    off.stop();
  }

  // 4. perf_analyzer as the load generator (same servers, concurrency 1, 8, 32).
  if (cli.wanted("perf_analyzer")) {
    const auto pa = find_perf_analyzer(pa_path);
    if (!pa) {
      std::fprintf(stderr, "bench_server: perf_analyzer not found (scripts/install-deps.sh); skipping that part\n");
    } else {
      const std::string data_path = "/tmp/bench_server_pa_image.json";
      {
        std::ofstream f(data_path);
        // perf_analyzer takes "b64" as the tensor's serialized bytes: uint32-LE length + the JPEG.
        std::string element(4, '\0');
        const auto n = static_cast<std::uint32_t>(jpeg.size());
        for (int b = 0; b < 4; ++b) element[static_cast<std::size_t>(b)] = static_cast<char>((n >> (8 * b)) & 0xff);
        element += jpeg;
        nlohmann::json item, doc;
        item["image"]["b64"] = base64(element);
        doc["data"] = nlohmann::json::array({item});
        f << doc.dump();
      }
      std::map<std::string, double> at32;
      for (const auto& m : modes) {
        server_process s(server_bin, m.args, std::string("/tmp/bench_server_pa_") + m.name + ".log");
        if (!s.ready()) return 1;
        const std::string csv = std::string("/tmp/bench_server_pa_") + m.name + ".csv";
        const std::string log = std::string("/tmp/bench_server_pa_") + m.name + ".out";
        const int ms = static_cast<int>(seconds * 1000);  // perf_analyzer: 3 trials of half that each
        child p({pa->path, "-m", "image-latent", "-u", "127.0.0.1:" + std::to_string(s.port()), "-i", "http",
                 "--concurrency-range", "1:32:31", "--input-data", data_path, "--measurement-interval",
                 std::to_string(std::max(500, ms / 2)), "--max-trials", "3", "--stability-percentage", "999", "-f", csv},
                log, pa->env);
        const int prc = p.wait();
        s.stop();
        if (prc != 0) {
          std::fprintf(stderr, "perf_analyzer (%s) exit %d:\n%s\n", m.name, prc, read_text(log).c_str());
          rc = 1;
          continue;
        }
        for (auto& row : read_csv(csv)) {
          const int c = std::atoi(row["Concurrency"].c_str());
          const double ips = std::atof(row["Inferences/Second"].c_str());
          if (c == 32) at32[m.name] = ips;
          rep.add(std::string("perf_analyzer/image-latent 256px ") + m.name + " c=" + std::to_string(c), "req_per_s",
                  ips, "req/s", {{"p50_us", std::atof(row["p50 latency"].c_str())}, {"p99_us", std::atof(row["p99 latency"].c_str())}});
        }
      }
      if (at32["batching_off"] > 0)
        rep.add("perf_analyzer/image-latent batching on/off c=32", "ratio", at32["batching_on"] / at32["batching_off"], "x",
                {{"concurrency", 32}}, 4.0);
    }
  }

  rep.print();
  return rc;
}
