// The hybrid_parallel example's training loop on one rank: N steps of run_step (step.hpp) each followed by
// AdamW (nn::adamw) on the parameters this rank owns, per-module sharded checkpoints (format/checkpoint.hpp)
// and resume; and the single-rank reference trained the same way on the full parameters.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/format/checkpoint.hpp"
#include "jitembed/nn/adamw.hpp"
#include "step.hpp"

namespace hybrid {

struct train_options {
  int steps = 1;
  double lr = 1e-2;
  std::string checkpoint_dir;             // empty: no checkpoints
  int checkpoint_every = 0;               // save after step s when s % every == 0 (0: never)
  bool resume = false;                    // start from the latest complete checkpoint under checkpoint_dir (if any)
  int kill_rank = -1, kill_at_step = -1;  // tests only: that rank SIGKILLs itself after that step's checkpoint
  // Called on every rank after step s (1-based) with that step's result and the seconds its step and AdamW
  // took; after s's checkpoint is saved, so a supervisor that saw step s from every rank knows it is complete.
  std::function<void(int step, const rank_result& r, double seconds)> on_step;
};

// Step s (1-based) trains on make_batch(c, batch_seed(s)): step 1 is the single-step check's batch (seed 7).
inline std::uint64_t batch_seed(int step) { return 6 + static_cast<std::uint64_t>(step); }

// How the LM shards a parameter over its TP group (torch.chunk layout along that dim), or -1: replicated.
// The encoder's parameters are all replicated over its SP group.
inline int lm_shard_dim(const std::string& name) {
  for (const char* n : {"lm.q.w", "lm.k.w", "lm.v.w", "lm.fc1.w", "lm.fc1.b", "lm.embed", "lm.head.w"})
    if (name == n) return 0;
  for (const char* n : {"lm.o.w", "lm.fc2.w"})
    if (name == n) return 1;
  return -1;
}
inline bool is_encoder_param(const std::string& name) { return name.rfind("enc.", 0) == 0; }

// What one rank holds of one module: its shard index and the degree, its own parameters (a TP shard or a
// replica), the optimizer over them.
struct module_state {
  std::string module;  // "encoder" or "llm": the checkpoint's module name
  int shard = 0, shards = 1;
  tensors params;
  std::optional<nn::adamw> opt;
};

inline named_tensors as_named(const tensors& t, const std::string& prefix = "") {
  named_tensors out;
  for (const auto& [n, v] : t) out.emplace_back(prefix + n, v);
  return out;
}

inline tensors own_params(const tensors& full, const module_state& m) {
  tensors out;
  for (const auto& [n, t] : full) {
    if (is_encoder_param(n) != (m.module == "encoder")) continue;
    const int d = m.module == "encoder" ? -1 : lm_shard_dim(n);
    out[n] = d < 0 ? t.clone() : local_chunk(t.view(), static_cast<std::size_t>(d), m.shards, m.shard);
  }
  return out;
}

// Writes the rank's own parameters back into its full-shape copy, where the TP layers load their shards
// from at the next step (the other ranks' slices there are stale and never read).
inline void write_back(tensors& full, const module_state& m) {
  for (const auto& [n, t] : m.params) {
    const int d = m.module == "encoder" ? -1 : lm_shard_dim(n);
    tensor& f = full.at(n);
    if (d < 0) {
      std::memcpy(f.view().data<float>(), t.view().data<float>(), t.numel() * sizeof(float));
    } else {
      const auto dim = static_cast<std::size_t>(d);
      copy_into(f.view(), dim, chunk_offset(f.size(dim), m.shards, m.shard), t.view());
    }
  }
}

// A checkpoint shard: "param/<name>", the optimizer's state() and, in LM shards, "train/losses" (the loss of
// every step so far: a resumed run reports the whole history).
inline void save_module(const train_options& to, int step, const module_state& m, const std::vector<float>& losses) {
  named_tensors all = as_named(m.params, "param/");
  for (auto& st : m.opt->state()) all.push_back(std::move(st));
  if (m.module == "llm") {
    all.emplace_back("train/losses", tensor::copy_of(std::as_bytes(std::span(losses)), dtype::f32,
                                                     shape{static_cast<std::int64_t>(losses.size())}));
  }
  format::save_checkpoint_shard(to.checkpoint_dir, {static_cast<std::uint64_t>(step), m.module, m.shard, m.shards}, all)
      .value();
}

inline void load_module(const train_options& to, std::uint64_t step, module_state& m, std::vector<float>& losses) {
  const named_tensors got =
      format::load_checkpoint_shard(to.checkpoint_dir, {step, m.module, m.shard, m.shards}).value();
  for (auto& [n, t] : m.params) {
    const tensor* s = find_tensor(got, "param/" + n);
    if (!s || s->shape() != t.shape() || s->dtype() != dtype::f32)
      throw error(errc::corrupt_data, "checkpoint: " + m.module + " shard lacks parameter '" + n + "' of its shape");
    std::memcpy(t.view().data<float>(), s->bytes().data(), t.nbytes());
  }
  m.opt->load_state(got).value();
  if (const tensor* l = find_tensor(got, "train/losses")) {
    const float* p = reinterpret_cast<const float*>(l->bytes().data());
    losses.assign(p, p + l->numel());
  }
}

// What a rank hands back after training: its place, the loss of every step (LM ranks), its own parameters.
struct train_result {
  int rank = 0, enc_rank = -1, enc_size = 0, lm_rank = -1, lm_size = 0;
  int resumed_from = 0;
  std::vector<float> losses;
  tensors params;  // own parameters of every module it holds
};

// Trains to.steps steps on this rank (every rank of the world calls it). Ranks of the plan's modules are
// their index in the module's rank list (hybrid_plan::group orders them so).
template <class Mode>
train_result train_rank(comm_t& world, const config& c, const hybrid_plan& plan, step_options so,
                        const train_options& to, Mode& mode) {
  so.gather_for_check = false;
  train_result res;
  res.rank = world.rank();
  std::vector<module_state> mods;
  for (const auto& [plan_name, module] : {std::pair{"vision_encoder", "encoder"}, std::pair{"language_model", "llm"}}) {
    const auto& ranks = plan[plan_name].ranks;
    const int size = static_cast<int>(ranks.size());
    const auto at = std::find(ranks.begin(), ranks.end(), world.rank());
    if (std::string(module) == "encoder")
      res.enc_size = size;
    else
      res.lm_size = size;
    if (at == ranks.end()) continue;
    module_state m{module, static_cast<int>(at - ranks.begin()), size, {}, {}};
    (std::string(module) == "encoder" ? res.enc_rank : res.lm_rank) = m.shard;
    mods.push_back(std::move(m));
  }
  tensors full = make_params(c, 42);
  for (auto& m : mods) {
    m.params = own_params(full, m);
    m.opt.emplace(nn::adamw::create(as_named(m.params), {.lr = to.lr}).value());
  }
  if (to.resume) {
    const auto latest = format::latest_checkpoint(to.checkpoint_dir, {{"encoder", res.enc_size}, {"llm", res.lm_size}});
    if (latest) {
      for (auto& m : mods) load_module(to, *latest, m, res.losses);
      res.resumed_from = static_cast<int>(*latest);
    }
  }
  for (auto& m : mods) write_back(full, m);
  for (int s = res.resumed_from + 1; s <= to.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    const rank_result r = run_step(world, c, full, make_batch(c, batch_seed(s)), plan, so, mode);
    if (r.lm_rank >= 0) res.losses.push_back(r.loss);
    for (auto& m : mods) {
      tensors g;
      for (const auto& [n, t] : m.params) g[n] = r.own_grads.at(n);
      m.opt->step(as_named(g)).value();
      write_back(full, m);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!to.checkpoint_dir.empty() && to.checkpoint_every > 0 && s % to.checkpoint_every == 0) {
      for (const auto& m : mods) save_module(to, s, m, res.losses);
    }
    if (to.on_step) to.on_step(s, r, seconds);
    if (world.rank() == to.kill_rank && s == to.kill_at_step) {
      std::fprintf(stderr, "hybrid_parallel: rank %d kills itself after step %d (--kill-rank)\n", world.rank(), s);
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
  }
  for (const auto& m : mods) {
    for (const auto& [n, t] : m.params) res.params[n] = t;
  }
  return res;
}

// The reference: the same steps on one rank, full batch, AdamW over the full parameters (updated in place).
inline std::vector<float> train_reference(const config& c, tensors& p, const train_options& to) {
  auto opt = nn::adamw::create(as_named(p), {.lr = to.lr}).value();
  std::vector<float> losses;
  for (int s = 1; s <= to.steps; ++s) {
    const reference_result r = run_reference(c, p, make_batch(c, batch_seed(s)));
    losses.push_back(r.loss);
    opt.step(as_named(r.grads)).value();
  }
  return losses;
}

// The full parameters from the ranks' own ones: encoder replicas from its group rank 0, LM shards
// concatenated in group rank order, LM replicas from group rank 0.
inline tensors gather_params(const std::vector<train_result>& ranks) {
  tensors out;
  std::map<std::string, std::map<int, tensor>> shards;
  for (const auto& r : ranks) {
    for (const auto& [n, t] : r.params) {
      if (is_encoder_param(n)) {
        if (r.enc_rank == 0) out[n] = t;
      } else if (lm_shard_dim(n) < 0) {
        if (r.lm_rank == 0) out[n] = t;
      } else {
        shards[n][r.lm_rank] = t;
      }
    }
  }
  for (auto& [n, by_rank] : shards) {
    std::vector<tensor_view> views;
    for (auto& [k, t] : by_rank) views.push_back(t.view());
    out[n] = concat(views, static_cast<std::size_t>(lm_shard_dim(n)));
  }
  return out;
}

// FNV-1a over the names and bytes of the parameters and the losses: equal digests, bitwise-equal runs.
inline std::uint64_t train_digest(const tensors& params, const std::vector<float>& losses) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (const auto& [n, t] : params) {
    mix(n.data(), n.size());
    mix(t.view().data<float>(), t.numel() * sizeof(float));
  }
  mix(losses.data(), losses.size() * sizeof(float));
  return h;
}

}  // namespace hybrid
