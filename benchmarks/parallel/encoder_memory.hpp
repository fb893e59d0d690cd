#pragma once
// bench_parallel, part "memory" (issue #31's memory targets): the peak host bytes per rank of one encoder
// block's forward + backward, counted by core/memory_account.hpp: input x [1, S, C], q/k/v projections,
// blockwise attention (non-causal, H 8 heads of D 16, C = 128), output projection, GELU MLP C -> 4C -> C
// (no norms, no residuals), weights included; each tensor dropped as soon as nothing needs it, alike in both
// layouts:
// - sp4: Ulysses sequence parallelism, 4 ranks (threads over Gloo), each holding S/4 tokens and a replica of
//   the weights; q, k, v go after forward (the layer keeps its head-sharded copies, the projections'
//   backward needs their input x), and so does the layer's head-sharded output (saved_output exchange_delta:
//   backward computes δ = rowsum(dO ⊙ O) from the caller's sequence-layout output, the one copy, as in the
//   replicated arm, and exchanges it);
// - replicated: every rank holds the whole sequence (the ZeRO-3-like baseline: parameters sharded or not,
//   activations whole); all ranks are alike, so one is run.
// Reported: the peak per rank at the same S (target: sp4 <= 0.30x replicated), the attention layer alone
// (the block's worst part for Ulysses: both layouts of q, k, v live at once), and the longest S (a multiple
// of 256) whose step fits a per-rank budget, found by running the step under memory_budget (a refused
// allocation is resource_exhausted) — target: sp4 >= 4x replicated; the budget is the replicated block's
// peak at S 4096.
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <mutex>

#include "bench_util.hpp"
#include "jitembed/core/memory_account.hpp"
#include "jitembed/nn/attention.hpp"
#include "jitembed/nn/gelu.hpp"
#include "jitembed/nn/linear.hpp"
#include "jitembed/parallel/ulysses.hpp"
#include "parallel/gloo_collectives.hpp"
#include "parallel/layer_steps.hpp"

