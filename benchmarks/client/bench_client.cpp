// bench_client: the JIT client's request rate against ONE jitembed-server process next to perf_analyzer's
// against the same server, same request (text-embed D=8 L=8, one 1-byte text row, every output, binary
// tensors), at concurrency 1 and 32. The client keeps c requests in flight in a closed loop (each callback
// resubmits); perf_analyzer runs with --concurrency-range c. Both are driven in alternation in one run
// (`rounds` times, alternating which goes first, best of each kept). Target: client >= 0.9x perf_analyzer at each concurrency.
//
//   bench_client [--server PATH] [--perf-analyzer PATH] [--seconds S] [--rounds R] [--io-threads N]
#include <sys/resource.h>

#include <condition_variable>
#include <mutex>

#include "bench_util.hpp"
#include "bench_proc.hpp"
#include "jitembed/client/jit_client.hpp"

namespace {

using namespace jitembed;
using bench::base64;
using bench::find_perf_analyzer;
using bench::read_csv;
using bench::child;
using bench::read_text;
using clock_type = std::chrono::steady_clock;

#ifndef JITEMBED_SERVER_PATH
#define JITEMBED_SERVER_PATH ""
#endif
#ifndef JITEMBED_VENV_DIR
#define JITEMBED_VENV_DIR ""
#endif

const std::string kModel = "text-embed";
const std::string kInput = "text";
const std::string kText = "x";

struct client_result {
  double seconds = 0;
  std::uint64_t ok = 0, failed = 0;
  double p50_us = 0, p99_us = 0;
  double cpu_s = 0;  // this process's CPU time during the window (user + system)
  std::string first_error;
  double rps() const { return seconds > 0 ? static_cast<double>(ok) / seconds : 0; }
};

double process_cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// `concurrency` requests in flight: each completion records its latency and submits the next one, for a
// 0.5 s warm-up and then `seconds` of measurement.
client_result drive_client(client::jit_client& c, int concurrency, double seconds) {
  std::atomic<int> phase{0};  // 0 warm-up, 1 measure, 2 stop
  std::mutex mu;
  std::condition_variable cv;
  int live = concurrency;
  std::vector<double> lat;
  lat.reserve(1 << 20);
  std::uint64_t failed = 0;
  std::string first_error;

  std::function<void()> submit;
  submit = [&] {
    client::embed_request r;
    r.model = kModel;
    r.input = kInput;
    r.rows = {as_bytes_view(kText)};
    const auto t0 = clock_type::now();
    c.embed(std::move(r), [&, t0](result<client::embed_result> res) {
      const auto t1 = clock_type::now();
      const int ph = phase.load(std::memory_order_acquire);
      if (ph == 1) {
        std::lock_guard lk(mu);
        if (res) lat.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        else if (failed++ == 0) first_error = res.error().message;
      }
      if (ph == 2) {
        std::lock_guard lk(mu);
        if (--live == 0) cv.notify_all();
        return;
      }
      submit();
    });
  };
  for (int i = 0; i < concurrency; ++i) submit();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double cpu0 = process_cpu_s();
  const auto t0 = clock_type::now();
  phase.store(1, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  phase.store(2, std::memory_order_release);
  const auto t1 = clock_type::now();
  const double cpu1 = process_cpu_s();
  {
    std::unique_lock lk(mu);
    cv.wait_for(lk, std::chrono::seconds(30), [&] { return live == 0; });
  }
  client_result out;
  {
    std::lock_guard lk(mu);
    out.seconds = std::chrono::duration<double>(t1 - t0).count();
    out.ok = lat.size();
    out.failed = failed;
    out.first_error = first_error;
    out.p50_us = bench::percentile(lat, 0.50);
    out.p99_us = bench::percentile(lat, 0.99);
  }
  out.cpu_s = cpu1 - cpu0;
  return out;
}

struct pa_result {
  bool ok = false;
  double rps = 0, p50_us = 0, p99_us = 0, cpu_s = 0;
  std::string error;
};

double children_cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_CHILDREN, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// perf_analyzer -i http at one concurrency: 3 windows of `seconds`/3 each (after its own warm-up); the
// reported rate is its average over those windows.
pa_result run_perf_analyzer(const bench::perf_analyzer_tool& pa, std::uint16_t port, const std::string& data_path, int concurrency, double seconds) {
  const std::string tag = "/tmp/bench_client_pa_c" + std::to_string(concurrency);
  const int window_ms = std::max(500, static_cast<int>(seconds * 1000 / 3));
  const double cpu0 = children_cpu_s();
  child p({pa.path, "-m", kModel, "-u", "127.0.0.1:" + std::to_string(port), "-i", "http", "--concurrency-range",
                  std::to_string(concurrency), "--input-data", data_path, "--input-tensor-format", "binary",
                  "--output-tensor-format", "binary", "--measurement-interval", std::to_string(window_ms), "--max-trials", "3",
                  "--stability-percentage", "999", "-f", tag + ".csv"},
                 tag + ".out", pa.env);
  const int rc = p.wait(std::chrono::seconds(60));
  pa_result r;
  r.cpu_s = children_cpu_s() - cpu0;
  if (rc != 0) {
    r.error = "perf_analyzer exit " + std::to_string(rc) + ":\n" + read_text(tag + ".out");
    return r;
  }
  for (auto& row : read_csv(tag + ".csv")) {
    if (std::atoi(row["Concurrency"].c_str()) != concurrency) continue;
    r.ok = true;
    r.rps = std::atof(row["Inferences/Second"].c_str());
    r.p50_us = std::atof(row["p50 latency"].c_str());
    r.p99_us = std::atof(row["p99 latency"].c_str());
  }
  if (!r.ok) r.error = "no concurrency " + std::to_string(concurrency) + " row in " + tag + ".csv";
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bench::install_child_reaper();
  std::string server_bin = JITEMBED_SERVER_PATH, pa_path;
  double seconds = 2;
  int rounds = 3, io_threads = 1;
  bench::command_line cli{"bench_client: jit_client against perf_analyzer on one jitembed-server"};
  cli.app.add_option("--server", server_bin, "jitembed-server to start")->capture_default_str();
  cli.app.add_option("--perf-analyzer", pa_path, "perf_analyzer binary (default: found on PATH / by install-deps)");
  cli.app.add_option("--seconds", seconds, "seconds per measurement")->check(CLI::PositiveNumber)->capture_default_str();
  cli.app.add_option("--rounds", rounds, "alternating rounds per load generator")->check(CLI::Range(1, 1000))->capture_default_str();
  cli.app.add_option("--io-threads", io_threads, "jit_client I/O threads")->check(CLI::Range(1, 64))->capture_default_str();
  CLI11_PARSE(cli.app, argc, argv);
  if (server_bin.empty() || ::access(server_bin.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "bench_client: jitembed-server not found ('%s'); pass --server PATH\n", server_bin.c_str());
    return 2;
  }
  const auto pa = find_perf_analyzer(pa_path);
  if (!pa) {
    std::fprintf(stderr, "bench_client: perf_analyzer not found (scripts/install-deps.sh, or --perf-analyzer PATH)\n");
    return 2;
  }

  // One server for both load generators: text-embed shrunk to D = 8, L = 8 (a few µs of model time),
  // sleep_us 0, no batching delay.
  bench::server_process s(server_bin, {"--model", "text-embed:text_dim=8,text_max_length=8,sleep_us=0", "--max-queue-delay-us", "0"},
                          "/tmp/bench_client_server.log");
  if (!s.ready()) return 1;

  const std::string data_path = "/tmp/bench_client_pa_text.json";
  {
    std::ofstream f(data_path);
    // perf_analyzer's "b64" is the tensor's serialized bytes: uint32-LE length + the text.
    std::string element(4, '\0');
    const auto n = static_cast<std::uint32_t>(kText.size());
    for (int b = 0; b < 4; ++b) element[static_cast<std::size_t>(b)] = static_cast<char>((n >> (8 * b)) & 0xff);
    element += kText;
    nlohmann::json item, doc;
    item[kInput]["b64"] = base64(element);
    item[kInput]["shape"] = {1};
    doc["data"] = nlohmann::json::array({item});
    f << doc.dump();
  }

  client::client_options co;
  co.endpoints.list = {s.url()};
  co.io_threads = io_threads;
  auto cl = client::jit_client::create(std::move(co));
  if (!cl) {
    std::fprintf(stderr, "bench_client: jit_client::create: %s\n", cl.error().message.c_str());
    return 1;
  }
  {  // one request first: the answer must be every output of the model
    client::embed_request r;
    r.model = kModel;
    r.input = kInput;
    r.rows = {as_bytes_view(kText)};
    auto res = cl->embed(std::move(r)).get();
    if (!res) {
      std::fprintf(stderr, "bench_client: first request failed: %s\n", res.error().message.c_str());
      return 1;
    }
  }

  int rc = 0;
  std::printf("%-28s %12s %12s %8s %9s %10s %10s %12s %12s %s\n", "jit_client vs perf_analyzer", "client req/s", "pa req/s",
              "ratio", "threshold", "client p50", "pa p50", "client cpu/s", "pa cpu/s", "result");
  std::vector<std::string> lines;
  for (const int c : {1, 32}) {
    client_result best_c;
    pa_result best_p;
    for (int r = 0; r < rounds; ++r) {
      // Alternate which goes first, so that drift (other load on a shared machine) hits both alike.
      client_result a;
      pa_result b;
      if (r % 2 == 0) {
        a = drive_client(*cl, c, seconds);
        b = run_perf_analyzer(*pa, s.port(), data_path, c, seconds);
      } else {
        b = run_perf_analyzer(*pa, s.port(), data_path, c, seconds);
        a = drive_client(*cl, c, seconds);
      }
      if (a.failed) std::fprintf(stderr, "client c=%d: %llu failed, first: %s\n", c, static_cast<unsigned long long>(a.failed), a.first_error.c_str()), rc = 1;
      if (!b.ok) std::fprintf(stderr, "perf_analyzer c=%d: %s\n", c, b.error.c_str()), rc = 1;
      if (a.rps() > best_c.rps()) best_c = a;
      if (b.ok && b.rps > best_p.rps) best_p = b;
    }
    const double ratio = best_p.rps > 0 ? best_c.rps() / best_p.rps : 0;
    const bool pass = best_p.ok && ratio >= 0.9;
    // CPU seconds per second of measurement: the client's process vs perf_analyzer's (children's) time.
    const double c_cpu = best_c.seconds > 0 ? best_c.cpu_s / best_c.seconds : 0;
    const double p_cpu = best_p.cpu_s / seconds;
    std::printf("%-28s %12.0f %12.0f %8.3f %9s %10.1f %10.1f %12.2f %12.2f %s\n",
                ("text-embed 1B c=" + std::to_string(c)).c_str(), best_c.rps(), best_p.rps, ratio, ">= 0.9", best_c.p50_us,
                best_p.p50_us, c_cpu, p_cpu, pass ? "pass" : "FAIL");
    const nlohmann::json j = {{"bench", "client/jit_client vs perf_analyzer text-embed 1B c=" + std::to_string(c)},
                              {"ratio", ratio},
                              {"threshold", 0.9},
                              {"pass", pass},
                              {"concurrency", c},
                              {"client_req_per_s", best_c.rps()},
                              {"pa_req_per_s", best_p.rps},
                              {"client_p50_us", best_c.p50_us},
                              {"client_p99_us", best_c.p99_us},
                              {"pa_p50_us", best_p.p50_us},
                              {"pa_p99_us", best_p.p99_us},
                              {"client_requests", best_c.ok},
                              {"client_failed", best_c.failed},
                              {"client_cpu_s_per_s", c_cpu},
                              {"pa_cpu_s_per_s_incl_warmup", p_cpu},
                              {"client_io_threads", io_threads},
                              {"model", "text-embed D=8 L=8 sleep_us=0"},
                              {"rounds", rounds},
                              {"seconds", seconds}};
    lines.push_back(j.dump());
  }
  const auto st = cl->stats();
  std::printf("\nclient stats: attempts %llu retries %llu hedges %llu connections %llu\n\n",
              static_cast<unsigned long long>(st.attempts), static_cast<unsigned long long>(st.retries),
              static_cast<unsigned long long>(st.hedges),
              static_cast<unsigned long long>(st.endpoints.empty() ? 0 : st.endpoints[0].connections_opened));
  for (const auto& l : lines) std::printf("%s\n", l.c_str());
  std::fflush(stdout);
  cl->close();
  s.stop();
  return rc;
}
