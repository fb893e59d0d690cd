// jitembed-precompute DATA... [--cache DIR] [--redis HOST:PORT] [--models a,b] [--threads N] [--limit N]:
// walks data sets (record shards, WebDataset tars, directories, loose files), computes every embedding the
// cache does not hold yet with the in-process reference models, and stores it. Resumable by construction
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
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
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
#include "jitembed/format/record_view.hpp"
#include "jitembed/format/shard_reader.hpp"
#include "jitembed/format/webdataset.hpp"
#include "jitembed/models.hpp"

namespace {

using namespace jitembed;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

// One raw field to embed: a loose file (read when processed), a field of a record, or bytes in a mapping.
struct item {
  std::string where;  // "path", "path#key/field" or "path#key.ext"
  models::modality kind = models::modality::image;
  std::string file;
  format::record_view record;
  std::size_t field = 0;
  bool in_record = false;
  bytes_view data;
  std::shared_ptr<const void> keep;
};

struct content {
  bytes_view bytes;
  std::shared_ptr<const void> keep;
};

result<content> read_whole_file(const std::string& path, const decode_limits& limits) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return fail(errc::io_error, "cannot open '" + path + "'");
  const auto size = static_cast<std::uint64_t>(in.tellg());
  if (size > limits.max_record_bytes)
    return fail(errc::limit_exceeded, "file of " + std::to_string(size) + " bytes > max_record_bytes " + std::to_string(limits.max_record_bytes));
  auto buf = std::make_shared<byte_buffer>(static_cast<std::size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(buf->data()), static_cast<std::streamsize>(size))) return fail(errc::io_error, "cannot read '" + path + "'");
  return content{bytes_view(buf->data(), buf->size()), buf};
}

// The bytes a model sees and the cache key hashes: JPEG / container bytes as stored, text as UTF-8 (a
// zstd-compressed caption is decompressed, so equal captions share keys whatever their encoding).
result<content> load(const item& it, const decode_limits& limits) {
  if (!it.file.empty()) return read_whole_file(it.file, limits);
  if (!it.in_record) return content{it.data, it.keep};
  const auto& f = it.record.field(it.field);
  if (it.kind == models::modality::text) {
    auto s = f.text(limits);
    if (!s) return s.error();
    auto owned = std::make_shared<std::string>(std::move(*s));
    return content{as_bytes_view(*owned), owned};
  }
  auto p = f.checked_payload();
  if (!p) return p.error();
  return content{*p, it.record.keep_alive()};
}

std::optional<models::modality> modality_of_extension(std::string ext) {
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".jpg" || ext == ".jpeg") return models::modality::image;
  if (ext == ".mp4" || ext == ".webm" || ext == ".mkv" || ext == ".mov") return models::modality::video;
  if (ext == ".txt" || ext == ".caption") return models::modality::text;
  return std::nullopt;
}

std::string lower_ext(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e;
}

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

// Collects the items of every DATA argument, in order; walk errors are reported and counted.
class walker {
 public:
  walker(const decode_limits& limits, reporter& rep, std::uint64_t limit) : limits_(limits), rep_(rep), limit_(limit) {}

  void walk(const std::string& path) {
    std::error_code ec;
    const auto st = fs::status(path, ec);
    if (ec || !fs::exists(st)) return walk_error(path, fail(errc::not_found, "no such file or directory '" + path + "'"));
    if (fs::is_directory(st)) {
      std::vector<fs::path> files;
      for (auto it = fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->is_regular_file(ec)) files.push_back(it->path());
      if (ec) walk_error(path, fail(errc::io_error, "cannot list '" + path + "': " + ec.message()));
      std::sort(files.begin(), files.end());
      for (const auto& f : files) walk_file(f, false);
      return;
    }
    walk_file(path, true);
  }

  std::vector<item>& items() { return items_; }
  std::uint64_t errors() const { return errors_; }
  std::uint64_t sources() const { return sources_; }
  std::uint64_t skipped() const { return skipped_; }

 private:
  bool full() const { return limit_ && items_.size() >= limit_; }
  void walk_error(const std::string& where, const error_info& e) {
    ++errors_;
    rep_.error(where, "", e);
  }
  void add(item it) {
    if (!full()) items_.push_back(std::move(it));
  }

