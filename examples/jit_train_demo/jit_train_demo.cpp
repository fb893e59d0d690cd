// jit_train_demo: the job jitembed is for. A small conditional denoiser is trained on the image and video
// latents of a multimodal data set, conditioned on the pooled embedding of each caption.
//
//   --mode jit (default)  the embeddings come just in time from jitembed-server (a local one on a free
//                         loopback port, or --endpoints / --endpoints-file) through the prefetching
//                         jit_loader and its cache (memory, plus LMDB with --cache-dir): the training step
//                         only waits when the service falls behind, and epoch 2 onwards hits the cache.
//   --mode inline         the baseline: the training step computes its batch's embeddings itself with the
//                         in-process reference models.
//
// Both modes emulate the same encoder time (--sleep-us per batch, --sleep-us-per-row per row: the server's
// models sleep in jit mode, the in-process ones in inline mode), see the same batches in the same order
// (the loader's deterministic plan) and so print the same per-epoch losses for the same --seed.
// --tp 2 trains the MLP tensor-parallel on two Gloo ranks (threads): each rank loads its own share of every
// step (rank / world_size), the ranks all-gather the batch, and the TP MLP runs over it.
// --model-repository DIR: real encoders instead of the reference models: the Triton-layout repository
// scripts/export_models.py writes (a diffusers VAE, the per-frame video VAE, a T5 encoder; TorchScript on
// LibTorch). jit mode starts its servers with --model-repository DIR and takes the embedding shapes from
// the served models' metadata; inline mode (and --verify) loads the same models in this process as the
// server does. Real encoders are not bitwise reproducible across batch compositions, so --verify compares
// within --verify-tolerance (1e-5 max abs by default there; bitwise for the reference models).
//
// Ends with a summary table, an HTML report with SVG charts (--report) and one JSON line.
#if JIT_TRAIN_DEMO_HAS_REPOSITORY
#include "jitembed/models/torch_repository.hpp"  // LibTorch first (its glog macros)
#endif

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "data.hpp"
#include "denoiser.hpp"
#include "embeddings.hpp"
#include "jitembed/cache/memory_cache.hpp"
#include "jitembed/cache/tiered_cache.hpp"
#include "jitembed/loader/epoch_plan.hpp"
#include "jitembed/client/jit_client.hpp"
#include "jitembed/loader/jit_loader.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/parallel/gloo.hpp"
#include "lookup_log.hpp"
#include "report.hpp"
#include "server_process.hpp"
#ifdef JITEMBED_HAS_LMDB
#include "jitembed/cache/lmdb_cache.hpp"
#endif

#ifndef JIT_TRAIN_DEMO_SERVER_BIN
#define JIT_TRAIN_DEMO_SERVER_BIN "jitembed-server"
#endif
#ifndef JIT_TRAIN_DEMO_OUT_DIR
#define JIT_TRAIN_DEMO_OUT_DIR "jit_train_demo_out"
#endif

namespace {

using namespace jitembed;
using namespace jit_train_demo;
using clock_type = std::chrono::steady_clock;
using comm_t = parallel::gloo_communicator;

double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

struct cli_options {
  std::string mode = "jit";
  std::string data_dir, out_dir = JIT_TRAIN_DEMO_OUT_DIR, report;
  data_spec data;
  int epochs = 3;
  int batch = 16;  // samples per step, all ranks together
  int tp = 1;
  std::uint64_t seed = 1;
  denoiser_config model;
  model_settings embed;
  model_names names;                 // the served models and outputs (model_names::repository() with --model-repository)
  std::string model_repository;      // real encoders (TorchScript / AOTInductor) from a Triton-layout repository
  float verify_tolerance = -1;       // --verify: max abs; < 0: 0 (bitwise) for the reference models, 1e-5 for a repository
  std::string endpoints, endpoints_file, server_bin = JIT_TRAIN_DEMO_SERVER_BIN;
  std::vector<std::string> identities;  // --identity MODEL[:INPUT]=FINGERPRINT,PREPROCESS_KEY (Triton models)
  int servers = 1, server_instances = 2;
  std::size_t samples_per_request = 8, requests_in_flight = 8, workers = 2;
  std::size_t cache_mb = 256;
  std::string cache_dir;
  bool shuffle = true, verify = false, progress = true;
};

// Cumulative counters of a batch source (one rank).
struct source_counters {
  std::uint64_t requests = 0, cache_hits = 0, cache_misses = 0, resubmits = 0;
};

// Where a rank's batches come from: the jit_loader, or the inline computation that replays its plan.
class batch_source {
 public:
  virtual ~batch_source() = default;
  // The next step of this rank; nullopt once at the end of each epoch (the next call starts the next one).
  virtual result<std::optional<loader::step>> next() = 0;
  virtual source_counters counters() const = 0;
};

class loader_source final : public batch_source {
 public:
  explicit loader_source(loader::jit_loader l) : loader_(std::move(l)) {}
  result<std::optional<loader::step>> next() override { return loader_.next(); }
  source_counters counters() const override {
    const auto s = loader_.stats();
    return {s.requests, s.cache_hits, s.cache_misses, s.resubmits};
  }

