// jit_train_demo: what a run measured, and how it is shown — the summary table, the self-contained HTML
// report (inline SVG charts, no scripts or external files) and the one-line JSON result.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace jit_train_demo {

// One training step as rank 0 saw it.
struct step_record {
  double t_end = 0;     // seconds since the run started
  double stall_s = 0;   // waiting for the batch (jit) or computing its embeddings (inline)
  double train_s = 0;   // forward + backward + optimizer
  int epoch = 0;
  std::int64_t samples = 0;  // whole batch (every rank)
};

struct epoch_record {
  double loss = 0;               // mean squared error over the epoch's samples
  std::int64_t samples = 0;      // delivered (every rank)
  double seconds = 0;
  double stall_s = 0;            // trainer stall during the epoch
  std::uint64_t embed_requests = 0;   // requests the client sent during the epoch
  std::uint64_t cache_hits = 0, cache_lookups = 0;  // embeddings found in the cache / looked up
  double stall_fraction() const { return seconds > 0 ? stall_s / seconds : 0; }
  double cache_hit_rate() const { return cache_lookups ? static_cast<double>(cache_hits) / static_cast<double>(cache_lookups) : 0.0; }
};

struct run_record {
  std::string mode;
  int tp = 1;
  std::string data_dir;
  std::string endpoints;
  std::string models;  // the encoders: "reference models", or the repository's models and directory
  std::int64_t dataset_size = 0;
  std::int64_t batch = 0;
  std::int64_t sleep_us = 0, sleep_us_per_row = 0;
  std::size_t parameters = 0;
  double wall_s = 0, stall_s = 0, train_s = 0;
  std::int64_t samples = 0;
  std::uint64_t embed_requests = 0, retries = 0, hedges = 0;
  std::int64_t failed_samples = 0, lost_samples = 0, duplicated_samples = 0;
  std::int64_t verified_samples = 0, verify_mismatches = 0;
  std::vector<step_record> steps;
  std::vector<epoch_record> epochs;
  std::vector<std::string> notes;

  double samples_per_s() const { return wall_s > 0 ? static_cast<double>(samples) / wall_s : 0; }
  double stall_fraction() const { return wall_s > 0 ? stall_s / wall_s : 0; }
};

inline std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// The printed losses: 9 significant digits, so two runs agree only if their floats agree.
inline std::string loss_text(double v) { return fmt("%.9g", v); }

inline nlohmann::json to_json(const run_record& r) {
  nlohmann::json j;
  j["bench"] = "jit_train_demo";
  j["mode"] = r.mode;
  j["tp"] = r.tp;
  j["epochs"] = r.epochs.size();
  j["samples"] = r.samples;
  j["dataset_samples"] = r.dataset_size;
  j["batch"] = r.batch;
  j["models"] = r.models;
  j["sleep_us"] = r.sleep_us;
  j["sleep_us_per_row"] = r.sleep_us_per_row;
  j["wall_s"] = std::round(r.wall_s * 1000) / 1000;
  j["samples_per_s"] = std::round(r.samples_per_s() * 10) / 10;
  j["trainer_stall_fraction"] = std::round(r.stall_fraction() * 10000) / 10000;
  j["embed_requests"] = r.embed_requests;
  nlohmann::json hit = nlohmann::json::array(), loss = nlohmann::json::array(), req = nlohmann::json::array(),
                 sps = nlohmann::json::array(), stall = nlohmann::json::array();
  for (const auto& e : r.epochs) {
    sps.push_back(std::round(e.seconds > 0 ? static_cast<double>(e.samples) / e.seconds * 10 : 0) / 10);
    stall.push_back(std::round(e.stall_fraction() * 10000) / 10000);
    hit.push_back(std::round(e.cache_hit_rate() * 10000) / 10000);
    loss.push_back(e.loss);  // shortest round-trip text: two runs print the same only if their doubles agree
    req.push_back(e.embed_requests);
  }
  j["cache_hit_rate_epoch"] = hit;
  j["embed_requests_epoch"] = req;
  j["samples_per_s_epoch"] = sps;
  j["trainer_stall_fraction_epoch"] = stall;
  j["retries"] = r.retries;
  j["hedges"] = r.hedges;
  j["failed_samples"] = r.failed_samples;
  j["lost_samples"] = r.lost_samples;
  j["duplicated_samples"] = r.duplicated_samples;
  j["verified_samples"] = r.verified_samples;
  j["verify_mismatches"] = r.verify_mismatches;
  j["loss_epoch"] = loss;
  return j;
}