  void walk_file(const fs::path& p, bool explicit_arg) {
    if (full()) return;
    const std::string path = p.string(), ext = lower_ext(p);
    if (ext == ".jems") return walk_shard(path);
    if (ext == ".jemr") return walk_record_file(path);
    if (ext == ".tar") return walk_tar(path);
    if (auto m = modality_of_extension(ext)) {
      ++sources_;
      item it;
      it.where = path;
      it.kind = *m;
      it.file = path;
      return add(std::move(it));
    }
    if (explicit_arg) return walk_error(path, fail(errc::unsupported_format, "not a .jems / .jemr / .tar / image / video / text file"));
    ++skipped_;
  }

  void walk_record(const std::string& where, const format::record_view& rec) {
    for (std::size_t i = 0; i < rec.size() && !full(); ++i) {
      const auto& f = rec[i];
      std::optional<models::modality> m;
      if (f.kind() == format::field_kind::image && f.codec() == codec::codec_id::jpeg) m = models::modality::image;
      if (f.kind() == format::field_kind::video && f.codec() == codec::codec_id::video) m = models::modality::video;
      if (f.kind() == format::field_kind::text) m = models::modality::text;
      if (!m) {
        ++skipped_;
        continue;
      }
      item it;
      it.where = where + "/" + std::string(f.name());
      it.kind = *m;
      it.record = rec;
      it.field = i;
      it.in_record = true;
      add(std::move(it));
    }
  }

  void walk_shard(const std::string& path) {
    ++sources_;
    auto shard = format::shard_reader::open(path, limits_);
    if (!shard) return walk_error(path, shard.error());
    for (std::size_t i = 0; i < shard->size() && !full(); ++i) {
      const std::string where = path + "#" + std::string(shard->key(i));
      auto rec = shard->record(i);
      if (!rec) {
        walk_error(where, rec.error());
        continue;
      }
      walk_record(where, *rec);
    }
  }

  void walk_record_file(const std::string& path) {
    ++sources_;
    auto c = read_whole_file(path, limits_);
    if (!c) return walk_error(path, c.error());
    auto rec = format::record_view::parse(c->bytes, limits_, c->keep);
    if (!rec) return walk_error(path, rec.error());
    walk_record(path + "#", *rec);
  }

  void walk_tar(const std::string& path) {
    ++sources_;
    auto wds = format::webdataset_reader::open(path, limits_);
    if (!wds) return walk_error(path, wds.error());
    for (const auto& s : *wds) {
      for (const auto& mem : s.members) {
        if (full()) return;
        std::optional<models::modality> m;
        if (mem.kind == format::field_kind::image && mem.codec == codec::codec_id::jpeg) m = models::modality::image;
        if (mem.kind == format::field_kind::video) m = models::modality::video;
        if (mem.kind == format::field_kind::text) m = models::modality::text;
        if (!m) {
          ++skipped_;
          continue;
        }
        item it;
        it.where = path + "#" + mem.path;
        it.kind = *m;
        it.data = mem.data;
        it.keep = wds->keep_alive();
        add(std::move(it));
      }
    }
  }

  decode_limits limits_;
  reporter& rep_;
  std::uint64_t limit_;
  std::vector<item> items_;
  std::uint64_t errors_ = 0, sources_ = 0, skipped_ = 0;
};

