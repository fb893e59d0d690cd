// jitembed-precompute DATA... [--cache DIR] [--redis HOST:PORT] [--models a,b] [--threads N] [--limit N]:
// reads the samples of a format::dataset (record shards, WebDataset tars, directories of media with
// same-stem captions, loose files), computes every embedding of their fields the cache does not hold yet
// with the in-process reference models, and stores it. Resumable by construction
// (a rerun skips what is cached); a bad file is reported and counted, never aborts the run. Ends with a
// summary table and one JSON line {"bench":"precompute", ...}.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "jitembed/cache/key.hpp"
#include "jitembed/cache/lmdb_cache.hpp"
#if defined(JITEMBED_HAS_REDIS)
#include "jitembed/cache/redis_cache.hpp"
#endif
#include "jitembed/cache/tiered_cache.hpp"
#include "jitembed/cache/value.hpp"
#include "jitembed/core/thread_pool.hpp"
#include "jitembed/format/dataset.hpp"
#include "jitembed/models.hpp"

namespace {

using namespace jitembed;
using clock_type = std::chrono::steady_clock;

// Thread-safe error report on stderr (clears a progress bar first).
class reporter {
 public:
  explicit reporter(bool tty) : tty_(tty) {}
  void error(const std::string& where, std::string_view model, const error_info& e) {
    std::lock_guard lock(mu_);
    if (++count_ > kMaxLines) return;
    if (tty_) std::fputs("\r\033[K", stderr);
    std::fprintf(stderr, "error: %s%s%s: %s: %s\n", where.c_str(), model.empty() ? "" : " [", model.empty() ? "" : (std::string(model) + "]").c_str(),
                 std::string(to_string(e.code)).c_str(), e.message.c_str());
    if (count_ == kMaxLines) std::fputs("error: (further errors are counted, not printed)\n", stderr);
  }
  void line(const std::string& s, bool overwrite) {
    std::lock_guard lock(mu_);
    if (overwrite) {
      std::fprintf(stderr, "\r\033[K%s", s.c_str());
    } else {
      std::fprintf(stderr, "%s\n", s.c_str());
    }
    std::fflush(stderr);
  }

 private:
  static constexpr std::uint64_t kMaxLines = 200;
  std::mutex mu_;
  std::uint64_t count_ = 0;
  bool tty_;
};

struct counters {
  std::atomic<std::uint64_t> jobs{0}, computed{0}, hits{0}, duplicates{0}, errors{0}, put_failures{0};
};

// Keys computed (claimed) in this run, so equal content is embedded once.
class claim_set {
 public:
  bool claim(const cache::cache_key& k) {
    std::lock_guard lock(mu_);
    return keys_.insert(k).second;
  }
  void release(const cache::cache_key& k) {
    std::lock_guard lock(mu_);
    keys_.erase(k);
  }

