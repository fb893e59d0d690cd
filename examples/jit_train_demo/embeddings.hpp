// jit_train_demo: the embeddings a sample gets (its image or video latent and its caption's pooled text
// embedding), how the demo asks the loader for them, and how they are computed in-process — for the inline
// baseline and for --verify.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "jitembed/cache/value.hpp"  // loader_options.hpp uses cache::value_options without including it
#include "jitembed/format/dataset.hpp"
#include "jitembed/loader/options.hpp"
#include "jitembed/loader/step.hpp"
#include "jitembed/models/emulated_latency.hpp"
#include "jitembed/models/reference.hpp"
#if JIT_TRAIN_DEMO_HAS_REPOSITORY
#include "jitembed/models/torch_repository.hpp"
#include "jitembed/server/repository/local_models.hpp"
#include "jitembed/server/repository/model_repository.hpp"
#endif

namespace jit_train_demo {

using namespace jitembed;

// Model settings: both latents flatten to 4·8·8 = 256 values (images at 64×64; clips as 4 frames at 64×64,
// [4, 1, 8, 8]); captions give a 64-dim pooled embedding.
struct model_settings {
  int image_bucket = 64;
  int video_bucket = 64;
  int video_frames = 4;
  int text_dim = 64;
  int text_max_length = 32;
  // Emulated encoder time (a remote GPU's VAE / text encoder, without using a CPU here): per batch (run()
  // call) and per row. The same in both modes; --sleep-us 0 --sleep-us-per-row 0 leaves the CPU models alone.
  std::int64_t sleep_us = 4000;
  std::int64_t sleep_us_per_row = 500;

  models::reference_options reference() const {
    models::reference_options o;
    o.image_bucket = image_bucket;
    o.video_bucket = video_bucket;
    o.video_frames = video_frames;
    o.text_dim = text_dim;
    o.text_max_length = text_max_length;
    return o;
  }
  std::int64_t latent_dim() const { return 4LL * (image_bucket / 8) * (image_bucket / 8); }
  std::int64_t video_latent_dim() const { return 4LL * (video_frames / 4) * (video_bucket / 8) * (video_bucket / 8); }
  // `--model` arguments for jitembed-server that serve the same models with the same emulated latency.
  std::vector<std::string> server_model_args() const {
    const std::string lat = ",sleep_us=" + std::to_string(sleep_us) + ",sleep_us_per_row=" + std::to_string(sleep_us_per_row);
    return {"--model", "image-latent:image_bucket=" + std::to_string(image_bucket) + lat,
            "--model", "video-latent:video_bucket=" + std::to_string(video_bucket) + ",video_frames=" + std::to_string(video_frames) + lat,
            "--model", "text-embed:text_dim=" + std::to_string(text_dim) + ",text_max_length=" + std::to_string(text_max_length) + lat};
  }
};

inline constexpr const char* kImageLatent = "image_latent";
inline constexpr const char* kVideoLatent = "video_latent";
inline constexpr const char* kCaption = "caption";

// Which served models give the three embeddings, and which of their outputs: the reference models by
// default; with --model-repository the exported encoders (scripts/export_models.py: the VAE, the per-frame
// video VAE and the T5 encoder), whose first output is the embedding.
struct model_names {
  std::string image = "image-latent", video = "video-latent", text = "text-embed";
  std::string image_output = "latent", video_output = "latent", text_output = "pooled";  // empty: the first output

  static model_names repository() {
    return {"vae_encoder", "video_encoder", "t5_encoder", "", "", ""};
  }
};

inline std::vector<loader::embedding_spec> embedding_specs(const model_names& n = {}) {
  return {{kImageLatent, n.image, models::modality::image, n.image_output, ""},
          {kVideoLatent, n.video, models::modality::video, n.video_output, ""},
          {kCaption, n.text, models::modality::text, n.text_output, ""}};
}

// The three models in-process: the reference models (with or without the emulated latency), or the
// repository's encoders on LibTorch (open_repository).
struct model_set {
  models::any_model image, video, text;
  model_names names;

