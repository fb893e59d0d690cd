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
#include "jitembed/client/jit_client.hpp"
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

// What the run knows of a model: its cache-key identity and modality, and how to run it — in process
// (`local`) or through the JIT client (`client`, the service behind --endpoints).
struct model_ref {
  std::string name, version, preprocess_key;
  models::modality modality = models::modality::image;
  std::size_t max_batch = 1;
  const models::any_model* local = nullptr;
  client::jit_client* client = nullptr;
};

struct run_context {
  const format::dataset& data;
  const std::vector<model_ref>& models;
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
    ctx.rep.error(where, ctx.models[mi].name, e);
  };
  struct pending {
    std::string where;
    cache::cache_key key;
    tensor input;       // in process: the preprocessed item
    bytes_view raw;     // through the service: the field bytes (alive while the sample is)
    std::shared_ptr<const void> keep;
  };
  std::vector<std::vector<pending>> todo(ctx.models.size());
  auto store_item = [&](std::size_t mi, pending& p, const models::named_tensors& outs) {
    std::vector<cache::named_tensor> named;
    for (const auto& [name, t] : outs) named.emplace_back(name, t.view());
    auto value = cache::encode_value(named, ctx.value_opts);
    if (!value) {
      ctx.claims.release(p.key);
      failed(mi, p.where, value.error());
      return;
    }
    if (!ctx.store.put(p.key, *value)) {
      ++ctx.total.put_failures;
      ++ctx.per_model[mi]->put_failures;
    }
    count(mi, &counters::computed);
  };
  auto run_batch = [&](std::size_t mi) {
    const auto& m = ctx.models[mi];
    auto& batch_items = todo[mi];
    if (batch_items.empty()) return;
    if (m.client) {  // one request of N rows; a row that fails alone fails only its item
      client::embed_request req;
      req.model = m.name;
      req.input = std::string(models::to_string(m.modality));
      for (auto& p : batch_items) req.rows.push_back(p.raw);
      auto out = m.client->embed(std::move(req)).get();
      for (std::size_t k = 0; k < batch_items.size(); ++k) {
        auto& p = batch_items[k];
        if (!out || !out->row_ok(k)) {
          ctx.claims.release(p.key);
          failed(mi, p.where, out ? out->row_errors[k] : out.error());
          continue;
        }
        models::named_tensors row;  // row k of every [N, ...] output, as a view into the response
        for (const auto& [name, t] : out->outputs) {
          shape s;
          for (std::size_t d = 1; d < t.rank(); ++d) s.push_back(t.shape()[d]);
          const std::size_t row_bytes = t.nbytes() / batch_items.size();
          row.emplace_back(name, tensor::wrap(std::make_shared<tensor>(t),
                                              tensor_view(static_cast<const std::byte*>(t.data()) + k * row_bytes, t.dtype(), s)));
        }
        store_item(mi, p, row);
      }
      batch_items.clear();
      return;
    }
    std::vector<tensor> batch;
    for (auto& p : batch_items) batch.push_back(std::move(p.input));
    result<std::vector<models::named_tensors>> out = fail(errc::internal, "not run");
    try {
      out = m.local->run(batch);
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
      store_item(mi, p, (*out)[k]);
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
        if (m.modality != *mod) continue;
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
          const auto key = cache::make_key({m.name, m.version, m.preprocess_key, bytes});
          if (ctx.store.contains(key)) {
            count(mi, &counters::hits);
            continue;
          }
          if (!ctx.claims.claim(key)) {
            count(mi, &counters::duplicates);
            continue;
          }
          if (m.client) {
            // The service preprocesses; the text bytes are the decoded caption, kept alive with the item.
            std::shared_ptr<const void> keep = f.keep_alive;
            if (*mod == models::modality::text) {
              auto owned = std::make_shared<std::string>(**text);
              bytes = as_bytes_view(*owned);
              keep = owned;
            }
            todo[mi].push_back({where, key, tensor{}, bytes, std::move(keep)});
          } else {
            auto in = m.local->preprocess(bytes, ctx.limits);
            if (!in) {
              ctx.claims.release(key);
              failed(mi, where, in.error());
              continue;
            }
            todo[mi].push_back({where, key, std::move(*in), {}, {}});
          }
          if (todo[mi].size() >= m.max_batch) run_batch(mi);
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
  // Required, but checked after parsing: CLI11 2.1 reports a missing required positional before an unknown
  // flag, which would hide a mistyped flag's name.
  app.add_option("DATA", data, "record shards (.jems), records (.jemr), WebDataset tars (.tar), directories, or media files (required)");
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
  std::string endpoints, endpoints_file, tls_ca_file;
  std::size_t rows_per_request = 32;
  app.add_option("--endpoints", endpoints,
                 "embed through these jitembed/Triton servers (comma-separated http://host:port or https://host:port)");
  app.add_option("--tls-ca-file", tls_ca_file,
                 "https endpoints: the PEM CA bundle their certificates must chain to (default: the system's CAs)");
  app.add_option("--endpoints-file", endpoints_file, "embed through the servers listed in this file (re-read when it changes)");
  std::vector<std::string> identity_flags;
  app.add_option("--identity", identity_flags,
                 "MODEL[:INPUT]=FINGERPRINT,PREPROCESS_KEY: the cache-key identity of a model whose server publishes none "
                 "(a Triton model without the config parameters fingerprint / preprocess_key); INPUT (image, video or text) "
                 "says which fields it embeds; repeatable");
  app.add_option("--rows-per-request", rows_per_request, "rows per request through the service")->check(CLI::Range(1, 4096));
  CLI11_PARSE(app, argc, argv);
  if (data.empty()) return app.exit(CLI::RequiredError("DATA"));
  ref.work = work;

  const bool tty = isatty(STDERR_FILENO) != 0;
  reporter rep(tty);
  const decode_limits limits;

  // In process (default) or through the service (--endpoints / --endpoints-file, the JIT client).
  std::vector<models::any_model> local_models;
  std::optional<client::jit_client> service;
  if (!endpoints.empty() || !endpoints_file.empty()) {
    client::client_options co;
    if (!endpoints.empty()) co.endpoints.list = split_list(endpoints);
    co.endpoints.file = endpoints_file;
    co.tls_ca_file = tls_ca_file;
    co.request_timeout = std::chrono::minutes(2);
    for (const auto& f : identity_flags) {
      auto id = client::parse_identity_flag(f);
      if (!id) {
        std::fprintf(stderr, "error: %s: %s\n", std::string(to_string(id.code())).c_str(), id.error().message.c_str());
        return 2;
      }
      co.identities[id->first] = std::move(id->second);
    }
    auto c = client::jit_client::create(std::move(co));
    if (!c) {
      std::fprintf(stderr, "error: %s: %s\n", std::string(to_string(c.code())).c_str(), c.error().message.c_str());
      return 2;
    }
    service.emplace(std::move(*c));
  }
  std::vector<model_ref> model_set;
  for (const auto& name : split_list(model_list)) {
    model_ref r;
    r.name = name;
    if (service) {
      auto id = service->identity(name);  // the cache key's inputs come from the server's metadata
      if (!id) {
        std::fprintf(stderr, "error: %s: %s\n", std::string(to_string(id.code())).c_str(), id.error().message.c_str());
        return 2;
      }
      const auto mod = id->input == "image" ? std::optional(models::modality::image)
                       : id->input == "video" ? std::optional(models::modality::video)
                       : id->input == "text"  ? std::optional(models::modality::text)
                                              : std::nullopt;
      if (!mod && id->input.empty()) {
        std::fprintf(stderr, "error: invalid_argument: model '%s': say which input it takes: --identity %s:image=... (or :video, :text)\n",
                     name.c_str(), name.c_str());
        return 2;
      }
      if (!mod) {
        std::fprintf(stderr, "error: invalid_argument: model '%s' takes input '%s', not image/video/text\n", name.c_str(),
                     id->input.c_str());
        return 2;
      }
      r.version = id->fingerprint;
      r.preprocess_key = id->preprocess_key;
      r.modality = *mod;
      r.max_batch = rows_per_request;
      r.client = &*service;
    } else {
      auto m = models::reference_model::create(name, ref);
      if (!m) {
        std::fprintf(stderr, "error: %s: %s\n", std::string(to_string(m.code())).c_str(), m.error().message.c_str());
        return 2;
      }
      local_models.push_back(std::move(*m));
    }
    model_set.push_back(std::move(r));
  }
  for (std::size_t i = 0, l = 0; i < model_set.size(); ++i) {  // local_models no longer grows: pointers are stable
    if (model_set[i].client) continue;
    const auto& m = local_models[l++];
    model_set[i].local = &m;
    model_set[i].version = std::string(m.version());
    model_set[i].preprocess_key = std::string(m.preprocess_key());
    model_set[i].modality = m.input_modality();
    model_set[i].max_batch = m.max_batch_size();
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
    auto r = cache::redis_cache::open(ro);
    if (!r && r.code() == errc::invalid_argument) {
      std::fprintf(stderr, "error: invalid_argument: --redis: %s\n", r.error().message.c_str());
      return 2;
    }
    if (!r)  // a cache failure never fails the run: go on without the Redis tier
      std::fprintf(stderr, "warning: redis %s not reachable (%s); continuing without it\n", redis.c_str(),
                   r.error().message.c_str());
    else
      store = cache::any_store(std::in_place_type<cache::tiered_cache>, std::vector<cache::any_store>{store, cache::any_store(std::move(*r))});
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
    max_batch = std::max(max_batch, m.max_batch);
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
    std::printf("  %-14s %10llu %10llu %10llu %10llu %10llu\n", model_set[mi].name.c_str(),
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
