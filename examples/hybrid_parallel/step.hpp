// The hybrid_parallel example's training step on one rank: the vision encoder sequence parallel (Ulysses),
// the language model tensor parallel (Megatron), the boundary between them, over M microbatches in the order
// of a pipeline schedule (sequential or 1F1B), gradients accumulated across microbatches. The same code runs
// ranks as threads and as processes; what a rank hands back for the comparison is a rank_result.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "jitembed/core/memory_account.hpp"
#include "jitembed/parallel/gloo.hpp"
#include "jitembed/parallel/hybrid.hpp"
#include "jitembed/parallel/pipeline_schedule.hpp"
#include "jitembed/parallel/tensor_parallel.hpp"
#include "jitembed/parallel/ulysses.hpp"
#include "model.hpp"
#include "public_boundary.hpp"
#include "tp_encoder.hpp"
#if defined(JITEMBED_HAS_NCCL)
#include "jitembed/parallel/cuda/backend.hpp"
#include "jitembed/parallel/cuda/host_staged.hpp"
#endif

namespace hybrid {

using namespace jitembed::parallel;
using comm_t = gloo_communicator;

// The encoder's layout: sequence parallel (Ulysses, this example's plan) or tensor parallel (a uniform-TP
// layout: the whole sequence on every rank, tp_encoder.hpp; CPU math whatever the mode).
enum class encoder_layout : std::uint8_t { sp, tp };
// How the activation crosses: this project's boundary transform (only the bytes a rank lacks) or the
// public system's (public_boundary.hpp: all-gather, the whole output to the paired rank, the whole gradient
// back).
enum class boundary_kind : std::uint8_t { ours, public_system };

// How the step runs: the schedule, the microbatches the global batch is cut into (balanced along the batch
// dim: the first B mod M get one row more), and the 1F1B in-flight bound.
struct step_options {
  pipeline_schedule schedule = pipeline_schedule::sequential;
  int microbatches = 1;
  int in_flight = 2;
  // Recompute the encoder block in backward: forward keeps only this rank's input patches, backward runs the
  // forward again (its Ulysses all_to_alls too) before its own work: the same computation, so the same
  // gradients; the encoder then holds one microbatch's activations at a time instead of in_flight.
  bool recompute = false;
  // Gather the outputs and full gradients to group rank 0 for the comparison (collectives after the step);
  // training (train.hpp) turns it off: it needs only each rank's own gradients.
  bool gather_for_check = true;
  encoder_layout encoder = encoder_layout::sp;
  boundary_kind boundary = boundary_kind::ours;
};

inline std::int64_t microbatch_rows(std::int64_t b, int m_count, int m) {
  return b / m_count + (m < b % m_count ? 1 : 0);
}
inline std::int64_t microbatch_offset(std::int64_t b, int m_count, int m) {
  std::int64_t off = 0;
  for (int i = 0; i < m; ++i) off += microbatch_rows(b, m_count, i);
  return off;
}

// A compute op as it ran: its stage, F/B, microbatch and steady-clock times (CLOCK_MONOTONIC: comparable
// across the processes of one machine).
struct timed_op {
  char stage = 'E';  // 'E' encoder, 'L' language model
  char kind = 'F';
  int microbatch = 0;
  std::int64_t start_ns = 0, end_ns = 0;
};

// What one rank hands back: its parts of the comparison (group rank 0 of each module: the gathered outputs
// and full gradients, the group's stats), its loss, op logs and boundary bytes.
struct rank_result {
  int rank = 0;
  int enc_rank = -1, enc_size = 0, lm_rank = -1, lm_size = 0;
  float loss = NAN;  // LM ranks: the loss of the global batch (sum over microbatches, weighted by rows)
  tensor enc_out, logits;
  tensors grads;
  tensors own_grads;  // the gradients of this rank's own parameters (train.hpp's own_params layout)
  comm_stats enc_stats, lm_stats;
  std::uint64_t boundary_sent = 0, boundary_received = 0, world_collectives = 0;
  std::string enc_log, lm_log;  // "F0 F1 B0 ...": the compute ops in the order they ran
  // Peak live host bytes of what this rank's ops allocated, per module (activations kept for backward
  // included: they stay counted until freed), and of the boundary's buffers (core/memory_account.hpp).
  std::uint64_t enc_peak = 0, lm_peak = 0, boundary_peak = 0;
  std::vector<timed_op> timeline;
};

// Where a rank's TP/SP layers run. cpu_mode: on the Gloo groups themselves with the nn math.
struct cpu_mode {
  using comm = comm_t;
  using backend = cpu_backend;
  comm& attach(comm_t& group, int) { return group; }
  backend be() const { return {}; }
  tensor up(const tensor& t) const { return t; }
  tensor down(const tensor& t) const { return t; }
  const comm_stats& stats(comm_t& group, int) const { return group.stats(); }
};

#if defined(JITEMBED_HAS_NCCL)
// cuda_mode: GPU 0, one stream per rank; each group's layers get a host-staged communicator over a
// sub-communicator of that group (same ranks, its own stats), staged on the rank's stream.
struct cuda_mode {
  using comm = host_staged_communicator<comm_t>;
  using backend = cuda_backend;
  jitembed::cuda::stream stream = jitembed::cuda::stream::create().value();
  cuda_backend b = cuda_backend::create(stream, dtype::f32).value();
  std::unique_ptr<comm> staged[2];
  comm& attach(comm_t& group, int slot) {
    staged[slot] = std::make_unique<comm>(group.split(0, group.rank()).value(), cuda_staging(stream, 0));
    group.stats().reset();  // the split's all_gather is not part of the step
    return *staged[slot];
  }
  backend be() const { return b; }
  tensor up(const tensor& t) const { return b.upload_as(t, t.dtype()); }  // f32 activations, i64 ids
  tensor down(const tensor& t) const { return b.download(t); }
  const comm_stats& stats(comm_t&, int slot) const { return staged[slot]->stats(); }
};
#endif

// The LM's fused QKV weight (rank r's shard [q_r; k_r; v_r]) and its inverse (tp_encoder.hpp).
inline tensor fuse_qkv(const tensors& p, int tp) { return fuse_qkv_of(p, "lm", tp); }
inline void unfuse_qkv(const tensor& fused, int tp, tensors& out) { unfuse_qkv_of(fused, "lm", tp, out); }

// The vision encoder of one microbatch on its sequence-parallel group: this rank's patches, replicated
// weights, Ulysses attention (on `dev`, the mode's communicator of the group). backward accumulates the
// weight gradients of this rank's tokens into g; the caller syncs them once after the last microbatch.
template <class Mode>
struct sp_encoder {
  const config& c;  // c.batch: this microbatch's rows
  const tensors& p;
  comm_t& comm;
  Mode& mode;
  typename Mode::comm* dev = nullptr;
  std::int64_t s_local = 0;
  shape s4;
  tensor x_in, x0, q, k, v, att, x1, h, gh, x2;
  ln_out a1, a2;
  std::optional<ulysses_attention<typename Mode::comm, typename Mode::backend>> uly;

