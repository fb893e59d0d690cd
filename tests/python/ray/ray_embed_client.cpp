// The C++ JIT client as a program, for the Ray tests and benchmarks/python/bench_ray.py: embeds text samples
// through the endpoints it is given (a list, or an endpoints URL it follows), and prints what it got.
//   --samples N: sample i is the text "sample-<i>"; one JSON line per sample to --out
//     {"i": i, "version": V, "digest": "<fnv-1a 64 of every output's bytes, in order>"}
//   --duration-s D: closed loop for D seconds instead (benchmark), same rows every request
//   --until-endpoints K: with --samples N, stop starting samples once K endpoints have each answered 10
//     requests (N is then a cap; the summary's "samples" says how many ran). For the autoscaler test: the
//     run lasts until the new replica is used, however long its start takes on a loaded machine.
// Last line on stdout: a JSON summary {"samples", "requests", "failed", "retries", "req_per_s", "p50_ms", "p99_ms",
// "endpoints": {url: answered requests}, "errors": [first messages]}.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/codec/jpeg.hpp"
#include "jitembed/client/jit_client.hpp"

namespace {

using namespace jitembed;
using clock_type = std::chrono::steady_clock;

std::string digest(const client::embed_result& r, std::size_t row, std::size_t rows) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& [name, t] : r.outputs) {
    const auto per_row = t.nbytes() / rows;
    const auto* p = reinterpret_cast<const unsigned char*>(t.data()) + row * per_row;
    for (std::size_t i = 0; i < per_row; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

int usage() {
  std::fprintf(stderr,
               "ray_embed_client (--endpoints-url URL | --endpoints URL[,URL...]) [--model text-embed] [--input text] [--jpeg-size S]\n"
               "  (--samples N --out FILE | --duration-s D) [--rows-per-request R] [--concurrency C] [--timeout-ms T]\n"
               "  [--refresh-ms 250] [--until-endpoints K]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string url, list, model = "text-embed", input = "text", out_path;
  std::size_t samples = 0, rows_per_request = 4, concurrency = 8, until_endpoints = 0, jpeg_size = 0;
  double duration_s = 0;
  long timeout_ms = 60000, refresh_ms = 250;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--endpoints-url") url = next();
    else if (a == "--endpoints") list = next();
    else if (a == "--model") model = next();
    else if (a == "--input") input = next();
    else if (a == "--out") out_path = next();
    else if (a == "--samples") samples = std::stoul(next());
    else if (a == "--rows-per-request") rows_per_request = std::max<std::size_t>(1, std::stoul(next()));
    else if (a == "--concurrency") concurrency = std::max<std::size_t>(1, std::stoul(next()));
    else if (a == "--duration-s") duration_s = std::stod(next());
    else if (a == "--timeout-ms") timeout_ms = std::stol(next());
    else if (a == "--refresh-ms") refresh_ms = std::stol(next());
    else if (a == "--until-endpoints") until_endpoints = std::stoul(next());
    else if (a == "--jpeg-size") jpeg_size = std::stoul(next());
    else return usage();
  }
  if ((url.empty() == list.empty()) || (samples == 0) == (duration_s <= 0) || (samples && out_path.empty()) ||
      (until_endpoints && !samples))
    return usage();

  client::client_options o;
  if (!url.empty()) o.endpoints.url = url;
  for (std::size_t p = 0; !list.empty();) {
    const auto c = list.find(',', p);
    o.endpoints.list.push_back(list.substr(p, c == std::string::npos ? std::string::npos : c - p));
    if (c == std::string::npos) break;
    p = c + 1;
  }
  o.endpoints.refresh = std::chrono::milliseconds(refresh_ms);
  o.request_timeout = std::chrono::milliseconds(timeout_ms);
  o.retry.max_attempts = 20;  // a killed replica: retried on the others, within the deadline
  o.retry.budget_min_per_s = 1000;
  o.hedge.enabled = false;    // one attempt per request unless it fails (counts stay exact)
  auto made = client::jit_client::create(o);
  if (!made) {
    std::fprintf(stderr, "ray_embed_client: %s\n", made.error().message.c_str());
    return 1;
  }
  auto& c = *made;

  std::recursive_mutex mu;  // launch() runs under it, and a callback may run inside embed() (an immediate failure)
  std::condition_variable_any cv;
  std::size_t in_flight = 0, next_sample = 0, requests = 0, failed = 0;
  std::map<std::string, std::size_t> per_endpoint;
  std::vector<std::string> errors;
  std::vector<double> latencies_ms;
  std::vector<nlohmann::json> lines;
  const auto start = clock_type::now();
  const auto end = start + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(duration_s));
  std::vector<std::string> bench_rows;
  // Row i: the text "sample-<i>", or with --jpeg-size S an S x S JPEG whose pixels depend on i (image models).
  const auto row = [&](const std::string& prefix, std::size_t i) -> std::string {
    if (!jpeg_size) return prefix + std::to_string(i);
    const auto s = static_cast<std::int64_t>(jpeg_size);
    tensor img = tensor::empty(shape{s, s, 3}, dtype::u8);
    auto* p = static_cast<std::uint8_t*>(img.data());
    for (std::int64_t k = 0; k < s * s * 3; ++k) p[k] = static_cast<std::uint8_t>((i * 37 + static_cast<std::size_t>(k) * 7 + (prefix.size() * 11)) & 255);
    auto b = codec::encode_jpeg(img, {}).value();
    return {reinterpret_cast<const char*>(b.data()), b.size()};
  };
  for (std::size_t i = 0; i < rows_per_request; ++i) bench_rows.push_back(row("bench-row-", i));

  constexpr std::size_t kUsedAfter = 10;  // answered requests that make an endpoint count for --until-endpoints
  const auto enough_endpoints = [&] {  // under mu
    if (!until_endpoints) return false;
    return static_cast<std::size_t>(std::count_if(per_endpoint.begin(), per_endpoint.end(),
                                                  [&](const auto& e) { return e.second >= kUsedAfter; })) >= until_endpoints;
  };

  // One request in flight per slot; each completion starts the next (closed loop).
  std::function<void()> launch;
  launch = [&] {
    // under mu
    std::vector<std::string> texts;
    std::size_t first = 0;
    if (samples) {
      if (next_sample >= samples || enough_endpoints()) return;
      first = next_sample;
      for (std::size_t i = first; i < std::min(samples, first + rows_per_request); ++i) texts.push_back(row("sample-", i));
      next_sample += texts.size();
    } else {
      if (clock_type::now() >= end) return;
      texts = bench_rows;
    }
    auto owned = std::make_shared<std::vector<std::string>>(std::move(texts));
    client::embed_request req;
    req.model = model;
    req.input = input;
    for (const auto& t : *owned) req.rows.emplace_back(reinterpret_cast<const std::byte*>(t.data()), t.size());
    ++in_flight;
    const auto t0 = clock_type::now();
    c.embed(std::move(req), [&, owned, first, t0](result<client::embed_result> r) {
      const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
      std::lock_guard lock(mu);
      ++requests;
      if (!r) {
        ++failed;
        if (errors.size() < 5) errors.push_back(std::string(to_string(r.code())) + ": " + r.error().message);
      } else {
        latencies_ms.push_back(ms);
        ++per_endpoint[r->endpoint];
        if (samples)
          for (std::size_t k = 0; k < owned->size(); ++k)
            lines.push_back({{"i", first + k}, {"version", r->model_version}, {"digest", digest(*r, k, owned->size())}, {"ok", r->row_ok(k)}});
      }
      --in_flight;
      launch();
      cv.notify_all();
    });
  };
  {
    std::unique_lock lock(mu);
    for (std::size_t k = 0; k < concurrency; ++k) launch();
    cv.wait(lock, [&] { return in_flight == 0; });
  }
  const double elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
  const auto st = c.stats();
  if (samples) {
    std::ofstream out(out_path);
    std::sort(lines.begin(), lines.end(), [](const auto& a, const auto& b) { return a["i"] < b["i"]; });
    for (const auto& l : lines) out << l.dump() << "\n";
  }
  std::sort(latencies_ms.begin(), latencies_ms.end());
  const auto pct = [&](double q) { return latencies_ms.empty() ? 0.0 : latencies_ms[std::min(latencies_ms.size() - 1, static_cast<std::size_t>(q * latencies_ms.size()))]; };
  nlohmann::json summary{{"samples", next_sample},   {"requests", requests},   {"failed", failed},           {"retries", st.retries},
                         {"attempts", st.attempts}, {"elapsed_s", elapsed},       {"req_per_s", (requests - failed) / elapsed},
                         {"p50_ms", pct(0.50)},     {"p99_ms", pct(0.99)},        {"endpoints", per_endpoint},
                         {"errors", errors},        {"endpoint_updates", st.endpoint_updates}};
  std::printf("%s\n", summary.dump().c_str());
  return failed ? 3 : 0;
}