namespace jitembed::bench {

namespace detail {

constexpr std::int64_t kMemHeads = 8, kMemDim = 16;

// How a layout runs the attention of local q, k, v [1, S_r, H, D]: forward returns the output and may keep
// what backward needs; backward returns dq, dk, dv (and drops what forward kept).
struct attention_fns {
  std::function<tensor(tensor& q, tensor& k, tensor& v)> forward;
  std::function<std::array<tensor, 3>(const tensor& dout)> backward;
};

// One block step on `tokens` local tokens; with block false only the attention layer (q, k, v as inputs).
inline void block_step(std::int64_t tokens, bool block, attention_fns& attn, std::uint32_t seed) {
  constexpr std::int64_t c = kMemHeads * kMemDim;
  const shape heads{1, tokens, kMemHeads, kMemDim}, rows{tokens, c}, wide{tokens, 4 * c};
  const auto as_rows = [&](const tensor& t) { return t.reinterpret(dtype::f32, rows).value(); };
  const auto as_heads = [&](const tensor& t) { return t.reinterpret(dtype::f32, heads).value(); };
  if (!block) {
    tensor q = bench_randn(heads, seed), k = bench_randn(heads, seed + 1), v = bench_randn(heads, seed + 2);
    tensor out = attn.forward(q, k, v);
    tensor dout = bench_randn(heads, seed + 3);
    auto g = attn.backward(dout);
    return;
  }
  tensor wq = bench_randn({c, c}, 101), wk = bench_randn({c, c}, 102), wv = bench_randn({c, c}, 103),
         wo = bench_randn({c, c}, 104), w1 = bench_randn({4 * c, c}, 105), w2 = bench_randn({c, 4 * c}, 106);
  tensor x = bench_randn(rows, seed);
  tensor q = tensor::empty(rows, dtype::f32), k = tensor::empty(rows, dtype::f32), v = tensor::empty(rows, dtype::f32);
  nn::linear_forward(x, wq, nullptr, q);
  nn::linear_forward(x, wk, nullptr, k);
  nn::linear_forward(x, wv, nullptr, v);
  q = as_heads(q), k = as_heads(k), v = as_heads(v);
  tensor a = as_rows(attn.forward(q, k, v));
  tensor y1 = tensor::empty(rows, dtype::f32), h1 = tensor::empty(wide, dtype::f32),
         g1 = tensor::empty(wide, dtype::f32);
  nn::linear_forward(a, wo, nullptr, y1);
  nn::linear_forward(y1, w1, nullptr, h1);
  nn::gelu_forward(h1, g1);
  tensor y = tensor::empty(rows, dtype::f32);
  nn::linear_forward(g1, w2, nullptr, y);
  y = tensor();  // the loss takes it; its gradient comes back
  tensor dy = bench_randn(rows, seed + 7);
  tensor dw1 = tensor::zeros(w1.shape(), dtype::f32), dw2 = tensor::zeros(w2.shape(), dtype::f32),
         dwo = tensor::zeros(wo.shape(), dtype::f32), dwq = tensor::zeros(wq.shape(), dtype::f32),
         dwk = tensor::zeros(wk.shape(), dtype::f32), dwv = tensor::zeros(wv.shape(), dtype::f32);
  tensor dg1 = tensor::empty(wide, dtype::f32);
  nn::linear_backward(g1, w2, dy, &dg1.view(), &dw2.view(), nullptr);
  dy = g1 = tensor();
  nn::gelu_backward(h1, dg1, dg1);
  h1 = tensor();
  tensor dy1 = tensor::empty(rows, dtype::f32);
  nn::linear_backward(y1, w1, dg1, &dy1.view(), &dw1.view(), nullptr);
  dg1 = y1 = tensor();
  tensor da = tensor::empty(rows, dtype::f32);
  nn::linear_backward(a, wo, dy1, &da.view(), &dwo.view(), nullptr);
  dy1 = a = tensor();
  auto [dq, dk, dv] = attn.backward(as_heads(da));
  da = tensor();
  tensor dx = tensor::empty(rows, dtype::f32), part = tensor::empty(rows, dtype::f32);
  nn::linear_backward(x, wq, as_rows(dq), &dx.view(), &dwq.view(), nullptr);
  nn::linear_backward(x, wk, as_rows(dk), &part.view(), &dwk.view(), nullptr);
  for (std::int64_t i = 0; i < dx.size(0) * c; ++i) dx.data<float>()[i] += part.data<float>()[i];
  nn::linear_backward(x, wv, as_rows(dv), &part.view(), &dwv.view(), nullptr);
  for (std::int64_t i = 0; i < dx.size(0) * c; ++i) dx.data<float>()[i] += part.data<float>()[i];
}

// Peak bytes of one rank holding the whole sequence, or 0 when `budget` refused an allocation.
inline std::uint64_t replicated_peak(std::int64_t seq, bool block, memory_budget budget = {}) {
  memory_account acc(budget);
  try {
    memory_scope scope(acc, "encoder");
    tensor kq, kk, kv, ko;
    nn::attention_saved saved;
    attention_fns fns{[&](tensor& q, tensor& k, tensor& v) {
                        kq = q, kk = k, kv = v;  // the attention's backward needs them
                        ko = tensor::empty(q.shape(), dtype::f32);
                        saved = nn::attention_forward(kq, kk, kv, false, ko);
                        return ko;
                      },
                      [&](const tensor& dout) {
                        std::array<tensor, 3> g{tensor::empty(kq.shape(), dtype::f32),
                                                tensor::empty(kk.shape(), dtype::f32),
                                                tensor::empty(kv.shape(), dtype::f32)};
                        nn::attention_backward(kq, kk, kv, saved, dout, g[0], g[1], g[2]);
                        kq = kk = kv = ko = tensor();
                        saved = {};
                        return g;
                      }};
    block_step(seq, block, fns, 1);
  } catch (const error& e) {
    if (e.code() == errc::resource_exhausted) return 0;
    throw;
  }
  return acc.usage().peak;
}

// The largest peak over 4 Ulysses ranks, or 0 when `budget` refused an allocation on any rank.
inline std::uint64_t sp4_peak(std::int64_t seq, bool block, memory_budget budget = {}) {
  constexpr int n = 4;
  std::mutex mu;
  std::uint64_t worst = 0;
  bool refused = false;
  on_gloo_ranks(n, [&](parallel::gloo_communicator& c) {
    memory_account acc(budget);
    errc code = errc::ok;
    {
      memory_scope scope(acc, "encoder");
      try {
        // exchange_delta: the layer keeps no head-sharded copy of the output (backward's δ comes from the
        // sequence-layout output it shares with the caller), as the replicated arm keeps one output
        auto layer = parallel::ulysses_attention<parallel::gloo_communicator>::create(
                         c, kMemHeads, {.saved_output = parallel::ulysses_saved_output::exchange_delta})
                         .value();
        attention_fns fns{[&](tensor& q, tensor& k, tensor& v) {
                            // each released once its head-sharded copy exists (the layer keeps those)
                            return layer.forward(std::move(q), std::move(k), std::move(v)).value();
                          },
                          [&](const tensor& dout) {
                            auto g = layer.backward(dout).value();
                            return std::array<tensor, 3>{g.dq, g.dk, g.dv};
                          }};
        block_step(seq / n, block, fns, 1 + static_cast<std::uint32_t>(c.rank()));
      } catch (const error& e) {  // .value() of a failed layer call throws its error
        code = e.code();
      }
    }
    c.barrier().value();  // every rank has the same shapes: all run out at the same allocation, or none
    std::lock_guard lk(mu);
    worst = std::max(worst, acc.usage().peak);
    refused = refused || code == errc::resource_exhausted;
    return 0.0;
  });
  return refused ? 0 : worst;
}

// The largest S (a multiple of 256, up to `hi`) whose step fits `budget`: peak(S) grows with S, so a
// bisection over S / 256.
template <class Peak>
std::int64_t longest_fitting(Peak peak, std::uint64_t budget, std::int64_t hi) {
  std::int64_t lo = 0, top = hi / 256;  // lo fits (0: nothing), top + 1 does not (assumed)
  while (lo < top) {
    const std::int64_t mid = (lo + top + 1) / 2;
    if (peak(mid * 256, memory_budget{.host = budget}) != 0)
      lo = mid;
    else
      top = mid - 1;
  }
  return lo * 256;
}

}  // namespace detail

inline void run_encoder_memory(reporter& rep) {
  parallel::math::set_blas_threads(1);
  const nlohmann::json base = {{"b", 1}, {"h", detail::kMemHeads}, {"d", detail::kMemDim}, {"causal", false}};
  for (bool block : {true, false}) {
    const std::string part = block ? "memory/block" : "memory/attention";
    for (std::int64_t seq : {4096, 8192}) {
      const double rep_peak = static_cast<double>(detail::replicated_peak(seq, block));
      const double sp_peak = static_cast<double>(detail::sp4_peak(seq, block));
      nlohmann::json extra = base;
      extra["s"] = seq;
      const std::string name = part + "/s" + std::to_string(seq);
      rep.add(name + "/replicated", "peak_bytes_per_rank", rep_peak, "B", extra);
      rep.add(name + "/sp4", "peak_bytes_per_rank", sp_peak, "B", extra);
      rep.add(name + "/sp4_over_replicated", "ratio", sp_peak / rep_peak, "x", extra);
    }
  }
  const std::uint64_t budget = detail::replicated_peak(4096, true);
  const auto rep_fn = [](std::int64_t s, memory_budget b) { return detail::replicated_peak(s, true, b); };
  const auto sp_fn = [](std::int64_t s, memory_budget b) { return detail::sp4_peak(s, true, b); };
  const std::int64_t rep_longest = detail::longest_fitting(rep_fn, budget, 4 * 4096);
  const std::int64_t sp_longest = detail::longest_fitting(sp_fn, budget, 8 * 4096);
  nlohmann::json extra = base;
  extra["budget_bytes"] = budget;
  rep.add("memory/block/longest_s/replicated", "tokens", static_cast<double>(rep_longest), "tokens", extra);
  rep.add("memory/block/longest_s/sp4", "tokens", static_cast<double>(sp_longest), "tokens", extra);
  rep.add("memory/block/longest_s/sp4_over_replicated", "ratio",
          static_cast<double>(sp_longest) / static_cast<double>(std::max<std::int64_t>(rep_longest, 1)), "x", extra);
}

}  // namespace jitembed::bench