  bool recompute = false;  // keep only x_in after forward; backward runs forward again

  tensor forward(const tensor& patches) {
    const int sp = comm.size();
    s_local = chunk_size(c.patches, sp, comm.rank());
    s4 = shape{c.batch, s_local, c.enc_heads, c.enc_hidden / c.enc_heads};
    x_in = local_chunk(patches.view(), 1, sp, comm.rank());
    tensor out = run_forward();
    if (recompute) {  // what backward needs is made again there
      x0 = q = k = v = att = x1 = h = gh = x2 = tensor();
      a1 = a2 = ln_out{};
      uly.reset();
    }
    return out;
  }

  tensor run_forward() {
    x0 = linear(x_in, p.at("enc.patch.w"), &p.at("enc.patch.b"));
    a1 = layer_norm(x0, p, "enc.ln1", c.eps);
    q = linear(a1.y, p.at("enc.q.w"), nullptr);
    k = linear(a1.y, p.at("enc.k.w"), nullptr);
    v = linear(a1.y, p.at("enc.v.w"), nullptr);
    uly = ulysses_attention<typename Mode::comm, typename Mode::backend>::create(*dev, static_cast<int>(c.enc_heads),
                                                                                 {.causal = false}, mode.be())
              .value();
    const tensor o =
        uly->forward(mode.up(reshape(q, s4)), mode.up(reshape(k, s4)), mode.up(reshape(v, s4)), c.patches).value();
    att = reshape(mode.down(o), {c.batch, s_local, c.enc_hidden});
    x1 = add(x0, linear(att, p.at("enc.o.w"), &p.at("enc.o.b")));
    a2 = layer_norm(x1, p, "enc.ln2", c.eps);
    h = linear(a2.y, p.at("enc.fc1.w"), &p.at("enc.fc1.b"));
    gh = gelu(h);
    x2 = add(x1, linear(gh, p.at("enc.fc2.w"), &p.at("enc.fc2.b")));
    return x2;
  }