 private:
  std::mutex mu_;
  std::unordered_set<cache::cache_key, cache::cache_key_hasher> keys_;
};

// The model input a field is for: JPEG images, video clips, text (any codec: text() gives the UTF-8).
std::optional<models::modality> modality_of(const format::sample_field& f) {
  if (f.kind == format::field_kind::image && f.codec == codec::codec_id::jpeg) return models::modality::image;
  if (f.kind == format::field_kind::video && f.codec == codec::codec_id::video) return models::modality::video;
  if (f.kind == format::field_kind::text) return models::modality::text;
  return std::nullopt;
}

// Where a field is, for error lines: "shard.jems#key/field" for records, the member / file path
// ("data.tar#key.jpg", "dir/a.txt") for tar and loose samples.
std::string where_of(const format::sample& s, const format::sample_field& f) {
  return s.id + (s.is_record() ? "/" : ".") + f.name;
}

struct run_context {
  const format::dataset& data;
  const std::vector<models::any_model>& models;
  std::vector<std::unique_ptr<counters>>& per_model;
  cache::any_store& store;
  const decode_limits& limits;
  const cache::value_options& value_opts;
  reporter& rep;
  claim_set& claims;
  counters& total;
  std::atomic<std::uint64_t>& samples_done;
  std::atomic<std::uint64_t>& sample_errors;
  std::atomic<std::uint64_t>& fields_skipped;
};

// Embeds every field of the samples `idx` with every model of its modality: skip cached keys,
// preprocess the rest, run them in batches per model, store. Each sample is read once.
void process_chunk(const run_context& ctx, std::span<const std::size_t> idx) {
  auto count = [&](std::size_t mi, std::atomic<std::uint64_t> counters::*field) {
    ++(ctx.total.*field);
    ++(ctx.per_model[mi].get()->*field);
  };
  auto failed = [&](std::size_t mi, const std::string& where, const error_info& e) {
    count(mi, &counters::errors);
    ctx.rep.error(where, ctx.models[mi].name(), e);
  };
  struct pending {
    std::string where;
    cache::cache_key key;
    tensor input;
  };
  std::vector<std::vector<pending>> todo(ctx.models.size());
  auto run_batch = [&](std::size_t mi) {
    const auto& m = ctx.models[mi];
    auto& batch_items = todo[mi];
    if (batch_items.empty()) return;
    std::vector<tensor> batch;
    for (auto& p : batch_items) batch.push_back(std::move(p.input));
    result<std::vector<models::named_tensors>> out = fail(errc::internal, "not run");
    try {
      out = m.run(batch);
    } catch (const std::exception& e) {
      out = fail(errc::internal, e.what());
    }
    batch.clear();
    for (std::size_t k = 0; k < batch_items.size(); ++k) {
      auto& p = batch_items[k];
      if (!out) {
        ctx.claims.release(p.key);
        failed(mi, p.where, out.error());
        continue;
      }
      std::vector<cache::named_tensor> named;
      for (const auto& [name, t] : (*out)[k]) named.emplace_back(name, t.view());
      auto value = cache::encode_value(named, ctx.value_opts);
      if (!value) {
        ctx.claims.release(p.key);
        failed(mi, p.where, value.error());
        continue;
      }
      if (!ctx.store.put(p.key, *value)) {
        ++ctx.total.put_failures;
        ++ctx.per_model[mi]->put_failures;
      }
      count(mi, &counters::computed);
    }
    batch_items.clear();
  };

  for (std::size_t i : idx) {
    result<format::sample> s = fail(errc::internal, "not read");
    try {
      s = ctx.data.get(i);
    } catch (const std::exception& e) {  // bad_alloc and the like: this sample fails, the run goes on
      s = fail(errc::internal, e.what());
    }
    if (!s) {
      ++ctx.sample_errors;
      auto id = ctx.data.id(i);
      ctx.rep.error(id ? *id : "sample " + std::to_string(i), "", s.error());
      ++ctx.samples_done;
      continue;
    }
    for (const auto& f : s->fields) {
      const auto mod = modality_of(f);
      bool used = false;
      std::optional<result<std::string>> text;  // decoded once, for every text model
      for (std::size_t mi = 0; mod && mi < ctx.models.size(); ++mi) {
        const auto& m = ctx.models[mi];
        if (m.input_modality() != *mod) continue;
        used = true;
        ++ctx.total.jobs;
        ++ctx.per_model[mi]->jobs;
        const std::string where = where_of(*s, f);
        try {
          // The bytes a model sees and the cache key hashes: JPEG / container bytes as stored, text as
          // UTF-8 (a zstd caption is decompressed, so equal captions share keys whatever their encoding).
          bytes_view bytes = f.bytes;
          if (*mod == models::modality::text) {
            if (!text) text = f.text(ctx.limits);
            if (!*text) {
              failed(mi, where, text->error());
              continue;
            }
            bytes = as_bytes_view(**text);
          }
          const auto key = cache::make_key({m.name(), m.version(), m.preprocess_key(), bytes});
          if (ctx.store.contains(key)) {
            count(mi, &counters::hits);
            continue;
          }
          if (!ctx.claims.claim(key)) {
            count(mi, &counters::duplicates);
            continue;
          }
          auto in = m.preprocess(bytes, ctx.limits);
          if (!in) {
            ctx.claims.release(key);
            failed(mi, where, in.error());
            continue;
          }
          todo[mi].push_back({where, key, std::move(*in)});
          if (todo[mi].size() >= m.max_batch_size()) run_batch(mi);
        } catch (const std::exception& e) {
          failed(mi, where, fail(errc::internal, e.what()));
        }
      }
      if (!used) ++ctx.fields_skipped;
    }
    ++ctx.samples_done;
  }
  for (std::size_t mi = 0; mi < ctx.models.size(); ++mi) run_batch(mi);
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  const auto t = static_cast<long long>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, (t / 60) % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", t / 60, t % 60);
  return buf;
}

std::string progress_line(std::uint64_t done, std::uint64_t total, double seconds, bool bar) {
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total - std::min(done, total)) / rate : -1.0;
  const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  std::string s;
  if (bar) {
    constexpr int width = 30;
    const int filled = static_cast<int>(frac * width);
    s = "[" + std::string(static_cast<std::size_t>(filled), '=') + (filled < width ? ">" : "") +
        std::string(static_cast<std::size_t>(std::max(0, width - filled - 1)), ' ') + "] ";
  } else {
    s = "precompute: ";
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%llu/%llu samples (%.0f%%)  %.1f/s  elapsed %s  ETA %s", static_cast<unsigned long long>(done),
                static_cast<unsigned long long>(total), 100.0 * frac, rate, format_duration(seconds).c_str(),
                format_duration(eta).c_str());
  return s + buf;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const auto comma = s.find(',', start);
    const std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!part.empty()) out.push_back(part);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"jitembed-precompute: fill the embedding cache for data sets (shards, WebDataset tars, directories)"};
  std::vector<std::string> data;
  std::string cache_dir = ".jitembed/cache", redis, redis_prefix = "jitembed:", model_list = "image-latent,video-latent,text-embed";
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::uint64_t limit = 0;
  int work = 0;
  bool compress = false, no_progress = false;
  models::reference_options ref;
  app.add_option("DATA", data, "record shards (.jems), records (.jemr), WebDataset tars (.tar), directories, or media files")->required();
  app.add_option("--cache", cache_dir, "LMDB cache directory")->capture_default_str();
  app.add_option("--redis", redis, "also use a shared Redis cache at HOST:PORT (tier behind LMDB)");
  app.add_option("--redis-prefix", redis_prefix, "Redis key prefix (namespace)")->capture_default_str();
  app.add_option("--models", model_list, "comma-separated reference models")->capture_default_str();
  app.add_option("--threads", threads, "worker threads")->check(CLI::Range(1u, 1024u));
  app.add_option("--limit", limit, "embed only the first N samples (0 = all)");
  app.add_option("--work", work, "extra matmuls per item in every model (emulates heavier encoders)")->check(CLI::Range(0, 1000));
  app.add_option("--image-bucket", ref.image_bucket, "image-latent resize bucket (default 256)");
  app.add_option("--video-bucket", ref.video_bucket, "video-latent resize bucket (default 256)");
  app.add_option("--video-frames", ref.video_frames, "video-latent frames T (default 16)");
  app.add_option("--text-length", ref.text_max_length, "text-embed max tokens L (default 128)");
  app.add_option("--text-dim", ref.text_dim, "text-embed width D (default 768)");
  app.add_flag("--compress", compress, "store values shuffle+zstd compressed (default raw: zero-copy reads)");
  app.add_flag("--no-progress", no_progress, "no progress output");
  CLI11_PARSE(app, argc, argv);
  ref.work = work;

  const bool tty = isatty(STDERR_FILENO) != 0;
  reporter rep(tty);
  const decode_limits limits;

  std::vector<models::any_model> model_set;
  for (const auto& name : split_list(model_list)) {
    auto m = models::make_reference_model(name, ref);
    if (!m) {
      std::fprintf(stderr, "error: %s: %s\n", std::string(to_string(m.code())).c_str(), m.error().message.c_str());
      return 2;
    }
    model_set.push_back(std::move(*m));
  }
  if (model_set.empty()) {
    std::fprintf(stderr, "error: invalid_argument: --models lists no model\n");
    return 2;
  }

  cache::lmdb_options lo;
  lo.path = cache_dir;
  auto lmdb = cache::lmdb_cache::open(lo);
  if (!lmdb) {
    std::fprintf(stderr, "error: %s: cache '%s': %s\n", std::string(to_string(lmdb.code())).c_str(), cache_dir.c_str(),
                 lmdb.error().message.c_str());
    return 2;
  }
  cache::any_store store(*lmdb);
  if (!redis.empty()) {
#if !defined(JITEMBED_HAS_REDIS)
    std::fprintf(stderr, "error: invalid_argument: --redis: built without the redis component\n");
    return 2;
#else
    cache::redis_options ro;
    const auto colon = redis.rfind(':');
    ro.host = redis.substr(0, colon);
    if (colon != std::string::npos) {
      try {
        ro.port = std::stoi(redis.substr(colon + 1));
      } catch (const std::exception&) {
        std::fprintf(stderr, "error: invalid_argument: --redis '%s' is not HOST:PORT\n", redis.c_str());
        return 2;
      }
    }
    ro.prefix = redis_prefix;
    auto r = std::make_shared<cache::redis_cache>(ro);
    if (!r->ping())  // a cache failure never fails the run: the Redis tier degrades to misses
      std::fprintf(stderr, "warning: redis %s not reachable (%s); continuing, its failures are counted\n", redis.c_str(),
                   r->last_error().c_str());
    store = cache::any_store(std::make_shared<cache::tiered_cache>(std::vector<cache::any_store>{store, cache::any_store(r)}));
#endif
  }

  const auto t0 = clock_type::now();
  // One data set over every DATA argument; a bad source is reported and counted, the rest is embedded.
  format::dataset_options dopts;
  dopts.limits = limits;
  dopts.skip_bad_sources = true;
  auto opened = format::dataset::open(std::span<const std::string>(data), dopts);
  if (!opened) {  // not reached with skip_bad_sources; kept for the error model's sake
    std::fprintf(stderr, "error: %s: %s\n", std::string(to_string(opened.code())).c_str(), opened.error().message.c_str());
    return 2;
  }
  const format::dataset& ds = *opened;
  for (const auto& e : ds.errors()) rep.error(e.path, "", e.error);
  const std::size_t sample_total = limit ? static_cast<std::size_t>(std::min<std::uint64_t>(limit, ds.size())) : ds.size();

  // Samples in chunks spread over the threads; each chunk embeds its samples' fields with every model.
  cache::value_options vo;
  if (compress) vo.compression = format::compression::zstd;
  claim_set claims;
  counters total;
  std::vector<std::unique_ptr<counters>> per_model;
  std::size_t max_batch = 1;
  for (const auto& m : model_set) {
    per_model.push_back(std::make_unique<counters>());
    max_batch = std::max(max_batch, m.max_batch_size());
  }
  std::atomic<std::uint64_t> samples_done{0}, sample_errors{0}, fields_skipped{0};
  const run_context ctx{ds, model_set, per_model, store, limits, vo, rep, claims, total, samples_done, sample_errors, fields_skipped};
  std::vector<std::size_t> order(sample_total);
  for (std::size_t i = 0; i < sample_total; ++i) order[i] = i;
  {
    thread_pool pool(threads);
    std::vector<std::future<void>> futs;
    const std::size_t chunk = std::clamp<std::size_t>((sample_total + threads - 1) / threads, 1, max_batch);
    for (std::size_t lo2 = 0; lo2 < sample_total; lo2 += chunk) {
      const std::span<const std::size_t> idx(order.data() + lo2, std::min(chunk, sample_total - lo2));
      futs.push_back(pool.submit([&ctx, idx] { process_chunk(ctx, idx); }));
    }
    auto last = clock_type::now();
    for (auto& f : futs) {
      while (f.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
        const auto now = clock_type::now();
        if (no_progress || (!tty && now - last < std::chrono::seconds(5))) continue;
        last = now;
        rep.line(progress_line(samples_done, sample_total, std::chrono::duration<double>(now - t0).count(), tty), tty);
      }
      f.get();
    }
  }
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  if (!no_progress) rep.line(progress_line(samples_done, sample_total, seconds, tty) + (tty ? "\n" : ""), tty);
  const std::uint64_t job_total = total.jobs;
  const std::uint64_t walk_errors = ds.errors().size() + sample_errors;

  const std::uint64_t errors = total.errors + walk_errors;
  const auto st = store.stats();
  std::printf("\njitembed-precompute summary (%s%s%s)\n", cache_dir.c_str(), redis.empty() ? "" : " + redis ", redis.c_str());
  std::printf("  %-14s %10s %10s %10s %10s %10s\n", "model", "items", "computed", "cached", "duplicate", "errors");
  for (std::size_t mi = 0; mi < model_set.size(); ++mi) {
    const auto& c = *per_model[mi];
    std::printf("  %-14s %10llu %10llu %10llu %10llu %10llu\n", std::string(model_set[mi].name()).c_str(),
                static_cast<unsigned long long>(c.jobs.load()), static_cast<unsigned long long>(c.computed.load()),
                static_cast<unsigned long long>(c.hits.load()), static_cast<unsigned long long>(c.duplicates.load()),
                static_cast<unsigned long long>(c.errors.load()));
  }
  std::printf("  %-14s %10llu %10llu %10llu %10llu %10llu\n", "total", static_cast<unsigned long long>(job_total),
              static_cast<unsigned long long>(total.computed.load()), static_cast<unsigned long long>(total.hits.load()),
              static_cast<unsigned long long>(total.duplicates.load()), static_cast<unsigned long long>(errors));
  std::printf("  %llu samples from %llu files (%llu other files ignored), fields skipped (no model for them) %llu, "
              "bad sources or samples %llu\n",
              static_cast<unsigned long long>(sample_total), static_cast<unsigned long long>(ds.file_count()),
              static_cast<unsigned long long>(ds.ignored_files()), static_cast<unsigned long long>(fields_skipped.load()),
              static_cast<unsigned long long>(walk_errors));
  std::printf("  cache: %llu puts (%llu bytes), %llu put failures, %llu store errors\n", static_cast<unsigned long long>(st.puts),
              static_cast<unsigned long long>(st.bytes_written), static_cast<unsigned long long>(total.put_failures.load()),
              static_cast<unsigned long long>(st.errors));
  std::printf("  %.2f s, %.1f items/s\n\n", seconds, seconds > 0 ? static_cast<double>(job_total) / seconds : 0.0);
  nlohmann::ordered_json j = {{"bench", "precompute"},
                              {"items", job_total},
                              {"computed", total.computed.load()},
                              {"cached_hits", total.hits.load()},
                              {"duplicates", total.duplicates.load()},
                              {"errors", errors},
                              {"put_failures", total.put_failures.load()},
                              {"seconds", seconds}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