 private:
  loader::jit_loader loader_;
};

// The baseline: the same steps as the loader (its deterministic plan: permutation from seed and epoch,
// this rank's strided share, the same step sizes), each batch's embeddings computed in the call.
class inline_source final : public batch_source {
 public:
  inline_source(format::dataset ds, model_set m, std::uint64_t rank, std::uint64_t world, std::uint64_t batch, std::uint64_t seed,
                bool shuffle)
      : ds_(std::move(ds)), models_(std::move(m)), rank_(rank), world_(world), batch_(batch), seed_(seed), shuffle_(shuffle) {
    plan_ = loader::epoch_plan::make(ds_.size(), world_, rank_, batch_, seed_, epoch_, shuffle_);
  }
  result<std::optional<loader::step>> next() override {
    if (step_ == plan_.steps()) {
      plan_ = loader::epoch_plan::make(ds_.size(), world_, rank_, batch_, seed_, ++epoch_, shuffle_);
      step_ = 0;
      return std::optional<loader::step>();
    }
    std::vector<std::uint64_t> idx;
    const std::uint64_t lo = step_ * batch_;
    for (std::uint64_t j = lo; j < lo + plan_.step_size(step_); ++j) idx.push_back(plan_.index(j));
    loader::step b;
    b.epoch = epoch_;
    b.index = step_++;
    b.samples = embed_in_process(ds_, idx, models_);
    return std::optional<loader::step>(std::move(b));
  }
  source_counters counters() const override { return {}; }

 private:
  format::dataset ds_;
  model_set models_;
  std::uint64_t rank_, world_, batch_, seed_;
  bool shuffle_;
  std::uint64_t epoch_ = 0, step_ = 0;
  loader::epoch_plan plan_;
};

// What the ranks share: delivery bookkeeping (by sample id, over every rank), per-epoch totals and rank 0's
// timeline.
struct shared_state {
  std::mutex mu;
  std::vector<std::unordered_map<std::string, int>> seen;  // per epoch: sample id -> deliveries
  std::int64_t failed = 0, verified = 0, mismatches = 0;
  std::vector<std::string> problems;  // first few failures / mismatches, for the notes
  std::uint64_t first_epoch_embeddings = 0;  // received in epoch 1 by every rank: the cache lookups it made
  std::vector<source_counters> epoch_counters;  // per epoch, summed over ranks (deltas)
  run_record rec;
  std::atomic<bool> failed_run{false};
  std::string fatal;