  void backward(const tensor& dx2, tensors& g) {
    if (recompute) (void)run_forward();
    tensor dgh = linear_back(gh, p.at("enc.fc2.w"), dx2, g, "enc.fc2", true);
    tensor da2 = linear_back(a2.y, p.at("enc.fc1.w"), gelu_back(h, dgh), g, "enc.fc1", true);
    tensor dx1 = add(dx2, layer_norm_back(x1, p, a2, da2, g, "enc.ln2"));
    tensor datt = linear_back(att, p.at("enc.o.w"), dx1, g, "enc.o", true);
    auto dqkv = uly->backward(mode.up(reshape(datt, s4))).value();
    const shape s3{c.batch, s_local, c.enc_hidden};
    tensor da1 = linear_back(a1.y, p.at("enc.q.w"), reshape(mode.down(dqkv.dq), s3), g, "enc.q", false);
    pm::add_inplace(da1.view(),
                    linear_back(a1.y, p.at("enc.k.w"), reshape(mode.down(dqkv.dk), s3), g, "enc.k", false).view());
    pm::add_inplace(da1.view(),
                    linear_back(a1.y, p.at("enc.v.w"), reshape(mode.down(dqkv.dv), s3), g, "enc.v", false).view());
    tensor dx0 = add(dx1, layer_norm_back(x0, p, a1, da1, g, "enc.ln1"));
    (void)linear_back(x_in, p.at("enc.patch.w"), dx0, g, "enc.patch", true);
  }
};

// The language model on its tensor-parallel group. Its TP layers keep what backward needs from one
// forward, so a microbatch's forward and backward run back to back (both schedules do); their weight
// gradients, and the replicated ones in g, accumulate across microbatches.
template <class Mode>
struct tp_language_model {
  using dcomm = typename Mode::comm;
  using backend = typename Mode::backend;
  const config& c;
  const tensors& p;
  Mode& mode;
  int tp = 1;
  std::optional<column_parallel_linear<dcomm, backend>> qkv, head;
  std::optional<row_parallel_linear<dcomm, backend>> proj;
  std::optional<tensor_parallel_mlp<dcomm, backend>> mlp;
  std::optional<vocab_parallel_embedding<dcomm, backend>> emb;
  // One microbatch's activations, forward to backward.
  config cm;
  tensor enc_full, h0, lq, lk, lv, h1, h2, dlogits;
  ln_out b1, b2, bf;
  attn_out lat;
  int pending = -1;  // the microbatch whose backward is due

