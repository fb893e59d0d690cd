// hybrid_parallel: a small ViT-style encoder run sequence-parallel (Ulysses, SP=4) feeding a small
// transformer LM run tensor-parallel (Megatron, TP=2), on 4 ranks (threads, Gloo on loopback). One forward
// and backward step; the activation crosses between the two layouts through the boundary transform
// (grouped send/recv over the world communicator) forward, and its gradient crosses back.
// Prints the max abs difference of the loss, the outputs and every gradient against the single-rank
// reference (model.hpp), then the bytes each collective moved next to its formula. Exit code 0 when
// every relative error is ≤ the tolerance and every byte count equals its formula.
//
//   hybrid_parallel [--encoder-ranks 0,1,2,3] [--llm-ranks 0,1] [--tolerance 1e-5] [--device cpu|cuda]
// (any rank sets of the 4: shared, overlapping or disjoint, e.g. --encoder-ranks 0,1 --llm-ranks 2,3)
// --device cuda (CUDA builds): the Ulysses attention and the LM's tensor-parallel layers run on GPU 0 with
// cuda_backend (f32), all 4 ranks on the one GPU, their collectives through host_staged_communicator over
// the same Gloo groups; the glue between the layers (LayerNorm, residuals, the local attention, the loss)
// stays the CPU reference math, so tensors cross to the GPU and back at each layer (a demonstration of the
// device path, not a fast one). Default tolerance there 1e-4.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <thread>

#include "jitembed/parallel/gloo.hpp"
#include "jitembed/parallel/hybrid.hpp"
#include "jitembed/parallel/tensor_parallel.hpp"
#include "jitembed/parallel/ulysses.hpp"
#include "model.hpp"
#if defined(JITEMBED_HAS_NCCL)
#include "jitembed/parallel/cuda/backend.hpp"
#include "jitembed/parallel/cuda/host_staged.hpp"
#endif

namespace {

using namespace jitembed;
using namespace jitembed::parallel;
using comm_t = gloo_communicator;
using hybrid::tensors;

constexpr int kWorld = 4;

// What the ranks hand back for the comparison.
struct outcome {
  std::mutex mu;
  std::vector<float> losses;
  tensor enc_out, logits;
  tensors grads;
  comm_stats enc_stats, lm_stats;
  std::uint64_t boundary_sent = 0, boundary_received = 0, world_collectives = 0;  // summed over the ranks
  int enc_size = 0, lm_size = 0;
};

tensor reshape(const tensor& t, const shape& s) { return hybrid::reshape(t, s); }

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

// Rows of the fused QKV weight ordered so that rank r's contiguous shard is [q_r; k_r; v_r] (its heads).
tensor fuse_qkv(const tensors& p, int tp) {
  const tensor_view parts_all[] = {p.at("lm.q.w").view(), p.at("lm.k.w").view(), p.at("lm.v.w").view()};
  std::vector<tensor> pieces;
  for (int r = 0; r < tp; ++r) {
    for (const auto& w : parts_all) pieces.push_back(local_chunk(w, 0, tp, r));
  }
  std::vector<tensor_view> views(pieces.begin(), pieces.end());
  return concat(views, 0);
}

// The inverse, for the gathered gradient of the fused weight.
void unfuse_qkv(const tensor& fused, int tp, tensors& out) {
  const std::int64_t rows = fused.size(0) / 3, per = rows / tp;
  const char* names[] = {"lm.q.w", "lm.k.w", "lm.v.w"};
  for (int j = 0; j < 3; ++j) {
    std::vector<tensor> pieces;
    for (int r = 0; r < tp; ++r) pieces.push_back(narrow(fused.view(), 0, (3 * r + j) * per, per));
    std::vector<tensor_view> views(pieces.begin(), pieces.end());
    out[names[j]] = concat(views, 0);
  }
}

// The vision encoder on its sequence-parallel group: this rank's patches, replicated weights, Ulysses
// attention (on `dev`, the mode's communicator of the group); backward accumulates the weight gradients of
// this rank's tokens into g.
template <class Mode>
struct sp_encoder {
  const hybrid::config& c;
  const tensors& p;
  comm_t& comm;
  Mode& mode;
  typename Mode::comm* dev = nullptr;
  std::int64_t s_local = 0;
  shape s4;
  tensor x_in, x0, q, k, v, att, x1, h, gh, x2;
  hybrid::ln_out a1, a2;
  std::optional<ulysses_attention<typename Mode::comm, typename Mode::backend>> uly;