  static result<model_set> create(const model_settings& s, bool with_latency) {
    model_set m;
    const auto ref = s.reference();
    for (auto [name, dst] : {std::pair{"image-latent", &m.image}, std::pair{"video-latent", &m.video}, std::pair{"text-embed", &m.text}}) {
      auto r = models::reference_model::create(name, ref);
      if (!r) return r.error();
      *dst = std::move(*r);
      if (with_latency && (s.sleep_us > 0 || s.sleep_us_per_row > 0))
        *dst = models::any_model(models::emulated_latency(
            *dst, {std::chrono::microseconds(s.sleep_us), std::chrono::microseconds(s.sleep_us_per_row)}));
    }
    return m;
  }

#if JIT_TRAIN_DEMO_HAS_REPOSITORY
  // The models `n` names from the model repository at `dir`, loaded here as jitembed-server loads them
  // (the same backends, preprocessing and fingerprints): LibTorch in this process.
  static result<model_set> open_repository(const std::string& dir, const model_names& n) {
    server::repository_options ro;
    ro.backends.add("pytorch_libtorch", models::torch_script_backend());
    ro.backends.add("torch_aoti", models::torch_aoti_backend());
    JITEMBED_ASSIGN_OR_RETURN(auto repo, server::model_repository::open(dir, std::move(ro)));
    server::local_models local;
    model_set m;
    m.names = n;
    for (auto [name, dst] : {std::pair{&n.image, &m.image}, std::pair{&n.video, &m.video}, std::pair{&n.text, &m.text}}) {
      JITEMBED_TRY(repo.load(local, *name));
      *dst = *local.find(*name);
    }
    return m;
  }
#endif
};

namespace detail {

// Runs `m` on the preprocessed rows (in batches of its max_batch_size) and stores output `output` (empty:
// the first) of row k as embedding `name` of samples[owner[k]]; a failed batch fails its samples.
inline void run_rows(const models::any_model& m, const std::string& output, const char* name, std::vector<tensor>& rows,
                     const std::vector<std::size_t>& owner, std::vector<loader::embedded_sample>& samples) {
  const std::string& want = output.empty() ? m.outputs().front().name : output;
  const std::size_t step = std::max<std::size_t>(m.max_batch_size(), 1);
  for (std::size_t at = 0; at < rows.size(); at += step) {
    const std::size_t n = std::min(step, rows.size() - at);
    auto out = m.run(std::span<const tensor>(rows.data() + at, n));
    for (std::size_t k = 0; k < n; ++k) {
      auto& s = samples[owner[at + k]];
      if (s.error) continue;
      if (!out) {
        s.error = out.error();
        continue;
      }
      for (auto& [oname, t] : (*out)[k])
        if (oname == want) s.embeddings.emplace_back(name, t);
    }
  }
}

}  // namespace detail

// The samples at `indices`, with the embeddings the loader would deliver, computed here and now.
inline std::vector<loader::embedded_sample> embed_in_process(const format::dataset& ds, std::span<const std::uint64_t> indices,
                                                           const model_set& m, const decode_limits& limits = {}) {
  std::vector<loader::embedded_sample> out(indices.size());
  std::vector<tensor> image_rows, video_rows, text_rows;
  std::vector<std::size_t> image_owner, video_owner, text_owner;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    auto& ls = out[i];
    ls.index = indices[i];
    auto s = ds.get(indices[i]);
    if (!s) {
      ls.error = s.error();
      continue;
    }
    ls.id = s->id;
    auto add = [&](const models::any_model& model, bytes_view raw, std::vector<tensor>& rows, std::vector<std::size_t>& owner) {
      auto x = model.preprocess(raw, limits);
      if (!x) {
        ls.error = x.error();
        return;
      }
      rows.push_back(std::move(*x));
      owner.push_back(i);
    };
    // As the loader picks: a JPEG image first (a tar may also hold a PNG stored raw), else any image.
    const auto* img = s->first(format::field_kind::image, codec::codec_id::jpeg);
    if (!img) img = s->first(format::field_kind::image);
    if (img) add(m.image, img->bytes, image_rows, image_owner);
    if (const auto* f = s->first(format::field_kind::video); f && !ls.error) add(m.video, f->bytes, video_rows, video_owner);
    if (const auto* f = s->first(format::field_kind::text); f && !ls.error) {
      auto text = f->text(limits);
      if (!text) ls.error = text.error();
      else add(m.text, as_bytes_view(*text), text_rows, text_owner);
    }
  }
  detail::run_rows(m.image, m.names.image_output, kImageLatent, image_rows, image_owner, out);
  detail::run_rows(m.video, m.names.video_output, kVideoLatent, video_rows, video_owner, out);
  detail::run_rows(m.text, m.names.text_output, kCaption, text_rows, text_owner, out);
  for (auto& s : out)
    if (s.error) s.embeddings.clear();
  return out;
}

// Same names, dtypes and shapes, and values bitwise equal (tolerance 0) or within `tolerance` max abs
// (f32 embeddings; other dtypes compare bitwise).
inline bool same_embeddings(const loader::embedded_sample& a, const loader::embedded_sample& b, std::string* why, float tolerance = 0) {
  if (a.embeddings.size() != b.embeddings.size()) {
    *why = std::to_string(a.embeddings.size()) + " embeddings, reference has " + std::to_string(b.embeddings.size());
    return false;
  }
  for (const auto& [name, t] : b.embeddings) {
    const tensor* d = a.find(name);
    if (!d) return *why = "no '" + name + "'", false;
    if (d->dtype() != t.dtype() || d->shape() != t.shape())
      return *why = "'" + name + "' is " + std::string(to_string(d->dtype())) + d->shape().to_string() + ", reference " +
                    std::string(to_string(t.dtype())) + t.shape().to_string(),
             false;
    const tensor dc = d->is_contiguous() ? *d : d->clone();
    const tensor tc = t.is_contiguous() ? t : t.clone();
    if (tolerance > 0 && t.dtype() == dtype::f32) {
      const float* x = dc.data<const float>();
      const float* y = tc.data<const float>();
      float worst = 0;
      for (std::int64_t i = 0; i < static_cast<std::int64_t>(t.numel()); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
      if (!(worst <= tolerance))
        return *why = "'" + name + "' differs from the reference by " + std::to_string(worst) + " (max abs; tolerance " +
                      std::to_string(tolerance) + ")",
               false;
    } else if (std::memcmp(dc.data(), tc.data(), t.nbytes()) != 0) {
      return *why = "'" + name + "' differs from the reference", false;
    }
  }
  return true;
}

}  // namespace jit_train_demo