  tp_language_model(const config& cfg, const tensors& params, Mode& m, dcomm& lmc, int degree)
      : c(cfg), p(params), mode(m), tp(degree) {
    const std::int64_t hl = c.lm_hidden;
    const backend be = mode.be();
    qkv.emplace(column_parallel_linear<dcomm, backend>::create(lmc, hl, 3 * hl, {.bias = false}, be).value());
    qkv->load_full(fuse_qkv(p, tp).view(), nullptr);
    proj.emplace(row_parallel_linear<dcomm, backend>::create(lmc, hl, hl, {.input_is_parallel = true}, be).value());
    proj->load_full(p.at("lm.o.w").view(), p.at("lm.o.b").view());
    mlp.emplace(tensor_parallel_mlp<dcomm, backend>::create(lmc, hl, c.lm_ffn, {}, be).value());
    const tensor_view b1v = p.at("lm.fc1.b").view(), b2v = p.at("lm.fc2.b").view();
    mlp->load_full(p.at("lm.fc1.w").view(), &b1v, p.at("lm.fc2.w").view(), &b2v);
    emb.emplace(vocab_parallel_embedding<dcomm, backend>::create(lmc, c.vocab, hl, {}, be).value());
    emb->load_full(p.at("lm.embed").view());
    head.emplace(
        column_parallel_linear<dcomm, backend>::create(lmc, hl, c.vocab, {.bias = false, .gather_output = true}, be)
            .value());
    head->load_full(p.at("lm.head.w").view(), nullptr);
  }

  // Microbatch m (cfg.batch rows, ids [rows, text+1], enc [rows, patches, enc_hidden]); `weight` = rows of
  // the microbatch / rows of the global batch, so that the accumulated gradients are those of the mean over
  // every text token of the global batch. Returns the weighted loss and this microbatch's logits.
  std::pair<float, tensor> forward(int m, const config& cfg, const tensor& ids, tensor enc, float weight) {
    if (pending >= 0)
      throw error(errc::internal, "language model: forward of a microbatch before the backward of the last");
    cm = cfg;
    enc_full = std::move(enc);
    const std::int64_t hl_t = c.lm_hidden / tp, heads_t = c.lm_heads / tp;
    const auto up = [&](const tensor& t) { return mode.up(t); };
    const auto down = [&](const tensor& t) { return mode.down(t); };
    const auto [ids_in, targets] = split_ids(cm, ids);
    tensor img = linear(enc_full, p.at("lm.conn.w"), &p.at("lm.conn.b"));
    tensor txt = down(emb->forward(up(ids_in)).value());
    const tensor_view parts[] = {img.view(), txt.view()};
    h0 = concat(parts, 1);
    b1 = layer_norm(h0, p, "lm.ln1", c.eps);
    tensor qkv_local = down(qkv->forward(up(b1.y)).value());  // [B, T, 3·hl/tp]: this rank's heads
    lq = narrow(qkv_local.view(), 2, 0, hl_t);
    lk = narrow(qkv_local.view(), 2, hl_t, hl_t);
    lv = narrow(qkv_local.view(), 2, 2 * hl_t, hl_t);
    lat = attention(lq, lk, lv, heads_t, /*causal=*/true);
    h1 = add(h0, down(proj->forward(up(lat.out)).value()));
    b2 = layer_norm(h1, p, "lm.ln2", c.eps);
    h2 = add(h1, down(mlp->forward(up(b2.y)).value()));
    bf = layer_norm(h2, p, "lm.lnf", c.eps);
    tensor ft = narrow(bf.y.view(), 1, cm.patches, cm.text);
    tensor logits = down(head->forward(up(ft)).value());
    dlogits = tensor::empty(logits.shape(), dtype::f32);
    const std::int64_t rows = cm.batch * cm.text;
    const tensor_view dl2 = reshape(dlogits, {rows, cm.vocab}).view();
    const float loss = pm::cross_entropy_forward_backward(reshape(logits, {rows, cm.vocab}).view(),
                                                          reshape(targets, {rows}).view(), &dl2);
    float* d = dlogits.view().data<float>();
    for (std::uint64_t i = 0; i < dlogits.numel(); ++i) d[i] *= weight;
    pending = m;
    return {loss * weight, logits};
  }