struct counters {
  std::atomic<std::uint64_t> jobs{0}, computed{0}, hits{0}, duplicates{0}, errors{0}, put_failures{0};
  std::uint64_t done() const { return computed + hits + duplicates + errors; }
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

struct run_context {
  const std::vector<item>& items;
  cache::any_store& store;
  const decode_limits& limits;
  const cache::value_options& value_opts;
  reporter& rep;
  claim_set& claims;
  counters& total;
};

// Embeds the items `idx` with model `m`: skip cached keys, preprocess the rest, run in batches, store.
void process_chunk(const run_context& ctx, const models::any_model& m, counters& per_model, std::span<const std::size_t> idx) {
  auto count = [&](std::atomic<std::uint64_t> counters::*field) {
    ++(ctx.total.*field);
    ++(per_model.*field);
  };
  auto failed = [&](std::size_t i, const error_info& e) {
    count(&counters::errors);
    ctx.rep.error(ctx.items[i].where, m.name(), e);
  };
  struct pending {
    std::size_t item;
    cache::cache_key key;
    tensor input;
  };
  std::vector<pending> todo;
  for (std::size_t i : idx) {
    try {
      auto c = load(ctx.items[i], ctx.limits);
      if (!c) {
        failed(i, c.error());
        continue;
      }
      const auto key = cache::make_key({m.name(), m.version(), m.preprocess_key(), c->bytes});
      if (ctx.store.contains(key)) {
        count(&counters::hits);
        continue;
      }
      if (!ctx.claims.claim(key)) {
        count(&counters::duplicates);
        continue;
      }
      auto in = m.preprocess(c->bytes, ctx.limits);
      if (!in) {
        ctx.claims.release(key);
        failed(i, in.error());
        continue;
      }
      todo.push_back({i, key, std::move(*in)});
    } catch (const std::exception& e) {  // bad_alloc and the like: this item fails, the run goes on
      failed(i, fail(errc::internal, e.what()));
    }
  }
  for (std::size_t lo = 0; lo < todo.size(); lo += m.max_batch_size()) {
    const std::size_t hi = std::min(todo.size(), lo + m.max_batch_size());
    std::vector<tensor> batch;
    for (std::size_t k = lo; k < hi; ++k) batch.push_back(std::move(todo[k].input));
    result<std::vector<models::named_tensors>> out = fail(errc::internal, "not run");
    try {
      out = m.run(batch);
    } catch (const std::exception& e) {
      out = fail(errc::internal, e.what());
    }
    batch.clear();
    for (std::size_t k = lo; k < hi; ++k) {
      if (!out) {
        ctx.claims.release(todo[k].key);
        failed(todo[k].item, out.error());
        continue;
      }
      const auto& outs = (*out)[k - lo];
      std::vector<cache::named_tensor> named;
      for (const auto& [name, t] : outs) named.emplace_back(name, t.view());
      auto value = cache::encode_value(named, ctx.value_opts);
      if (!value) {
        ctx.claims.release(todo[k].key);
        failed(todo[k].item, value.error());
        continue;
      }
      if (!ctx.store.put(todo[k].key, *value)) {
        ++ctx.total.put_failures;
        ++per_model.put_failures;
      }
      count(&counters::computed);
    }
  }
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
  std::snprintf(buf, sizeof buf, "%llu/%llu items (%.0f%%)  %.1f/s  elapsed %s  ETA %s", static_cast<unsigned long long>(done),
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
  app.add_option("--limit", limit, "stop after N fields (0 = all)");
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
  walker w(limits, rep, limit);
  for (const auto& d : data) w.walk(d);
  const auto& items = w.items();

  // Jobs: (model, item) for every item of the model's modality, in chunks spread over the threads.
  cache::value_options vo;
  if (compress) vo.compression = format::compression::zstd;
  claim_set claims;
  counters total;
  std::vector<std::unique_ptr<counters>> per_model;
  std::vector<std::vector<std::size_t>> jobs(model_set.size());
  for (std::size_t mi = 0; mi < model_set.size(); ++mi) {
    per_model.push_back(std::make_unique<counters>());
    for (std::size_t i = 0; i < items.size(); ++i)
      if (items[i].kind == model_set[mi].input_modality()) jobs[mi].push_back(i);
    per_model[mi]->jobs = jobs[mi].size();
    total.jobs += jobs[mi].size();
  }
  const run_context ctx{items, store, limits, vo, rep, claims, total};
  std::uint64_t job_total = total.jobs;
  {
    thread_pool pool(threads);
    std::vector<std::future<void>> futs;
    for (std::size_t mi = 0; mi < model_set.size(); ++mi) {
      const std::size_t n = jobs[mi].size();
      const std::size_t chunk = std::clamp<std::size_t>((n + threads - 1) / threads, 1, model_set[mi].max_batch_size());
      for (std::size_t lo2 = 0; lo2 < n; lo2 += chunk) {
        const std::span<const std::size_t> idx(jobs[mi].data() + lo2, std::min(chunk, n - lo2));
        futs.push_back(pool.submit([&ctx, &m = model_set[mi], &pm = *per_model[mi], idx] { process_chunk(ctx, m, pm, idx); }));
      }
    }
    auto last = clock_type::now();
    for (auto& f : futs) {
      while (f.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
        const auto now = clock_type::now();
        if (no_progress || (!tty && now - last < std::chrono::seconds(5))) continue;
        last = now;
        rep.line(progress_line(total.done(), job_total, std::chrono::duration<double>(now - t0).count(), tty), tty);
      }
      f.get();
    }
  }
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  if (!no_progress) rep.line(progress_line(total.done(), job_total, seconds, tty) + (tty ? "\n" : ""), tty);

  const std::uint64_t errors = total.errors + w.errors();
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
  std::printf("  sources %llu, fields skipped (no model for them) %llu, walk errors %llu\n", static_cast<unsigned long long>(w.sources()),
              static_cast<unsigned long long>(w.skipped()), static_cast<unsigned long long>(w.errors()));
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