  tensor forward(const tensor& patches) {
    using hybrid::linear;
    const int sp = comm.size();
    s_local = chunk_size(c.patches, sp, comm.rank());
    s4 = shape{c.batch, s_local, c.enc_heads, c.enc_hidden / c.enc_heads};
    x_in = local_chunk(patches.view(), 1, sp, comm.rank());
    x0 = linear(x_in, p.at("enc.patch.w"), &p.at("enc.patch.b"));
    a1 = hybrid::layer_norm(x0, p, "enc.ln1", c.eps);
    q = linear(a1.y, p.at("enc.q.w"), nullptr);
    k = linear(a1.y, p.at("enc.k.w"), nullptr);
    v = linear(a1.y, p.at("enc.v.w"), nullptr);
    uly = ulysses_attention<typename Mode::comm, typename Mode::backend>::create(
              *dev, static_cast<int>(c.enc_heads), {.causal = false}, mode.be())
              .value();
    const tensor o = uly->forward(mode.up(reshape(q, s4)), mode.up(reshape(k, s4)), mode.up(reshape(v, s4)), c.patches)
                         .value();
    att = reshape(mode.down(o), {c.batch, s_local, c.enc_hidden});
    x1 = hybrid::add(x0, linear(att, p.at("enc.o.w"), &p.at("enc.o.b")));
    a2 = hybrid::layer_norm(x1, p, "enc.ln2", c.eps);
    h = linear(a2.y, p.at("enc.fc1.w"), &p.at("enc.fc1.b"));
    gh = hybrid::gelu(h);
    x2 = hybrid::add(x1, linear(gh, p.at("enc.fc2.w"), &p.at("enc.fc2.b")));
    return x2;
  }