inline std::string summary_table(const run_record& r) {
  std::ostringstream o;
  o << "\njit_train_demo: mode " << r.mode << ", tp " << r.tp << ", " << r.dataset_size << " samples, batch " << r.batch
    << ", " << (r.models.empty() ? "reference models" : r.models) << ", emulated encoder " << r.sleep_us << " us/batch + "
    << r.sleep_us_per_row << " us/row, " << r.parameters << " parameters per rank\n";
  o << "  epoch   loss            samples   seconds   samples/s   stall   requests   cache hit\n";
  for (std::size_t e = 0; e < r.epochs.size(); ++e) {
    const auto& ep = r.epochs[e];
    char line[200];
    std::snprintf(line, sizeof line, "  %-5zu   %-13s   %7lld   %7.2f   %9.1f   %4.1f%%   %8llu   %8.1f%%\n", e + 1,
                  loss_text(ep.loss).c_str(), static_cast<long long>(ep.samples), ep.seconds,
                  ep.seconds > 0 ? static_cast<double>(ep.samples) / ep.seconds : 0.0, 100 * ep.stall_fraction(),
                  static_cast<unsigned long long>(ep.embed_requests), 100 * ep.cache_hit_rate());
    o << line;
  }
  char line[400];
  std::snprintf(line, sizeof line,
                "  total: %lld samples in %.2f s = %.1f samples/s; trainer stalled %.1f%% (%.2f s), trained %.2f s\n"
                "  requests %llu, retries %llu, failed %lld, lost %lld, duplicated %lld, verified %lld (mismatches %lld)\n",
                static_cast<long long>(r.samples), r.wall_s, r.samples_per_s(), 100 * r.stall_fraction(), r.stall_s, r.train_s,
                static_cast<unsigned long long>(r.embed_requests), static_cast<unsigned long long>(r.retries),
                static_cast<long long>(r.failed_samples), static_cast<long long>(r.lost_samples),
                static_cast<long long>(r.duplicated_samples), static_cast<long long>(r.verified_samples),
                static_cast<long long>(r.verify_mismatches));
  o << line;
  for (const auto& n : r.notes) o << "  note: " << n << "\n";
  return o.str();
}

namespace detail {

inline std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

struct series {
  std::string name, colour;
  std::vector<std::pair<double, double>> points;
};

// 1, 2 or 5 times a power of ten, at least v.
inline double nice_ceil(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= v) return m * p;
  return 10 * p;
}