  void problem(std::string s) {
    if (problems.size() < 5) problems.push_back(std::move(s));
  }
};

// The jitembed-server flags that serve the models this demo's model is sized for (a server's defaults give
// other shapes: image latents [4,32,32], video latents [4,4,32,32], 768-dim captions).
std::string server_flags(const model_settings& m) {
  std::string out;
  for (const auto& a : m.server_model_args()) out += (out.empty() ? "" : " ") + a;
  return out;
}

// The model input of one sample: [noisy latent, pooled caption, noise level] and the noise. The noise and
// its level come from (seed, epoch, sample id), so every mode and rank layout draws the same ones. A
// caption embedding of several positions ([L, C]: a T5 encoder's last hidden state) is mean-pooled over them.
void sample_features(const cli_options& o, std::uint64_t epoch, const std::string& id, const tensor& latent, const tensor& caption,
                     float* x, float* eps) {
  const std::int64_t L = o.model.latent_dim, C = o.model.cond_dim;
  rng r(mix(mix(o.seed, epoch), xxh3_64(as_bytes_view(id))));
  const float a = static_cast<float>(0.02 + 0.96 * r.uniform());
  const float sa = std::sqrt(a), sn = std::sqrt(1 - a);
  const float* z = latent.data<const float>();
  for (std::int64_t i = 0; i < L; ++i) {
    eps[i] = r.normal();
    x[i] = sa * z[i] + sn * eps[i];
  }
  const float* c = caption.data<const float>();
  const std::int64_t positions = static_cast<std::int64_t>(caption.numel()) / C;
  if (positions == 1) {
    std::memcpy(x + L, c, static_cast<std::size_t>(C) * sizeof(float));
  } else {
    for (std::int64_t j = 0; j < C; ++j) {
      double sum = 0;
      for (std::int64_t p = 0; p < positions; ++p) sum += c[p * C + j];
      x[L + j] = static_cast<float>(sum / static_cast<double>(positions));
    }
  }
  x[L + C] = a;
}

// One rank's training loop.
void run_rank(int rank, const cli_options& o, parallel::shared_store store, batch_source& src, const format::dataset& ds,
              const model_set* reference, shared_state& sh, clock_type::time_point t0) {
  math::set_blas_threads(1);
  auto comm = comm_t::create(store, rank, o.tp).value();
  denoiser<comm_t> model(comm, o.model);
  const float tolerance = o.verify_tolerance;
  if (rank == 0) sh.rec.parameters = model.parameter_count();
  const std::int64_t L = o.model.latent_dim, C = o.model.cond_dim, D = o.model.input_dim();
  double last_progress = -1;
  source_counters before{};  // the loader counts from its creation: it prefetches before the first next()

  for (int e = 0; e < o.epochs; ++e) {
    const double epoch_t0 = e == 0 ? 0.0 : seconds_since(t0);  // epoch 1 includes the start-up: epochs sum to the run
    double sse = 0, epoch_stall = 0;
    std::int64_t rows_total = 0, delivered = 0;
    std::uint64_t step = 0;
    while (true) {
      const auto w0 = clock_type::now();
      auto b = src.next();
      double stall = seconds_since(w0);
      if (!b) throw error(b.code(), "rank " + std::to_string(rank) + ": next(): " + b.error().message);
      if (!*b) break;
      auto& samples = (*b)->samples;

      // Bookkeeping by id, then the reference check.
      {
        std::lock_guard lock(sh.mu);
        for (const auto& s : samples) {
          if (e == 0) sh.first_epoch_embeddings += s.embeddings.size();
          ++sh.seen[static_cast<std::size_t>(e)][s.id.empty() ? "#" + std::to_string(s.index) : s.id];
          if (!s.ok()) {
            ++sh.failed;
            sh.problem("sample " + s.id + " failed: " + std::string(to_string(s.error->code)) + ": " + s.error->message);
          }
        }
      }
      if (reference) {  // the in-process encoders on the same samples
        std::vector<std::uint64_t> idx;
        for (const auto& s : samples)
          if (s.ok()) idx.push_back(s.index);
        const auto want = embed_in_process(ds, idx, *reference);
        std::size_t k = 0;
        std::int64_t ok = 0, bad = 0;
        std::vector<std::string> why_all;
        for (const auto& s : samples) {
          if (!s.ok()) continue;
          std::string why;
          if (want[k].ok() && want[k].id == s.id && same_embeddings(s, want[k], &why, tolerance)) ++ok;
          else ++bad, why_all.push_back("sample " + s.id + ": " + (want[k].ok() ? why : "reference failed"));
          ++k;
        }
        std::lock_guard lock(sh.mu);
        sh.verified += ok;
        sh.mismatches += bad;
        for (auto& w : why_all) sh.problem(std::move(w));
      }

      // This rank's rows, then the whole batch on every rank.
      std::vector<const loader::embedded_sample*> usable;
      for (const auto& s : samples) {
        if (!s.ok()) continue;
        const tensor* lat = s.find(kImageLatent);
        if (!lat) lat = s.find(kVideoLatent);
        const tensor* cap = s.find(kCaption);
        if (!lat || !cap) continue;  // a sample without media or caption is delivered but not trained on
        if (lat->dtype() != dtype::f32 || static_cast<std::int64_t>(lat->numel()) != L || cap->dtype() != dtype::f32 ||
            cap->rank() < 1 || cap->shape()[cap->rank() - 1] != C || !lat->is_contiguous() || !cap->is_contiguous())
          throw error(errc::invalid_argument,
                      "sample " + s.id + ": latent " + lat->shape().to_string() + " / caption " + cap->shape().to_string() +
                          " do not match the model (" + std::to_string(L) + " latent values, " + std::to_string(C) +
                          "-dim caption, f32): the servers serve other model settings; " +
                          (o.model_repository.empty()
                               ? "start each jitembed-server with " + server_flags(o.embed) +
                                     " (what this demo passes to the servers it starts without --endpoints)"
                               : std::string("the served models' metadata gave other shapes than their outputs")));
        usable.push_back(&s);
      }
      const auto n = static_cast<std::int64_t>(usable.size());
      tensor x_local = tensor::empty(shape{n, D}, dtype::f32), eps_local = tensor::empty(shape{n, L}, dtype::f32);
      for (std::int64_t i = 0; i < n; ++i) {
        const auto* s = usable[static_cast<std::size_t>(i)];
        const tensor* lat = s->find(kImageLatent) ? s->find(kImageLatent) : s->find(kVideoLatent);
        sample_features(o, static_cast<std::uint64_t>(e), s->id, *lat, *s->find(kCaption), x_local.data<float>() + i * D,
                        eps_local.data<float>() + i * L);
      }
      const auto t1 = clock_type::now();
      tensor x = gather_rows(comm, x_local), eps = gather_rows(comm, eps_local);
      // The step waited for the slowest rank's batch: take the largest stall of the ranks.
      tensor st = tensor::empty(shape{2}, dtype::f64);
      st.data<double>()[0] = stall;
      st.data<double>()[1] = static_cast<double>(samples.size());
      tensor st_sum = tensor::empty(shape{2}, dtype::f64);
      std::memcpy(st_sum.data(), st.data(), st.nbytes());
      st_sum.data<double>()[0] = 0;
      if (o.tp > 1) {
        comm.all_reduce(st, parallel::reduce_op::max).value();
        comm.all_reduce(st_sum, parallel::reduce_op::sum).value();
      }
      stall = st.data<double>()[0];
      const auto step_samples = static_cast<std::int64_t>(st_sum.data<double>()[1]);
      if (x.size(0) > 0) sse += model.step(x, eps);
      rows_total += x.size(0);
      epoch_stall += stall;
      delivered += step_samples;
      const double train = seconds_since(t1);
      ++step;

      if (rank == 0) {
        const double now = seconds_since(t0);
        std::lock_guard lock(sh.mu);
        sh.rec.steps.push_back({now, stall, train, e, step_samples});
        sh.rec.stall_s += stall;
        sh.rec.train_s += train;
        if (o.progress && (now - last_progress >= 0.1)) {
          last_progress = now;
          std::int64_t total = 0;
          for (const auto& s : sh.rec.steps) total += s.samples;
          std::fprintf(stderr, "\r[%s tp%d] epoch %d/%d step %llu  %7.1f samples/s  stall %5.1f%%  loss %.4f   ", o.mode.c_str(),
                       o.tp, e + 1, o.epochs, static_cast<unsigned long long>(step), static_cast<double>(total) / std::max(now, 1e-9),
                       100 * sh.rec.stall_s / std::max(now, 1e-9), rows_total ? sse / static_cast<double>(rows_total * L) : 0.0);
          std::fflush(stderr);
        }
      }
    }
    const source_counters after = src.counters();
    std::lock_guard lock(sh.mu);
    auto& ec = sh.epoch_counters[static_cast<std::size_t>(e)];
    ec.requests += after.requests - before.requests;
    ec.cache_hits += after.cache_hits - before.cache_hits;
    ec.cache_misses += after.cache_misses - before.cache_misses;
    ec.resubmits += after.resubmits - before.resubmits;
    before = after;
    if (rank == 0) {
      epoch_record er;
      er.loss = rows_total ? sse / static_cast<double>(rows_total * L) : 0.0;
      er.samples = delivered;
      er.seconds = seconds_since(t0) - epoch_t0;
      er.stall_s = epoch_stall;
      sh.rec.epochs.push_back(er);
    }
  }
  comm.barrier().value();
}

// An any_store holding an S made from args, in place.
template <class S, class... Args>
cache::any_store make_store(Args&&... args) {
  return cache::any_store(std::in_place_type<S>, std::forward<Args>(args)...);
}

// The cache the loaders share: memory, then LMDB under --cache-dir.
result<cache::any_store> make_cache(const cli_options& o) {
  auto mem = make_store<cache::memory_cache>(o.cache_mb << 20);
  if (o.cache_dir.empty()) return mem;
#ifdef JITEMBED_HAS_LMDB
  // No fsync per put: a lost put after an OS crash is only a future miss.
  auto l = cache::lmdb_cache::open({.path = o.cache_dir, .sync = false});
  if (!l) return l.error();
  cache::any_store disk;
  if constexpr (std::is_same_v<std::remove_cvref_t<decltype(*l)>, cache::lmdb_cache>)
    disk = make_store<cache::lmdb_cache>(std::move(*l));
  else
    disk = cache::any_store(std::move(*l));
  return make_store<cache::tiered_cache>(std::vector<cache::any_store>{mem, disk});
#else
  return fail(errc::invalid_argument, "--cache-dir needs the LMDB component (built without it)");
#endif
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const auto c = s.find(',', pos);
    std::string item = s.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    if (!item.empty()) out.push_back(item);
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return out;
}

// The item shape of a served output (its metadata's shape without the batch dimension).
std::vector<std::int64_t> item_shape(const client::served_tensor& t) {
  std::vector<std::int64_t> s = t.shape;
  if (!s.empty() && s.front() == -1) s.erase(s.begin());
  return s;
}

// The denoiser's sizes from the encoders' output shapes: the latent (image and video latents flatten to the
// same size) and the caption's last extent (the pooled dimension). Each must be fixed (no -1, no 0).
void set_dims(cli_options& o, const std::vector<std::int64_t>& image, const std::vector<std::int64_t>& video,
              const std::vector<std::int64_t>& text) {
  const auto str = [](const std::vector<std::int64_t>& v) { return jitembed::shape(v).to_string(); };
  const auto image_n = checked_numel(image), video_n = checked_numel(video);
  if (!image_n || *image_n == 0 || text.empty() || text.back() < 1)
    throw error(errc::invalid_argument, "the encoders' outputs " + str(image) + " / " + str(text) + " have no fixed size");
  if (!video_n || *video_n != *image_n)
    throw error(errc::invalid_argument, "image latent " + str(image) + " and video latent " + str(video) +
                                            " differ in size: the denoiser takes both");
  o.model.latent_dim = static_cast<std::int64_t>(*image_n);
  o.model.cond_dim = text.back();
}

// The models' output shapes from the servers' metadata (--model-repository in jit mode), and the output
// names when they were left to the model (its first output).
void dims_from_metadata(cli_options& o, client::jit_client& cl) {
  std::vector<std::int64_t> shapes[3];
  std::string* outputs[3] = {&o.names.image_output, &o.names.video_output, &o.names.text_output};
  const std::string* models[3] = {&o.names.image, &o.names.video, &o.names.text};
  for (int i = 0; i < 3; ++i) {
    auto md = cl.metadata(*models[i]);
    if (!md) throw error(md.code(), "metadata of '" + *models[i] + "': " + md.error().message);
    const auto* t = md->output(*outputs[i]);
    if (!t) throw error(errc::not_found, "model '" + *models[i] + "' has no output '" + *outputs[i] + "'");
    *outputs[i] = t->name;
    shapes[i] = item_shape(*t);
  }
  set_dims(o, shapes[0], shapes[1], shapes[2]);
}

// The same from models loaded in this process.
void dims_from_models(cli_options& o, const model_set& m) {
  const auto shape_of = [](const models::any_model& mod, const std::string& output) {
    for (const auto& t : mod.outputs())
      if (output.empty() || t.name == output) return std::vector<std::int64_t>(t.shape.begin(), t.shape.end());
    throw error(errc::not_found, "model '" + std::string(mod.name()) + "' has no output '" + output + "'");
  };
  set_dims(o, shape_of(m.image, m.names.image_output), shape_of(m.video, m.names.video_output), shape_of(m.text, m.names.text_output));
}

int run(cli_options& o) {
  namespace fs = std::filesystem;
  if (o.mode != "jit" && o.mode != "inline") throw error(errc::invalid_argument, "--mode must be jit or inline");
  if (o.tp < 1 || o.batch % o.tp != 0) throw error(errc::invalid_argument, "--batch must be a multiple of --tp");
  const bool repository = !o.model_repository.empty();
  if (!repository && o.embed.video_latent_dim() != o.embed.latent_dim())
    throw error(errc::invalid_argument, "image and video latents must have the same size (image bucket, video bucket and frames)");
  if (repository) {
    o.embed.sleep_us = o.embed.sleep_us_per_row = 0;  // real encoders take their own time
  } else {
    o.model.latent_dim = o.embed.latent_dim();
    o.model.cond_dim = o.embed.text_dim;
  }
  if (o.verify_tolerance < 0) o.verify_tolerance = repository ? 1e-5f : 0.f;
  o.model.seed = o.seed;

  // The encoders in this process: the inline baseline's and --verify's. With a repository, LibTorch here.
  std::optional<model_set> local, reference;
  if (repository && (o.mode == "inline" || o.verify)) {
#if JIT_TRAIN_DEMO_HAS_REPOSITORY
    local = model_set::open_repository(o.model_repository, o.names).value();
    dims_from_models(o, *local);
#else
    throw error(errc::invalid_argument, "--model-repository with --mode inline or --verify runs the encoders in this process: this "
                                        "jit_train_demo is built without LibTorch or the repository component (JITEMBED_WITH_TORCH, "
                                        "JITEMBED_WITH_REPOSITORY); --mode jit without --verify needs neither");
#endif
  }
  if (o.verify) reference = repository ? *local : model_set::create(o.embed, false).value();
  fs::create_directories(o.out_dir);

  // Data: --data as given, or the generated set (made on first run).
  if (o.data_dir.empty()) {
    o.data.seed = o.seed;
    o.data_dir = (fs::path(o.out_dir) / ("data-" + std::to_string(o.data.images) + "i" + std::to_string(o.data.videos) + "v-seed" +
                                          std::to_string(o.seed)))
                     .string();
    const auto g0 = clock_type::now();
    if (ensure_data(o.data_dir, o.data).value())
      std::fprintf(stderr, "generated %d images and %d clips with captions in %s (%.1f s)\n", o.data.images, o.data.videos,
                   o.data_dir.c_str(), seconds_since(g0));
  }
  auto ds = format::dataset::open(o.data_dir).value();
  if (ds.empty()) throw error(errc::not_found, "no samples under " + o.data_dir);

  shared_state sh;
  sh.seen.resize(static_cast<std::size_t>(o.epochs));
  sh.epoch_counters.resize(static_cast<std::size_t>(o.epochs));
  auto& rec = sh.rec;
  rec.mode = o.mode;
  rec.tp = o.tp;
  rec.data_dir = o.data_dir;
  rec.dataset_size = static_cast<std::int64_t>(ds.size());
  rec.batch = o.batch;
  rec.sleep_us = o.embed.sleep_us;
  rec.sleep_us_per_row = o.embed.sleep_us_per_row;
  rec.models = repository ? o.names.image + ", " + o.names.video + ", " + o.names.text + " from " + o.model_repository : "";

  // jit: the servers (unless given), the client, the shared cache and one loader per rank.
  std::vector<server_process> servers;
  std::optional<client::jit_client> cl;
  std::vector<std::unique_ptr<batch_source>> sources;
  std::optional<lookup_log> cache_log;  // around the cache the ranks' loaders share (a handle: copies share the log)
  const auto per_rank_batch = static_cast<std::size_t>(o.batch / o.tp);
  if (o.mode == "jit") {
    client::client_options co;
    for (const auto& f : o.identities) {
      auto id = client::parse_identity_flag(f);
      if (!id) {
        std::fprintf(stderr, "error: %s\n", id.error().message.c_str());
        return 2;
      }
      co.identities[id->first] = std::move(id->second);
    }
    if (!o.endpoints_file.empty()) {
      co.endpoints.file = o.endpoints_file;
      rec.endpoints = "the servers listed in " + o.endpoints_file;
    } else {
      co.endpoints.list = split_list(o.endpoints);
      if (co.endpoints.list.empty()) {
        std::vector<std::string> args{"--host", "127.0.0.1", "--port", "0"};
        if (repository) {
          args.insert(args.end(), {"--model-repository", o.model_repository});  // instances: the configs' instance_group
        } else {
          args.insert(args.end(), {"--instances", std::to_string(o.server_instances)});
          for (auto& a : o.embed.server_model_args()) args.push_back(a);
        }
        // A repository's models load before the server listens (LibTorch and the model files: seconds).
        const auto start_timeout = repository ? std::chrono::seconds(180) : std::chrono::seconds(20);
        for (int i = 0; i < o.servers; ++i) {
          servers.push_back(server_process::create(o.server_bin, args, start_timeout).value());
          co.endpoints.list.push_back(servers.back().url());
        }
        rec.endpoints = std::to_string(o.servers) + " local jitembed-server (" + co.endpoints.list.front() + (o.servers > 1 ? ", ..." : "") + ")";
      } else {
        rec.endpoints = o.endpoints;
      }
    }
    cl = client::jit_client::create(std::move(co)).value();
    if (repository) dims_from_metadata(o, *cl);
    cache_log.emplace(make_cache(o).value());
    for (int r = 0; r < o.tp; ++r) {
      loader::loader_options lo;
      lo.embeddings = embedding_specs(o.names);
      lo.batch_size = per_rank_batch;
      lo.samples_per_request = o.samples_per_request;
      lo.requests_in_flight = o.requests_in_flight;
      lo.workers = o.workers;
      lo.max_buffered = std::max<std::size_t>(4 * per_rank_batch, o.samples_per_request * o.requests_in_flight);
      lo.rank = static_cast<std::size_t>(r);
      lo.world_size = static_cast<std::size_t>(o.tp);
      lo.seed = o.seed;
      lo.shuffle = o.shuffle;
      lo.cache = make_store<lookup_log>(*cache_log);
      sources.push_back(std::make_unique<loader_source>(loader::jit_loader::create(ds, *cl, std::move(lo)).value()));
    }
  } else {
    for (int r = 0; r < o.tp; ++r)
      sources.push_back(std::make_unique<inline_source>(ds, repository ? *local : model_set::create(o.embed, true).value(), r, o.tp,
                                                        per_rank_batch, o.seed, o.shuffle));
  }

  // Train: one thread per rank (Gloo over loopback).
  parallel::shared_store store(parallel::hash_store{});
  const auto t0 = clock_type::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < o.tp; ++r) {
    threads.emplace_back([&, r] {
      try {
        run_rank(r, o, store, *sources[static_cast<std::size_t>(r)], ds, reference ? &*reference : nullptr, sh, t0);
      } catch (const std::exception& e) {
        std::lock_guard lock(sh.mu);
        if (!sh.failed_run.exchange(true)) sh.fatal = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  rec.wall_s = seconds_since(t0);
  if (o.progress) std::fprintf(stderr, "\n");
  if (sh.failed_run) throw std::runtime_error(sh.fatal);

  // Totals: lost and duplicated from the delivered ids, per epoch.
  for (const auto& seen : sh.seen) {
    std::int64_t distinct = 0;
    for (const auto& [id, count] : seen) {
      ++distinct;
      rec.duplicated_samples += count - 1;
      rec.samples += count;
    }
    rec.lost_samples += rec.dataset_size - distinct;
  }
  rec.failed_samples = sh.failed;
  rec.verified_samples = sh.verified;
  rec.verify_mismatches = sh.mismatches;
  for (std::size_t e = 0; e < rec.epochs.size(); ++e) {
    const auto& c = sh.epoch_counters[e];
    rec.epochs[e].embed_requests = c.requests;
    rec.embed_requests += c.requests;
    rec.retries += c.resubmits;
  }
  if (cache_log) {
    const auto split = cache_log->per_epoch(rec.epochs.size(), sh.first_epoch_embeddings);
    for (std::size_t e = 0; e < rec.epochs.size(); ++e) {
      rec.epochs[e].cache_hits = split[e].first;
      rec.epochs[e].cache_lookups = split[e].second;
    }
  }
  if (cl) {
    const auto cs = cl->stats();
    rec.retries += cs.retries;
    rec.hedges = cs.hedges;
  }
  for (auto& p : sh.problems) rec.notes.push_back(p);
  sources.clear();  // loaders before the client, the client before the servers
  cl.reset();
  for (auto& s : servers) s.stop();

  const auto j = to_json(rec);
  std::cout << summary_table(rec);
  if (o.report.empty()) o.report = (fs::path(o.out_dir) / ("report-" + o.mode + (o.tp > 1 ? "-tp" + std::to_string(o.tp) : "") + ".html")).string();
  if (write_html_report(o.report, rec, j)) std::cout << "  report: " << o.report << "\n";
  else std::cerr << "warning: cannot write " << o.report << "\n";
  std::cout << j.dump() << std::endl;
  const bool ok = rec.lost_samples == 0 && rec.duplicated_samples == 0 && rec.failed_samples == 0 && rec.verify_mismatches == 0;
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  cli_options o;
  CLI::App app{"jit_train_demo: train a conditional denoiser with embeddings computed just in time (or inline)"};
  app.add_option("--mode", o.mode, "jit (embeddings from the service, prefetched and cached) or inline (computed in the step)")
      ->check(CLI::IsMember({"jit", "inline"}));
  app.add_option("--data", o.data_dir, "data directory (images/videos with same-stem .txt captions, .jems shards, tars); default: generated");
  app.add_option("--images", o.data.images, "generated images")->check(CLI::Range(0, 100000));
  app.add_option("--videos", o.data.videos, "generated clips")->check(CLI::Range(0, 10000));
  app.add_option("--epochs", o.epochs, "epochs")->check(CLI::Range(1, 1000));
  app.add_option("--batch", o.batch, "samples per step (all ranks together)")->check(CLI::Range(1, 4096));
  app.add_option("--tp", o.tp, "tensor-parallel ranks (Gloo, threads)")->check(CLI::Range(1, 8));
  app.add_option("--seed", o.seed, "seed of the data, the model and the noise");
  app.add_option("--lr", o.model.lr, "Adam learning rate");
  app.add_option("--hidden", o.model.hidden, "MLP width")->check(CLI::Range(8, 16384));
  app.add_option("--ffn", o.model.ffn, "MLP inner width (a multiple of --tp)")->check(CLI::Range(8, 65536));
  app.add_option("--sleep-us", o.embed.sleep_us, "emulated encoder time per batch, in both modes (us)")->capture_default_str()->check(CLI::Range(0, 10000000));
  app.add_option("--sleep-us-per-row", o.embed.sleep_us_per_row, "emulated encoder time per row, in both modes (us)")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000000));
  app.add_option("--endpoints", o.endpoints, "comma-separated server URLs (http://, https://, grpc:// or grpcs://host:port); default: start a local jitembed-server");
  app.add_option("--endpoints-file", o.endpoints_file, "file with one server URL per line (re-read when it changes)");
  app.add_option("--identity", o.identities,
                 "MODEL[:INPUT]=FINGERPRINT,PREPROCESS_KEY: the cache-key identity of a model whose server publishes none "
                 "(a Triton model without the config parameters fingerprint / preprocess_key); repeatable");
  app.add_option("--model-repository", o.model_repository,
                 "real encoders: a Triton-layout model repository (scripts/export_models.py --out DIR): jit mode starts its servers "
                 "on it, inline mode and --verify load its models here (LibTorch)");
  std::string image_model, video_model, text_model;
  app.add_option("--image-model", image_model, "image encoder (default: image-latent, or vae_encoder with --model-repository)");
  app.add_option("--video-model", video_model, "video encoder (default: video-latent, or video_encoder with --model-repository)");
  app.add_option("--text-model", text_model, "caption encoder (default: text-embed, or t5_encoder with --model-repository)");
  app.add_option("--verify-tolerance", o.verify_tolerance,
                 "--verify: max abs difference allowed (default 0, bitwise, for the reference models; 1e-5 with --model-repository)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--server-bin", o.server_bin, "jitembed-server to start")->capture_default_str();
  app.add_option("--servers", o.servers, "local servers to start")->check(CLI::Range(1, 16));
  app.add_option("--server-instances", o.server_instances, "runner threads per model in each local server")->check(CLI::Range(1, 64));
  app.add_option("--samples-per-request", o.samples_per_request, "loader: samples per embed request")->check(CLI::Range(1, 1024));
  app.add_option("--requests-in-flight", o.requests_in_flight, "loader: requests in flight per rank")->check(CLI::Range(1, 1024));
  app.add_option("--workers", o.workers, "loader: worker threads per rank")->check(CLI::Range(1, 64));
  app.add_option("--cache-mb", o.cache_mb, "memory cache budget (MiB)");
  app.add_option("--cache-dir", o.cache_dir, "LMDB cache directory (kept across runs)");
  app.add_flag("!--no-shuffle", o.shuffle, "dataset order instead of a per-epoch permutation");
  app.add_flag("--verify", o.verify, "check every delivered embedding against the same encoders run in this process (--verify-tolerance)");
  app.add_flag("!--no-progress", o.progress, "no live progress line");
  app.add_option("--out", o.out_dir, "output directory (generated data, report)")->capture_default_str();
  app.add_option("--report", o.report, "HTML report file (default: OUT/report-MODE.html)");
  CLI11_PARSE(app, argc, argv);
  if (!o.model_repository.empty()) o.names = model_names::repository();
  if (!image_model.empty()) o.names.image = image_model, o.names.image_output = "";
  if (!video_model.empty()) o.names.video = video_model, o.names.video_output = "";
  if (!text_model.empty()) o.names.text = text_model, o.names.text_output = "";
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "\njit_train_demo: error: " << e.what() << "\n";
    return 2;
  }
}