  // Returns the gradient of the encoder output of the microbatch ([rows, patches, enc_hidden], replicated).
  tensor backward(int m, tensors& g) {
    if (pending != m) throw error(errc::internal, "language model: backward of a microbatch without its forward");
    pending = -1;
    const auto up = [&](const tensor& t) { return mode.up(t); };
    const auto down = [&](const tensor& t) { return mode.down(t); };
    const std::int64_t hl_t = c.lm_hidden / tp, heads_t = c.lm_heads / tp, t = cm.tokens();
    tensor dft = down(head->backward(up(dlogits)).value());
    tensor dbf = tensor::zeros(bf.y.shape(), dtype::f32);
    copy_into(dbf.view(), 1, cm.patches, dft.view());
    tensor dh2 = layer_norm_back(h2, p, bf, dbf, g, "lm.lnf");
    tensor dh1 = add(dh2, layer_norm_back(h1, p, b2, down(mlp->backward(up(dh2)).value()), g, "lm.ln2"));
    tensor dlat = down(proj->backward(up(dh1)).value());
    tensor dlq = tensor::empty(lq.shape(), dtype::f32), dlk = tensor::empty(lk.shape(), dtype::f32),
           dlv = tensor::empty(lv.shape(), dtype::f32);
    const shape l4{cm.batch, t, heads_t, hl_t / heads_t};
    pm::attention_backward(reshape(lq, l4).view(), reshape(lk, l4).view(), reshape(lv, l4).view(), lat.saved,
                           reshape(dlat, l4).view(), reshape(dlq, l4).view(), reshape(dlk, l4).view(),
                           reshape(dlv, l4).view());
    const tensor_view dparts[] = {dlq.view(), dlk.view(), dlv.view()};
    tensor db1 = down(qkv->backward(up(concat(dparts, 2))).value());
    tensor dh0 = add(dh1, layer_norm_back(h0, p, b1, db1, g, "lm.ln1"));
    emb->backward(up(narrow(dh0.view(), 1, cm.patches, cm.text))).value();
    tensor dx = linear_back(enc_full, p.at("lm.conn.w"), narrow(dh0.view(), 1, 0, cm.patches), g, "lm.conn", true);
    enc_full = tensor();
    return dx;
  }

  // The gradients of this rank's own LM parameters: its TP shards (q/k/v apart, as train.hpp holds them)
  // and its copies of the replicated ones (the same on every TP rank: computed from replicated tensors).
  tensors own_grads(const tensors& g) {
    const auto down = [&](const tensor& t) { return mode.down(t); };
    tensors out;
    const tensor fused = down(qkv->grad_weight());
    const std::int64_t per = fused.size(0) / 3;
    const char* names[] = {"lm.q.w", "lm.k.w", "lm.v.w"};
    for (int j = 0; j < 3; ++j) out[names[j]] = narrow(fused.view(), 0, j * per, per);
    out["lm.o.w"] = down(proj->grad_weight()).clone();
    out["lm.o.b"] = down(proj->grad_bias()).clone();
    out["lm.fc1.w"] = down(mlp->fc1().grad_weight()).clone();
    out["lm.fc1.b"] = down(mlp->fc1().grad_bias()).clone();
    out["lm.fc2.w"] = down(mlp->fc2().grad_weight()).clone();
    out["lm.fc2.b"] = down(mlp->fc2().grad_bias()).clone();
    out["lm.embed"] = down(emb->grad_weight()).clone();
    out["lm.head.w"] = down(head->grad_weight()).clone();
    for (const char* n :
         {"lm.conn.w", "lm.conn.b", "lm.ln1.g", "lm.ln1.b", "lm.ln2.g", "lm.ln2.b", "lm.lnf.g", "lm.lnf.b"}) {
      out[n] = g.at(n);
    }
    return out;
  }