// A line chart (or bars, one per x) with axes, ticks, a legend (several series) and dashed vertical
// markers (epoch ends), as an inline SVG element; over time (`timeline`) the x axis starts at 0.
inline std::string chart(const std::string& title, const std::string& xlabel, const std::string& ylabel,
                         const std::vector<series>& all, bool bars = false, double ymax_fixed = 0,
                         const std::vector<double>& markers = {}, bool timeline = false) {
  const double W = 640, H = 260, L = 60, R = 20, T = 30, B = 45;
  double xmin = 1e300, xmax = -1e300, ymax = 0;
  for (const auto& s : all)
    for (auto [x, y] : s.points) xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymax = std::max(ymax, y);
  if (xmin > xmax) xmin = 0, xmax = 1;
  if (bars) xmin -= 0.5, xmax += 0.5;
  if (timeline) xmin = 0;
  if (xmax == xmin) xmax = xmin + 1;
  ymax = ymax_fixed > 0 ? ymax_fixed : 4 * nice_ceil(ymax / 4);
  auto X = [&](double x) { return L + (x - xmin) / (xmax - xmin) * (W - L - R); };
  auto Y = [&](double y) { return H - B - y / ymax * (H - T - B); };
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' viewBox='0 0 " << W << " " << H
    << "' font-family='sans-serif' font-size='11'>\n";
  o << "<text x='" << W / 2 << "' y='16' text-anchor='middle' font-size='13' font-weight='bold'>" << esc(title) << "</text>\n";
  o << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - R << "' y2='" << H - B << "' stroke='#333'/>\n";
  o << "<line x1='" << L << "' y1='" << T << "' x2='" << L << "' y2='" << H - B << "' stroke='#333'/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double y = ymax * i / 4;
    o << "<line x1='" << L << "' y1='" << Y(y) << "' x2='" << W - R << "' y2='" << Y(y) << "' stroke='#ddd'/>";
    o << "<text x='" << L - 5 << "' y='" << Y(y) + 4 << "' text-anchor='end'>" << fmt(ymax < 10 ? "%.2f" : "%.0f", y) << "</text>\n";
  }
  for (double m : markers)
    o << "<line x1='" << X(m) << "' y1='" << T << "' x2='" << X(m) << "' y2='" << H - B << "' stroke='#999' stroke-dasharray='4 3'/>";
  const bool whole = bars || !timeline;  // epochs: integer ticks
  const int xt = bars ? static_cast<int>(std::lround(xmax - xmin)) : whole ? static_cast<int>(std::lround(xmax - xmin)) : 5;
  for (int i = 0; i <= xt; ++i) {
    const double x = bars ? xmin + 0.5 + i : xmin + (xmax - xmin) * i / xt;
    if (bars && i == xt) break;
    o << "<text x='" << X(x) << "' y='" << H - B + 15 << "' text-anchor='middle'>" << fmt(whole ? "%.0f" : xmax - xmin < 2 ? "%.2f" : "%.1f", x) << "</text>";
  }
  o << "\n<text x='" << (L + W - R) / 2 << "' y='" << H - 8 << "' text-anchor='middle'>" << esc(xlabel) << "</text>\n";
  o << "<text x='14' y='" << (T + H - B) / 2 << "' text-anchor='middle' transform='rotate(-90 14 " << (T + H - B) / 2 << ")'>"
    << esc(ylabel) << "</text>\n";
  const double bw = bars ? (W - L - R) / (xmax - xmin) * 0.8 / static_cast<double>(std::max<std::size_t>(all.size(), 1)) : 0;
  for (std::size_t k = 0; k < all.size(); ++k) {
    const auto& s = all[k];
    if (bars) {
      for (auto [x, y] : s.points) {
        const double x0 = X(x) - bw * static_cast<double>(all.size()) / 2 + bw * static_cast<double>(k);
        o << "<rect x='" << x0 << "' y='" << Y(y) << "' width='" << bw << "' height='" << Y(0) - Y(y) << "' fill='" << s.colour
          << "'><title>" << esc(s.name) << ": " << fmt("%.3f", y) << "</title></rect>";
        o << "<text x='" << x0 + bw / 2 << "' y='" << Y(y) - 3 << "' text-anchor='middle'>" << fmt("%.0f%%", 100 * y) << "</text>";
      }
    } else {
      o << "<polyline fill='none' stroke='" << s.colour << "' stroke-width='1.8' points='";
      for (auto [x, y] : s.points) o << X(x) << "," << Y(y) << " ";
      o << "'/>";
    }
    if (all.size() > 1)
      o << "<rect x='" << W - R - 150 << "' y='" << T + 4 + 14 * static_cast<double>(k) << "' width='10' height='10' fill='" << s.colour
        << "'/><text x='" << W - R - 135 << "' y='" << T + 13 + 14 * static_cast<double>(k) << "'>" << esc(s.name) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace detail

// Throughput and stall over time, in windows of about a 40th of the run (at least one step each).
inline std::pair<detail::series, detail::series> time_series(const run_record& r) {
  detail::series tput{"samples/s", "#1f77b4", {}}, stall{"stall fraction", "#d62728", {}};
  const double window = std::max(r.wall_s / 40, 0.05);
  double t0 = 0, stall_acc = 0;
  std::int64_t n = 0;
  for (const auto& s : r.steps) {
    n += s.samples;
    stall_acc += s.stall_s;
    if (s.t_end - t0 >= window || &s == &r.steps.back()) {
      const double dt = std::max(s.t_end - t0, 1e-9);
      tput.points.push_back({s.t_end, static_cast<double>(n) / dt});
      stall.points.push_back({s.t_end, std::min(1.0, stall_acc / dt)});
      t0 = s.t_end, n = 0, stall_acc = 0;
    }
  }
  return {tput, stall};
}

inline bool write_html_report(const std::string& path, const run_record& r, const nlohmann::json& j) {
  auto [tput, stall] = time_series(r);
  detail::series hits{"cache hit rate", "#2ca02c", {}}, loss{"loss (MSE)", "#9467bd", {}};
  for (std::size_t e = 0; e < r.epochs.size(); ++e) {
    hits.points.push_back({static_cast<double>(e + 1), r.epochs[e].cache_hit_rate()});
    loss.points.push_back({static_cast<double>(e + 1), r.epochs[e].loss});
  }
  std::ofstream f(path, std::ios::trunc);
  f << "<!doctype html>\n<html><head><meta charset='utf-8'><title>jit_train_demo: " << detail::esc(r.mode) << "</title>\n"
    << "<style>body{font-family:sans-serif;max-width:720px;margin:2em auto;color:#222}pre{background:#f6f6f6;padding:8px;"
       "overflow-x:auto;font-size:12px}svg{display:block;margin:1em 0}</style></head><body>\n";
  f << "<h1>jit_train_demo — " << detail::esc(r.mode) << " mode</h1>\n<p>A conditional denoiser (MLP"
    << (r.tp > 1 ? ", tensor-parallel over " + std::to_string(r.tp) + " Gloo ranks" : std::string()) << ") trained on image/video latents "
    << "conditioned on pooled caption embeddings. "
    << (r.mode == "jit" ? "Embeddings came just in time from " + detail::esc(r.endpoints) + " through the prefetching loader and its cache."
                        : std::string("Embeddings were computed inside the training step by the in-process reference models (the baseline)."))
    << " Data: <code>" << detail::esc(r.data_dir) << "</code>.</p>\n";
  f << "<h2>Summary</h2><pre>" << detail::esc(summary_table(r)) << "</pre>\n";
  std::vector<double> ends;  // epoch ends (dashed)
  for (std::size_t i = 0; i + 1 < r.steps.size(); ++i)
    if (r.steps[i + 1].epoch != r.steps[i].epoch) ends.push_back(r.steps[i].t_end);
  f << detail::chart("Throughput over time (dashed: epoch ends)", "seconds", "samples / s", {tput}, false, 0, ends, true);
  f << detail::chart("Trainer stall over time (dashed: epoch ends)", "seconds", "fraction of the time waiting", {stall}, false, 1.0, ends,
                     true);
  f << detail::chart("Cache hit rate per epoch", "epoch", "hit rate", {hits}, true, 1.0);
  f << detail::chart("Loss per epoch", "epoch", "MSE", {loss});
  f << "<h2>Result line</h2><pre>" << detail::esc(j.dump()) << "</pre>\n</body></html>\n";
  f.close();
  return static_cast<bool>(f);
}

}  // namespace jit_train_demo
