// bench_models_client: the load generator of benchmarks/models/bench_models.py. The JIT client (jit_client)
// sends one JPEG per request (a BYTES row; the files given, in turn) to one KServe v2 endpoint: jitembed-server,
// a Triton server or the benchmark's Ray Serve deployment, so every server arm is driven by the same client
// with the same bytes on the wire. Closed loop: --concurrency requests in flight, each completion submits the next.
//
//   bench_models_client --endpoint URL --model NAME --input NAME --image FILE [--image FILE ...]
//       [--concurrency C] [--seconds S] [--warmup-s W] [--min-batches B] [--identity] [--timeout-ms T]
//
// Warm-up: at least W seconds and B x C completions (a dynamic batcher's first batches are partial). Then the
// requests started after the warm-up are measured until S seconds have passed and at least B x C of them
// completed. Throughput is C / mean latency (Little's law for a closed loop: C always in flight), which a
// batcher's quantised completions (C images at once every batch) do not distort the way a count in a short
// window does; the count per second of the window is reported beside it. One JSON line on stdout.
// --identity: supply a fixed model identity (a Triton or Ray endpoint publishes none); hedging is off and a
// request is not retried, so every image is sent once.
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "bench_proc.hpp"
#include "bench_util.hpp"
#include "jitembed/client/jit_client.hpp"

namespace {

using namespace jitembed;
using clock_type = std::chrono::steady_clock;

double process_cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct sample {
  double start_s, latency_ms;
};

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint, model, input = "image";
  std::vector<std::string> image_files;
  int concurrency = 1, io_threads = 1;
  double seconds = 3, warmup_s = 1;
  long timeout_ms = 120000;
  bool fixed_identity = false;
  int min_batches = 2;
  bench::command_line cli{
      "bench_models_client: closed-loop JPEG requests through jit_client to one KServe v2 endpoint"};
  cli.app.add_option("--endpoint", endpoint, "http://host:port (required)");
  cli.app.add_option("--model", model, "model name (required)");
  cli.app.add_option("--input", input, "input tensor name")->capture_default_str();
  cli.app.add_option("--image", image_files, "JPEG file (required; repeatable; sent in turn)");
  cli.app.add_option("--concurrency", concurrency, "requests in flight")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cli.app.add_option("--seconds", seconds, "measured seconds (at least)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cli.app.add_option("--warmup-s", warmup_s, "warm-up seconds (at least)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cli.app.add_option("--timeout-ms", timeout_ms, "request deadline")
      ->check(CLI::Range(1L, 3600000L))
      ->capture_default_str();
  cli.app.add_option("--io-threads", io_threads, "jit_client I/O threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cli.app.add_option("--min-batches", min_batches, "warm-up and measure at least this many x C completions")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cli.app.add_flag("--identity", fixed_identity, "supply a fixed model identity (Triton, Ray: no published one)");
  CLI11_PARSE(cli.app, argc, argv);
  // checked after parsing, so that an unknown flag is what a wrong command line is told first
  if (endpoint.empty() || model.empty() || image_files.empty())
    return std::fprintf(stderr, "bench_models_client: --endpoint, --model and --image are required (--help)\n"), 2;

  std::vector<std::string> images;
  for (const auto& f : image_files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) return std::fprintf(stderr, "bench_models_client: cannot read %s\n", f.c_str()), 2;
    images.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  client::client_options co;
  co.endpoints.list = {endpoint};
  co.io_threads = io_threads;
  co.request_timeout = std::chrono::milliseconds(timeout_ms);
  co.hedge.enabled = false;
  co.retry.max_attempts = 1;
  if (fixed_identity) co.identities[model] = client::model_identity{"bench", "bench", input};
  auto cl = client::jit_client::create(std::move(co));
  if (!cl) return std::fprintf(stderr, "bench_models_client: jit_client::create: %s\n", cl.error().message.c_str()), 1;

  std::mutex mu;
  std::condition_variable cv;
  std::vector<sample> measured;
  std::uint64_t completed = 0, failed = 0, next_image = 0;
  std::string first_error, out_shape;
  int live = concurrency;
  bool stopping = false;
  double measure_from = 1e300;  // seconds since t0: requests started at or after it are measured
  const auto t0 = clock_type::now();
  const auto now_s = [&] { return std::chrono::duration<double>(clock_type::now() - t0).count(); };

  std::function<void()> submit = [&] {
    client::embed_request r;
    r.model = model;
    r.input = input;
    {
      std::lock_guard lk(mu);
      r.rows = {as_bytes_view(images[next_image++ % images.size()])};
    }
    const double started = now_s();
    cl->embed(std::move(r), [&, started](result<client::embed_result> res) {
      const double done = now_s();
      std::unique_lock lk(mu);
      ++completed;
      if (!res || !res->row_errors.empty()) {
        if (failed++ == 0) first_error = !res ? res.error().message : res->row_errors.front().message;
      } else {
        if (out_shape.empty() && !res->outputs.empty()) {
          for (auto d : res->outputs.front().second.shape())
            out_shape += (out_shape.empty() ? "" : "x") + std::to_string(d);
        }
        if (started >= measure_from) measured.push_back({started, 1e3 * (done - started)});
      }
      if (stopping) {
        if (--live == 0) cv.notify_all();
        return;
      }
      cv.notify_all();
      lk.unlock();
      submit();
    });
  };
  for (int i = 0; i < concurrency; ++i) submit();

  const auto wait_until = [&](auto pred, double limit_s) {
    std::unique_lock lk(mu);
    cv.wait_for(lk, std::chrono::duration<double>(limit_s), [&] { return pred() || failed > 0; });
  };
  const auto c2 = static_cast<std::uint64_t>(min_batches) * static_cast<std::uint64_t>(concurrency);
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup_s));
  wait_until([&] { return completed >= c2; }, 600);
  double cpu0 = 0, t_measure = 0;
  {
    std::lock_guard lk(mu);
    measure_from = t_measure = now_s();
    cpu0 = process_cpu_s();
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  wait_until([&] { return measured.size() >= c2; }, std::max(60.0, 4 * seconds));
  double window_s = 0, cpu_s = 0;
  std::vector<sample> got;
  std::uint64_t total = 0, nfailed = 0;
  {
    std::unique_lock lk(mu);
    stopping = true;
    window_s = now_s() - t_measure;
    cpu_s = process_cpu_s() - cpu0;
    got = measured;
    total = completed;
    nfailed = failed;
    cv.wait_for(lk, std::chrono::seconds(600), [&] { return live == 0; });
  }
  std::vector<double> lat;
  for (const auto& s : got) lat.push_back(s.latency_ms);
  const double mean_ms =
      lat.empty() ? 0 : std::accumulate(lat.begin(), lat.end(), 0.0) / static_cast<double>(lat.size());
  const nlohmann::json j = {{"endpoint", endpoint},
                            {"model", model},
                            {"concurrency", concurrency},
                            {"images_per_s", mean_ms > 0 ? 1e3 * concurrency / mean_ms : 0.0},
                            {"completed_per_s", window_s > 0 ? static_cast<double>(lat.size()) / window_s : 0.0},
                            {"p50_ms", bench::percentile(lat, 0.50)},
                            {"p99_ms", bench::percentile(lat, 0.99)},
                            {"mean_ms", mean_ms},
                            {"measured", lat.size()},
                            {"completed_total", total},
                            {"failed", nfailed},
                            {"first_error", first_error},
                            {"output_shape", out_shape},
                            {"window_s", window_s},
                            {"client_cpu_s", cpu_s}};
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  cl->close();
  return nfailed == 0 && !lat.empty() ? 0 : 1;
}