  void backward(const tensor& dx2, tensors& g) {
    namespace pm = parallel::math;
    using hybrid::linear_back;
    tensor dgh = linear_back(gh, p.at("enc.fc2.w"), dx2, g, "enc.fc2", true);
    tensor da2 = linear_back(a2.y, p.at("enc.fc1.w"), hybrid::gelu_back(h, dgh), g, "enc.fc1", true);
    tensor dx1 = hybrid::add(dx2, hybrid::layer_norm_back(x1, p, a2, da2, g, "enc.ln2"));
    tensor datt = linear_back(att, p.at("enc.o.w"), dx1, g, "enc.o", true);
    auto dqkv = uly->backward(mode.up(reshape(datt, s4))).value();
    const shape s3{c.batch, s_local, c.enc_hidden};
    tensor da1 = linear_back(a1.y, p.at("enc.q.w"), reshape(mode.down(dqkv.dq), s3), g, "enc.q", false);
    pm::add_inplace(da1.view(),
                    linear_back(a1.y, p.at("enc.k.w"), reshape(mode.down(dqkv.dk), s3), g, "enc.k", false).view());
    pm::add_inplace(da1.view(),
                    linear_back(a1.y, p.at("enc.v.w"), reshape(mode.down(dqkv.dv), s3), g, "enc.v", false).view());
    tensor dx0 = hybrid::add(dx1, hybrid::layer_norm_back(x0, p, a1, da1, g, "enc.ln1"));
    (void)linear_back(x_in, p.at("enc.patch.w"), dx0, g, "enc.patch", true);
    // Replicated encoder weights saw only this rank's tokens: one fused all_reduce completes their gradients.
    std::vector<tensor_view> enc_grads;
    for (auto& [name, t] : g) {
      if (name.rfind("enc.", 0) == 0) enc_grads.push_back(t.view());
    }
    sync_replicated_grads(comm, std::span<const tensor_view>(enc_grads)).value();
  }
};

template <class Mode>
void rank_main(comm_t& world, const hybrid::config& c, const tensors& p, const hybrid::batch& in, const hybrid_plan& plan,
               outcome& res, Mode& mode) {
  using dcomm = typename Mode::comm;
  using backend = typename Mode::backend;
  namespace pm = parallel::math;
  using hybrid::linear;
  using hybrid::linear_back;
  tensors g = hybrid::zero_grads(p);
  comm_t enc = plan.group(world, "vision_encoder").value();
  comm_t lm = plan.group(world, "language_model").value();
  dcomm* enc_dev = enc.valid() ? &mode.attach(enc, 0) : nullptr;
  dcomm* lm_dev = lm.valid() ? &mode.attach(lm, 1) : nullptr;
  world.stats().reset();
  const shape enc_global{c.batch, c.patches, c.enc_hidden};
  const layout src = plan.activation_layout("vision_encoder", 1);  // shard(sequence) over the SP ranks
  const layout dst = plan.activation_layout("language_model", 1);  // replicate over the TP ranks

  // ---- vision encoder, sequence parallel (on the ranks of its group) ----
  sp_encoder<Mode> encoder{c, p, enc, mode, enc_dev};
  tensor x2;
  if (enc.valid()) x2 = encoder.forward(in.patches);

  // ---- boundary: shard(seq) over SP ranks → replicate over TP ranks ----
  const tensor_view x2v = x2.defined() ? x2.view() : tensor_view();
  tensor enc_full = boundary_forward(world, enc.valid() ? &x2v : nullptr, enc_global, src, dst);

  tensor dx2_full;  // on LM ranks: the gradient of the encoder output
  if (lm.valid()) {
    // ---- language model, tensor parallel ----
    const int tp = lm.size();
    const std::int64_t hl = c.lm_hidden, hl_t = hl / tp, heads_t = c.lm_heads / tp, t = c.tokens();
    dcomm& lmc = *lm_dev;
    const backend be = mode.be();
    const auto up = [&](const tensor& t) { return mode.up(t); };
    const auto down = [&](const tensor& t) { return mode.down(t); };
    auto qkv = column_parallel_linear<dcomm, backend>::create(lmc, hl, 3 * hl, {.bias = false}, be).value();
    qkv.load_full(fuse_qkv(p, tp).view(), nullptr);
    auto proj = row_parallel_linear<dcomm, backend>::create(lmc, hl, hl, {.input_is_parallel = true}, be).value();
    proj.load_full(p.at("lm.o.w").view(), p.at("lm.o.b").view());
    auto mlp = tensor_parallel_mlp<dcomm, backend>::create(lmc, hl, c.lm_ffn, {}, be).value();
    const tensor_view b1v = p.at("lm.fc1.b").view(), b2v = p.at("lm.fc2.b").view();
    mlp.load_full(p.at("lm.fc1.w").view(), &b1v, p.at("lm.fc2.w").view(), &b2v);
    auto emb = vocab_parallel_embedding<dcomm, backend>::create(lmc, c.vocab, hl, {}, be).value();
    emb.load_full(p.at("lm.embed").view());
    auto head =
        column_parallel_linear<dcomm, backend>::create(lmc, hl, c.vocab, {.bias = false, .gather_output = true}, be)
            .value();
    head.load_full(p.at("lm.head.w").view(), nullptr);

    const auto [ids_in, targets] = hybrid::split_ids(c, in.ids);
    tensor img = linear(enc_full, p.at("lm.conn.w"), &p.at("lm.conn.b"));
    tensor txt = down(emb.forward(up(ids_in)).value());
    const tensor_view parts[] = {img.view(), txt.view()};
    tensor h0 = concat(parts, 1);
    auto b1 = hybrid::layer_norm(h0, p, "lm.ln1", c.eps);
    tensor qkv_local = down(qkv.forward(up(b1.y)).value());  // [B, T, 3·hl/tp]: this rank's heads
    tensor lq = narrow(qkv_local.view(), 2, 0, hl_t), lk = narrow(qkv_local.view(), 2, hl_t, hl_t),
           lv = narrow(qkv_local.view(), 2, 2 * hl_t, hl_t);
    auto lat = hybrid::attention(lq, lk, lv, heads_t, /*causal=*/true);
    tensor h1 = hybrid::add(h0, down(proj.forward(up(lat.out)).value()));
    auto b2 = hybrid::layer_norm(h1, p, "lm.ln2", c.eps);
    tensor h2 = hybrid::add(h1, down(mlp.forward(up(b2.y)).value()));
    auto bf = hybrid::layer_norm(h2, p, "lm.lnf", c.eps);
    tensor ft = narrow(bf.y.view(), 1, c.patches, c.text);
    tensor logits = down(head.forward(up(ft)).value());
    tensor dlogits = tensor::empty(logits.shape(), dtype::f32);
    const tensor_view dl2 = reshape(dlogits, {c.batch * c.text, c.vocab}).view();
    const float loss = pm::cross_entropy_forward_backward(reshape(logits, {c.batch * c.text, c.vocab}).view(),
                                                          reshape(targets, {c.batch * c.text}).view(), &dl2);
    // backward
    tensor dft = down(head.backward(up(dlogits)).value());
    tensor dbf = tensor::zeros(bf.y.shape(), dtype::f32);
    copy_into(dbf.view(), 1, c.patches, dft.view());
    tensor dh2 = hybrid::layer_norm_back(h2, p, bf, dbf, g, "lm.lnf");
    tensor dh1 = hybrid::add(dh2, hybrid::layer_norm_back(h1, p, b2, down(mlp.backward(up(dh2)).value()), g, "lm.ln2"));
    tensor dlat = down(proj.backward(up(dh1)).value());
    tensor dlq = tensor::empty(lq.shape(), dtype::f32), dlk = tensor::empty(lk.shape(), dtype::f32),
           dlv = tensor::empty(lv.shape(), dtype::f32);
    const shape l4{c.batch, t, heads_t, hl_t / heads_t};
    pm::attention_backward(reshape(lq, l4).view(), reshape(lk, l4).view(), reshape(lv, l4).view(), lat.saved,
                           reshape(dlat, l4).view(), reshape(dlq, l4).view(), reshape(dlk, l4).view(),
                           reshape(dlv, l4).view());
    const tensor_view dparts[] = {dlq.view(), dlk.view(), dlv.view()};
    tensor db1 = down(qkv.backward(up(concat(dparts, 2))).value());
    tensor dh0 = hybrid::add(dh1, hybrid::layer_norm_back(h0, p, b1, db1, g, "lm.ln1"));
    emb.backward(up(narrow(dh0.view(), 1, c.patches, c.text))).value();
    dx2_full = linear_back(enc_full, p.at("lm.conn.w"), narrow(dh0.view(), 1, 0, c.patches), g, "lm.conn", true);

    // Stats of the step, then the gathers for the comparison (not part of the step).
    const comm_stats lm_step = mode.stats(lm, 1);
    tensors lm_grads;
    unfuse_qkv(down(qkv.full_grad_weight().value()), tp, lm_grads);
    lm_grads["lm.o.w"] = down(proj.full_grad_weight().value());
    lm_grads["lm.o.b"] = down(proj.full_grad_bias().value());
    lm_grads["lm.fc1.w"] = down(mlp.fc1().full_grad_weight().value());
    lm_grads["lm.fc1.b"] = down(mlp.fc1().full_grad_bias().value());
    lm_grads["lm.fc2.w"] = down(mlp.fc2().full_grad_weight().value());
    lm_grads["lm.fc2.b"] = down(mlp.fc2().full_grad_bias().value());
    lm_grads["lm.embed"] = down(emb.full_grad_weight().value());
    lm_grads["lm.head.w"] = down(head.full_grad_weight().value());
    for (const char* n : {"lm.conn.w", "lm.conn.b", "lm.ln1.g", "lm.ln1.b", "lm.ln2.g", "lm.ln2.b", "lm.lnf.g", "lm.lnf.b"}) {
      lm_grads[n] = g.at(n);
    }
    std::lock_guard lock(res.mu);
    res.losses.push_back(loss);
    if (lm.rank() == 0) {
      res.logits = logits;
      for (auto& [name, t] : lm_grads) res.grads[name] = t;
      res.lm_stats = lm_step;
      res.lm_size = tp;
    }
  }

  // ---- boundary backward: the gradient goes from the TP layout back to the SP layout ----
  const tensor_view dx2_view = dx2_full.defined() ? dx2_full.view() : tensor_view();
  tensor dx2 = boundary_backward(world, lm.valid() ? &dx2_view : nullptr, enc_global, src, dst);

  // ---- encoder backward ----
  if (enc.valid()) encoder.backward(dx2, g);

  comm_stats enc_step = enc.valid() ? enc.stats() : comm_stats{};
  const comm_stats world_step = world.stats();
  if (enc.valid() && &mode.stats(enc, 0) != &enc.stats()) {  // the attention's all_to_alls ran on the device comm
    const op_stats a2a = mode.stats(enc, 0)[coll::all_to_all];
    for (std::uint64_t i = 0; i < a2a.calls; ++i) enc_step.record(coll::all_to_all, i == 0 ? a2a.bytes : 0);
  }
  tensor enc_out = enc.valid() ? all_gather_dim(enc, x2.view(), 1, c.patches).value() : tensor();
  std::lock_guard lock(res.mu);
  if (enc.valid() && enc.rank() == 0) {
    res.enc_out = enc_out;
    for (auto& [name, t] : g) {
      if (name.rfind("enc.", 0) == 0) res.grads[name] = t;
    }
    res.enc_stats = enc_step;
    res.enc_size = enc.size();
  }
  res.boundary_sent += world_step[coll::send].bytes;
  res.boundary_received += world_step[coll::recv].bytes;
  res.world_collectives += world_step.total_calls() - world_step[coll::send].calls - world_step[coll::recv].calls;
}

double max_abs(const tensor& a, const tensor& b) {
  double m = a.numel() == b.numel() ? 0.0 : 1e30;
  for (std::uint64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    m = std::max(m, static_cast<double>(std::abs(a.view().data<float>()[i] - b.view().data<float>()[i])));
  }
  return m;
}
double max_mag(const tensor& b) {
  double m = 1e-6;
  for (std::uint64_t i = 0; i < b.numel(); ++i) m = std::max(m, static_cast<double>(std::abs(b.view().data<float>()[i])));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> llm_ranks{0, 1}, encoder_ranks{0, 1, 2, 3};
  double tolerance = -1;
  std::string device = "cpu";
  CLI::App app{"hybrid_parallel: an SP vision encoder (Ulysses) feeding a TP language model on 4 Gloo ranks, "
               "checked against the single-rank reference"};
  app.add_option("--encoder-ranks", encoder_ranks, "ranks of the sequence-parallel vision encoder (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  app.add_option("--llm-ranks", llm_ranks, "ranks of the tensor-parallel language model (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  app.add_option("--tolerance", tolerance, "largest relative error accepted (default 1e-5 on cpu, 1e-4 on cuda)")
      ->check(CLI::PositiveNumber);
  app.add_option("--device", device, "where the layers run")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (tolerance < 0) tolerance = device == "cuda" ? 1e-4 : 1e-5;
  if (device == "cuda") {
#if defined(JITEMBED_HAS_NCCL)
    if (jitembed::cuda::device_count() == 0) {
      std::printf("hybrid_parallel --device cuda: no CUDA device, skipped\n");
      return 0;
    }
#else
    std::fprintf(stderr, "hybrid_parallel: built without CUDA (JITEMBED_WITH_CUDA=OFF)\n");
    return 2;
#endif
  }
  const hybrid::config c;
  const tensors params = hybrid::make_params(c, 42);
  const hybrid::batch in = hybrid::make_batch(c, 7);
  auto planned = hybrid_plan::create(
      {{"vision_encoder", strategy::sequence_parallel, static_cast<int>(encoder_ranks.size()), encoder_ranks},
       {"language_model", strategy::tensor_parallel, static_cast<int>(llm_ranks.size()), llm_ranks}},
      kWorld);
  if (!planned) {
    std::fprintf(stderr, "hybrid_parallel: %s\n", planned.error().message.c_str());
    return 2;
  }
  const hybrid_plan plan = std::move(planned).value();
  const auto ref = hybrid::run_reference(c, params, in);

  outcome res;
  auto st = shared_store(hash_store());
  std::vector<std::thread> threads;
  std::mutex err_mu;
  std::string first_error;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto world = comm_t::create(st, r, kWorld).value();
        if (device == "cpu") {
          cpu_mode mode;
          rank_main(world, c, params, in, plan, res, mode);
        } else {
#if defined(JITEMBED_HAS_NCCL)
          JITEMBED_CUDA_CHECK(cudaSetDevice(0));  // every rank on GPU 0
          cuda_mode mode;
          rank_main(world, c, params, in, plan, res, mode);
#endif
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(err_mu);
        if (first_error.empty()) first_error = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!first_error.empty()) {
    std::fprintf(stderr, "hybrid_parallel: %s\n", first_error.c_str());
    return 1;
  }

  auto list = [](const std::vector<int>& v) {
    std::string s;
    for (int r : v) s += (s.empty() ? "" : ",") + std::to_string(r);
    return s;
  };
  std::printf("hybrid_parallel: vision encoder SP=%d (Ulysses) on ranks %s -> language model TP=%d on ranks %s (%s)\n",
              res.enc_size, list(encoder_ranks).c_str(), res.lm_size, list(llm_ranks).c_str(),
              device == "cuda" ? "layers on GPU 0, host-staged Gloo" : "CPU");
  bool ok = true;
  std::printf("\n%-22s %14s %14s\n", "vs single rank", "max abs diff", "relative");
  auto report = [&](const std::string& name, double diff, double mag) {
    const double rel = diff / mag;
    ok = ok && rel <= tolerance;
    std::printf("%-22s %14.3g %14.3g%s\n", name.c_str(), diff, rel, rel <= tolerance ? "" : "  > tolerance");
  };
  double loss_diff = 0;
  for (float l : res.losses) loss_diff = std::max(loss_diff, static_cast<double>(std::abs(l - ref.loss)));
  std::printf("loss: %.7f (reference %.7f) on %zu TP ranks\n", static_cast<double>(res.losses.empty() ? NAN : res.losses[0]),
              static_cast<double>(ref.loss), res.losses.size());
  report("loss", loss_diff, std::max(1e-6, static_cast<double>(std::abs(ref.loss))));
  report("encoder output", max_abs(res.enc_out, ref.enc_out), max_mag(ref.enc_out));
  report("logits", max_abs(res.logits, ref.logits), max_mag(ref.logits));
  for (const auto& [name, want] : ref.grads) {
    auto it = res.grads.find(name);
    if (it == res.grads.end()) {
      std::printf("%-22s missing\n", ("grad " + name).c_str());
      ok = false;
      continue;
    }
    report("grad " + name, max_abs(it->second, want), max_mag(want));
  }

  // Bytes per collective next to the formulas (nccl-tests sizes; bus bytes = size × bus factor).
  const std::int64_t f = 4, b = c.batch, t = c.tokens();
  std::int64_t enc_param_bytes = 0;
  for (const auto& [name, p] : params) {
    if (name.rfind("enc.", 0) == 0) enc_param_bytes += static_cast<std::int64_t>(p.nbytes());
  }
  const std::int64_t enc_bytes = b * c.patches * c.enc_hidden * f;
  std::int64_t boundary_fwd = 0, boundary_bwd = 0;
  const int sp = static_cast<int>(encoder_ranks.size());
  auto chunk_bytes = [&](int k) { return chunk_size(c.patches, sp, k) * b * c.enc_hidden * f; };
  for (int d : llm_ranks) {
    const auto at = std::find(encoder_ranks.begin(), encoder_ranks.end(), d);
    boundary_fwd += enc_bytes - (at != encoder_ranks.end() ? chunk_bytes(static_cast<int>(at - encoder_ranks.begin())) : 0);
  }
  for (int k = 0; k < sp; ++k) {
    if (std::find(llm_ranks.begin(), llm_ranks.end(), encoder_ranks[static_cast<std::size_t>(k)]) == llm_ranks.end()) {
      boundary_bwd += chunk_bytes(k);
    }
  }
  struct row {
    const char* group;
    coll op;
    const comm_stats* stats;
    int n;
    std::int64_t calls, bytes;
    const char* formula;
  };
  const std::int64_t s_local = c.patches / res.enc_size;
  const std::int64_t sp_on = res.enc_size > 1, tp_on = res.lm_size > 1;  // a group of one rank communicates nothing
  const row rows[] = {
      {"encoder SP", coll::all_to_all, &res.enc_stats, res.enc_size, 8 * sp_on, 8 * sp_on * b * s_local * c.enc_hidden * f,
       "8 x B*(S/sp)*H_e*4 (q,k,v,out fwd; dout,dq,dk,dv bwd)"},
      {"encoder SP", coll::all_reduce, &res.enc_stats, res.enc_size, sp_on, sp_on * enc_param_bytes,
       "replicated encoder weights, one fused gradient sync"},
      {"LM TP", coll::all_reduce, &res.lm_stats, res.lm_size, 6 * tp_on, tp_on * (2 * b * c.text + 4 * b * t) * c.lm_hidden * f,
       "fwd: embed B*T_txt*H, proj+fc2 2*B*T*H; bwd: head B*T_txt*H, fc1+qkv 2*B*T*H"},
      {"LM TP", coll::all_gather, &res.lm_stats, res.lm_size, tp_on, tp_on * b * c.text * c.vocab * f, "head gather_output B*T_txt*V"},
      {"LM TP", coll::reduce_scatter, &res.lm_stats, res.lm_size, 0, 0, "none"},
  };
  std::printf("\n%-11s %-15s %6s %12s %12s %12s  %s\n", "group", "collective", "calls", "bytes", "formula", "bus bytes",
              "formula terms");
  for (const auto& r : rows) {
    const auto& s = (*r.stats)[r.op];
    const bool match = r.calls < 0 || (static_cast<std::int64_t>(s.calls) == r.calls && static_cast<std::int64_t>(s.bytes) == r.bytes);
    ok = ok && match;
    std::printf("%-11s %-15s %6llu %12llu %12lld %12.0f  %s%s\n", r.group, std::string(to_string(r.op)).c_str(),
                static_cast<unsigned long long>(s.calls), static_cast<unsigned long long>(s.bytes),
                static_cast<long long>(r.bytes), r.stats->bus_bytes(r.op, r.n), r.formula, match ? "" : "  MISMATCH");
  }
  const bool boundary_ok = static_cast<std::int64_t>(res.boundary_sent) == boundary_fwd + boundary_bwd &&
                           res.boundary_received == res.boundary_sent && res.world_collectives == 0;
  ok = ok && boundary_ok;
  std::printf("%-11s %-15s %6s %12llu %12lld %12s  %s%s\n", "world", "send/recv", "-",
              static_cast<unsigned long long>(res.boundary_sent), static_cast<long long>(boundary_fwd + boundary_bwd), "-",
              "boundary, all ranks: fwd = each TP rank gets B*S*H_e minus its own chunk; bwd = each SP rank outside "
              "the TP group gets its chunk",
              boundary_ok ? "" : "  MISMATCH");
  std::printf("\n%s (tolerance %.1g)\n", ok ? "OK: the hybrid step equals the single-rank reference" : "FAILED", tolerance);
  return ok ? 0 : 1;
}