  // The full gradients of the LM's parameters (all_gathers of the TP shards: after the step, not part of it).
  tensors full_grads(const tensors& g) {
    const auto down = [&](const tensor& t) { return mode.down(t); };
    tensors out;
    unfuse_qkv(down(qkv->full_grad_weight().value()), tp, out);
    out["lm.o.w"] = down(proj->full_grad_weight().value());
    out["lm.o.b"] = down(proj->full_grad_bias().value());
    out["lm.fc1.w"] = down(mlp->fc1().full_grad_weight().value());
    out["lm.fc1.b"] = down(mlp->fc1().full_grad_bias().value());
    out["lm.fc2.w"] = down(mlp->fc2().full_grad_weight().value());
    out["lm.fc2.b"] = down(mlp->fc2().full_grad_bias().value());
    out["lm.embed"] = down(emb->full_grad_weight().value());
    out["lm.head.w"] = down(head->full_grad_weight().value());
    for (const char* n :
         {"lm.conn.w", "lm.conn.b", "lm.ln1.g", "lm.ln1.b", "lm.ln2.g", "lm.ln2.b", "lm.lnf.g", "lm.lnf.b"}) {
      out[n] = g.at(n);
    }
    return out;
  }
};

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One training step on this rank of `world`: every rank calls it (the plan's group splits are collective
// over the world). The schedule's ops run in order; this rank runs those of the modules it belongs to and
// every exchange (point to point between the two groups, only the pieces a rank lacks).
template <class Mode>
rank_result run_step(comm_t& world, const config& c, const tensors& p, const batch& in, const hybrid_plan& plan,
                     const step_options& so, Mode& mode) {
  rank_result res;
  res.rank = world.rank();
  tensors g = zero_grads(p);
  comm_t enc = plan.group(world, "vision_encoder").value();
  comm_t lm = plan.group(world, "language_model").value();
  typename Mode::comm* enc_dev = enc.valid() ? &mode.attach(enc, 0) : nullptr;
  typename Mode::comm* lm_dev = lm.valid() ? &mode.attach(lm, 1) : nullptr;
  world.stats().reset();
  const bool enc_tp = so.encoder == encoder_layout::tp;
  // shard(sequence) over the SP ranks; a TP encoder holds the whole output on every rank
  const layout src = enc_tp ? layout{plan["vision_encoder"].ranks, placement::replicate()}
                            : plan.activation_layout("vision_encoder", 1);
  const layout dst = plan.activation_layout("language_model", 1);  // replicate over the TP ranks
  const std::vector<pipeline_op> ops = two_stage_schedule(so.schedule, so.microbatches, so.in_flight).value();

  const int mb = so.microbatches;
  std::vector<config> cfg(static_cast<std::size_t>(mb), c);
  std::vector<tensor> patches(static_cast<std::size_t>(mb)), ids(static_cast<std::size_t>(mb));
  for (int m = 0; m < mb; ++m) {
    const auto i = static_cast<std::size_t>(m);
    cfg[i].batch = microbatch_rows(c.batch, mb, m);
    patches[i] = narrow(in.patches.view(), 0, microbatch_offset(c.batch, mb, m), cfg[i].batch);
    ids[i] = narrow(in.ids.view(), 0, microbatch_offset(c.batch, mb, m), cfg[i].batch);
  }
  auto enc_global = [&](int m) { return shape{cfg[static_cast<std::size_t>(m)].batch, c.patches, c.enc_hidden}; };

  std::map<int, sp_encoder<Mode>> encoders;  // microbatches in flight on the encoder (forward run, backward not)
  std::map<int, tp_encoder> tp_encoders;     // the same, encoder_layout::tp
  std::optional<tp_encoder_shards> tp_shards;
  if (enc_tp && enc.valid()) tp_shards.emplace(p, enc.size(), enc.rank());
  std::vector<tensor> x2(static_cast<std::size_t>(mb)), enc_full(static_cast<std::size_t>(mb)),
      dx2_full(static_cast<std::size_t>(mb)), dx2(static_cast<std::size_t>(mb)), logits(static_cast<std::size_t>(mb));
  std::optional<tp_language_model<Mode>> model;
  if (lm.valid()) model.emplace(c, p, mode, *lm_dev, lm.size());
  float loss = 0;
  auto log = [&](std::string& l, char stage, char kind, int m, std::int64_t t0) {
    l += (l.empty() ? "" : " ") + std::string(1, kind) + std::to_string(m);
    res.timeline.push_back({stage, kind, m, t0, now_ns()});
  };

  const memory_account account;
  for (const pipeline_op& op : ops) {
    const int m = op.microbatch;
    const auto i = static_cast<std::size_t>(std::max(m, 0));
    const std::int64_t t0 = now_ns();
    const memory_scope scope(account, op.op == pipeline_op::kind::exchange ? "boundary"
                                      : op.stage == pipeline_stage::first  ? "encoder"
                                                                           : "llm");
    if (op.op == pipeline_op::kind::exchange) {
      std::optional<boundary_part> act, grad;
      if (op.activation >= 0) {
        const auto a = static_cast<std::size_t>(op.activation);
        act = boundary_part{enc_global(op.activation), enc.valid() ? &x2[a].view() : nullptr};
      }
      if (op.gradient >= 0) {
        const auto gi = static_cast<std::size_t>(op.gradient);
        grad = boundary_part{enc_global(op.gradient), lm.valid() ? &dx2_full[gi].view() : nullptr};
      }
      boundary_exchanged got;
      if (so.boundary == boundary_kind::ours) {
        got = boundary_exchange(world, act, grad, src, dst);
      } else {  // the public system's: the activation, then the gradient, each whole
        if (act) got.activation = public_forward(world, act->local, act->global, src, dst);
        if (grad) {
          const tensor whole = lm.valid() ? dx2_full[static_cast<std::size_t>(op.gradient)] : tensor();
          got.gradient = public_backward(world, whole, grad->global, src, dst);
        }
      }
      if (op.activation >= 0 && lm.valid())
        enc_full[static_cast<std::size_t>(op.activation)] = std::move(got.activation);
      if (op.gradient >= 0) {
        dx2_full[static_cast<std::size_t>(op.gradient)] = tensor();  // sent: the LM is done with it
        if (enc.valid()) dx2[static_cast<std::size_t>(op.gradient)] = std::move(got.gradient);
      }
    } else if (op.stage == pipeline_stage::first) {
      if (!enc.valid()) continue;
      if (op.op == pipeline_op::kind::forward && enc_tp) {
        x2[i] = tp_encoders.try_emplace(m, tp_encoder{cfg[i], p, enc, *tp_shards}).first->second.forward(patches[i]);
      } else if (op.op == pipeline_op::kind::forward) {
        auto [it, fresh] = encoders.try_emplace(m, sp_encoder<Mode>{cfg[i], p, enc, mode, enc_dev});
        it->second.recompute = so.recompute;
        x2[i] = it->second.forward(patches[i]);
      } else if (enc_tp) {
        tp_encoders.at(m).backward(dx2[i], g);
        tp_encoders.erase(m);
        dx2[i] = tensor();
      } else {
        encoders.at(m).backward(dx2[i], g);
        encoders.erase(m);
        dx2[i] = tensor();
      }
      log(res.enc_log, 'E', op.op == pipeline_op::kind::forward ? 'F' : 'B', m, t0);
    } else {
      if (!lm.valid()) continue;
      if (op.op == pipeline_op::kind::forward) {
        const float weight = static_cast<float>(cfg[i].batch) / static_cast<float>(c.batch);
        auto [l, lg] = model->forward(m, cfg[i], ids[i], std::move(enc_full[i]), weight);
        loss += l;
        logits[i] = std::move(lg);
      } else {
        dx2_full[i] = model->backward(m, g);
      }
      log(res.lm_log, 'L', op.op == pipeline_op::kind::forward ? 'F' : 'B', m, t0);
    }
  }

  // Replicated encoder weights saw only this rank's tokens of every microbatch: one fused all_reduce after
  // the last microbatch completes their gradients (accumulate locally, sync once, like DDP's no_sync).
  // (A TP encoder's replicated weights saw every token: their gradients are complete on each rank.)
  if (enc.valid() && enc_tp) tp_shards->place_into(g);
  if (enc.valid() && !enc_tp) {
    std::vector<tensor_view> enc_grads;
    for (auto& [name, t] : g) {
      if (name.rfind("enc.", 0) == 0) enc_grads.push_back(t.view());
    }
    sync_replicated_grads(enc, std::span<const tensor_view>(enc_grads)).value();
  }

  // Stats of the step, then the gathers for the comparison (not part of the step).
  res.enc_peak = account.tag("encoder").host.peak;
  res.lm_peak = account.tag("llm").host.peak;
  res.boundary_peak = account.tag("boundary").host.peak;
  const comm_stats world_step = world.stats();
  res.boundary_sent = world_step[coll::send].bytes;
  res.boundary_received = world_step[coll::recv].bytes;
  res.world_collectives = world_step.total_calls() - world_step[coll::send].calls - world_step[coll::recv].calls;
  if (enc.valid()) {
    for (auto& [name, t] : g) {
      if (name.rfind("enc.", 0) == 0) res.own_grads[name] = t;
    }
    if (enc_tp) {
      for (auto& [name, t] : tp_shards->g) res.own_grads[name] = t;  // this rank's shards, not the full shapes
    }
    res.enc_rank = enc.rank();
    res.enc_size = enc.size();
  }
  if (lm.valid()) {
    res.loss = loss;
    res.lm_rank = lm.rank();
    res.lm_size = lm.size();
    for (auto& [name, t] : model->own_grads(g)) res.own_grads[name] = t;
  }
  if (!so.gather_for_check) return res;
  if (lm.valid()) {
    const comm_stats lm_step = mode.stats(lm, 1);
    tensors lm_grads = model->full_grads(g);
    if (lm.rank() == 0) {
      std::vector<tensor_view> views;
      for (const auto& t : logits) views.push_back(t.view());
      res.logits = concat(views, 0);
      for (auto& [name, t] : lm_grads) res.grads[name] = t;
      res.lm_stats = lm_step;
    }
  }
  if (enc.valid()) {
    comm_stats enc_step = enc.stats();
    if (&mode.stats(enc, 0) != &enc.stats()) {  // the attention's all_to_alls ran on the device comm
      const op_stats a2a = mode.stats(enc, 0)[coll::all_to_all];
      for (std::uint64_t n = 0; n < a2a.calls; ++n) enc_step.record(coll::all_to_all, n == 0 ? a2a.bytes : 0);
    }
    std::vector<tensor> outs;
    for (const auto& x : x2) outs.push_back(enc_tp ? x : all_gather_dim(enc, x.view(), 1, c.patches).value());
    if (enc_tp) {  // each rank's shard in its slice of a zero tensor: the sum is the full gradient
      for (auto& [name, t] : g) {
        if (tp_encoder_shards::split_dim(name) >= 0 && name.rfind("enc.", 0) == 0)
          enc.all_reduce(t.view(), reduce_op::sum).value();
      }
    }
    res.enc_rank = enc.rank();
    res.enc_size = enc.size();
    if (enc.rank() == 0) {
      std::vector<tensor_view> views(outs.begin(), outs.end());
      res.enc_out = concat(views, 0);
      for (auto& [name, t] : g) {
        if (name.rfind("enc.", 0) == 0) res.grads[name] = t;
      }
      res.enc_stats = enc_step;
    }
  }
  return res;
}

}  // namespace hybrid
