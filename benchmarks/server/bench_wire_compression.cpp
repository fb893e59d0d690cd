// bench_wire_compression: the wire codec (codec/zstd_wire.hpp, byte-plane shuffle + zstd level 1) on real
// encoder outputs, and the load generator of bench_wire_compression.py (jit_client with and without
// offer_compression against one server). Parts:
//   codec  --data DIR   ratio, compress GB/s and decompress GB/s per tensor kind of DIR/manifest.json
//   fetch  --url URL    samples/s of one jit_client arm (--offer 0|1) for --seconds; one JSON line
// Prints a table (codec), then one JSON object per result line.
#include "bench_util.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "jitembed/client/jit_client.hpp"
#include "jitembed/codec/zstd_wire.hpp"

namespace jb = jitembed;

namespace {

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::vector<char> v((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(v.size());
  std::memcpy(out.data(), v.data(), v.size());
  return out;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Seconds per call of fn: repeats for at least `min_s`, best of `rounds` such windows.
template <class F>
double per_call(F&& fn, double min_s = 0.15, int rounds = 3) {
  fn();
  double best = 1e300;
  for (int r = 0; r < rounds; ++r) {
    int n = 0;
    const double t0 = now_s();
    double t1 = t0;
    do {
      fn();
      ++n;
      t1 = now_s();
    } while (t1 - t0 < min_s);
    best = std::min(best, (t1 - t0) / n);
  }
  return best;
}

int run_codec(const std::string& dir, std::vector<int> frame_rows_list) {
  const auto manifest = nlohmann::json::parse(std::ifstream(dir + "/manifest.json"));
  jb::bench::reporter rep;
  std::printf("%-28s %6s %10s %8s %10s %10s %s\n", "tensor kind", "rows", "frame KiB", "ratio", "comp GB/s", "dec GB/s",
              "sent compressed (>=10% saving)");
  for (const auto& k : manifest["kinds"]) {
    const std::string name = k["name"];
    const auto data = read_file(dir + "/" + k["file"].get<std::string>());
    const std::size_t es = k["element_size"], rows = k["rows"];
    const std::size_t row_bytes = data.size() / rows;
    for (int fr_i : frame_rows_list) {
      const std::size_t fr = std::min<std::size_t>(static_cast<std::size_t>(fr_i), rows);
      const std::size_t frame = fr * row_bytes, frames = rows / fr;
      jb::codec::wire_compression_options o;  // the server's level; policy off so every frame is measured
      o.min_saving = -1.0;
      o.min_bytes = 0;
      std::vector<jb::byte_buffer> comp(frames);
      std::size_t comp_total = 0;
      for (std::size_t i = 0; i < frames; ++i) {
        auto c = jb::codec::compress_for_wire(jb::bytes_view(data.data() + i * frame, frame), es, o);
        if (!c || !*c) throw std::runtime_error("compress_for_wire failed on " + name);
        comp[i] = std::move(**c);
        comp_total += comp[i].size();
      }
      const double raw_total = static_cast<double>(frames * frame);
      const double ratio = raw_total / static_cast<double>(comp_total);
      const double tc = per_call([&] {
        for (std::size_t i = 0; i < frames; ++i)
          (void)jb::codec::compress_for_wire(jb::bytes_view(data.data() + i * frame, frame), es, o);
      });
      const double td = per_call([&] {
        for (std::size_t i = 0; i < frames; ++i) {
          auto d = jb::codec::decompress_from_wire(jb::bytes_view(comp[i].data(), comp[i].size()), frame, es,
                                                   std::uint64_t{1} << 34);
          if (!d || d->size() != frame || std::memcmp(d->data(), data.data() + i * frame, frame) != 0)
            throw std::runtime_error("round trip failed on " + name);
        }
      });
      const bool sent = ratio >= 1.0 / 0.9 && frame >= 4096;
      std::printf("%-28s %6zu %10.1f %8.3f %10.2f %10.2f %s\n", name.c_str(), fr, frame / 1024.0, ratio,
                  raw_total / tc / 1e9, raw_total / td / 1e9, sent ? "yes" : "no (travels raw)");
      rep.add("wire_compression/codec " + name + " rows=" + std::to_string(fr), "ratio", ratio, "x",
              {{"kind", name},
               {"source", k.value("source", "")},
               {"dtype", k.value("dtype", "")},
               {"frame_rows", fr},
               {"frame_bytes", frame},
               {"compress_gb_per_s", raw_total / tc / 1e9},
               {"decompress_gb_per_s", raw_total / td / 1e9},
               {"sent_compressed_by_default_policy", sent}});
    }
  }
  std::printf("\n");
  rep.print();
  return 0;
}

int run_fetch(const std::string& url, const std::string& model, const std::string& input,
              const std::vector<std::string>& row_files, int rows, bool offer, bool on_loopback, int concurrency,
              double seconds, double warmup, const std::string& label) {
  std::vector<std::vector<std::byte>> row_bytes;
  for (const auto& f : row_files) row_bytes.push_back(read_file(f));
  if (row_bytes.empty()) throw std::runtime_error("fetch: no --row-file");
  jb::client::client_options co;
  co.endpoints.list = {url};
  co.offer_compression = offer;
  co.compress_on_loopback = on_loopback;  // a loopback port that stands for a remote link (the user-space proxy)
  auto cl = jb::client::jit_client::create(std::move(co));
  if (!cl) {
    std::fprintf(stderr, "bench_wire_compression: jit_client::create: %s\n", cl.error().message.c_str());
    return 2;
  }
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> done_rows{0}, done_bytes{0}, errors{0};
  int in_flight = 0;
  std::string first_error;
  std::function<void()> issue = [&] {
    jb::client::embed_request r;
    r.model = model;
    r.input = input;
    for (int i = 0; i < rows; ++i) {
      const auto& b = row_bytes[static_cast<std::size_t>(i) % row_bytes.size()];
      r.rows.push_back(jb::bytes_view(b.data(), b.size()));
    }
    {
      std::lock_guard lk(mu);
      ++in_flight;
    }
    cl->embed(std::move(r), [&](jb::result<jb::client::embed_result> res) {
      if (res) {
        std::uint64_t b = 0;
        for (const auto& t : res->outputs) b += t.second.nbytes();
        done_rows += static_cast<std::uint64_t>(rows);
        done_bytes += b;
      } else {
        ++errors;
        std::lock_guard lk(mu);
        if (first_error.empty()) first_error = res.error().message;
      }
      bool again = !stop.load();
      {
        std::lock_guard lk(mu);
        --in_flight;
      }
      if (again) issue();
      cv.notify_all();
    });
  };
  for (int i = 0; i < concurrency; ++i) issue();
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup));
  const std::uint64_t r0 = done_rows, b0 = done_bytes;
  const double t0 = now_s();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const std::uint64_t r1 = done_rows, b1 = done_bytes;
  const double t1 = now_s();
  stop = true;
  {
    std::unique_lock lk(mu);
    cv.wait_for(lk, std::chrono::seconds(30), [&] { return in_flight == 0; });
  }
  cl->close();
  const double sps = static_cast<double>(r1 - r0) / (t1 - t0);
  const double mbps = static_cast<double>(b1 - b0) / (t1 - t0) / 1e6;
  nlohmann::json j = {{"bench", "wire_compression/fetch"}, {"label", label},
                      {"offer_compression", offer},        {"samples_per_s", sps},
                      {"output_mb_per_s", mbps},           {"rows_per_request", rows},
                      {"concurrency", concurrency},        {"errors", errors.load()}};
  if (!first_error.empty()) j["first_error"] = first_error;
  std::printf("%s\n", j.dump().c_str());
  return errors.load() && r1 == r0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  jb::bench::command_line cli{
      "bench_wire_compression: zstd_shuffle wire codec on real encoder outputs; the "
      "jit_client load generator of bench_wire_compression.py",
      {"codec", "fetch"}};
  std::string data_dir, url, model = "latents", input = "image", label;
  std::vector<std::string> row_files;
  std::vector<int> frame_rows{1, 32};
  int rows = 32, concurrency = 4, offer = 1, on_loopback = 0;
  double seconds = 3.0, warmup = 1.0;
  cli.app.add_option("--data", data_dir, "codec: directory with manifest.json and the raw tensors");
  cli.app.add_option("--frame-rows", frame_rows, "codec: rows per compressed frame (one request's output tensor)")
      ->capture_default_str();
  cli.app.add_option("--url", url, "fetch: the server's URL");
  cli.app.add_option("--model", model, "fetch: model name")->capture_default_str();
  cli.app.add_option("--input", input, "fetch: input name")->capture_default_str();
  cli.app.add_option("--row-file", row_files,
                     "fetch: files with the bytes of the rows (request row i is file i mod count)");
  cli.app.add_option("--rows", rows, "fetch: rows per request")->capture_default_str();
  cli.app.add_option("--offer", offer, "fetch: client_options.offer_compression (0 or 1)")->capture_default_str();
  cli.app
      .add_option("--compress-on-loopback", on_loopback,
                  "fetch: client_options.compress_on_loopback (0 or 1): offer also to a 127.0.0.1 URL")
      ->capture_default_str();
  cli.app.add_option("--concurrency", concurrency, "fetch: requests in flight")->capture_default_str();
  cli.app.add_option("--seconds", seconds, "fetch: measurement window")->capture_default_str();
  cli.app.add_option("--warmup", warmup, "fetch: seconds before measuring")->capture_default_str();
  cli.app.add_option("--label", label, "fetch: echoed in the JSON line");
  CLI11_PARSE(cli.app, argc, argv);
  try {
    if (cli.wanted("codec") && !data_dir.empty()) {
      if (int rc = run_codec(data_dir, frame_rows)) return rc;
    }
    if (cli.wanted("fetch") && !url.empty())
      return run_fetch(url, model, input, row_files, rows, offer != 0, on_loopback != 0, concurrency, seconds, warmup,
                       label);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_wire_compression: %s\n", e.what());
    return 2;
  }
  return 0;
}
