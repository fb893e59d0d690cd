#pragma once
// bench_parallel, part 2: one training step (forward + backward) of a tensor-parallel MLP and of Ulysses
// attention on n Gloo ranks (threads) against the single-rank reference (math.hpp on the full tensors),
// side by side in this process. Each rank runs OpenBLAS on one thread; the reference is timed on one
// thread (the per-core comparison) and on every core (the same machine, used either way).
#include <algorithm>
#include <thread>
#include <tuple>

#include "bench_util.hpp"
#include "parallel/gloo_collectives.hpp"
#include "jitembed/parallel/math.hpp"
#include "jitembed/parallel/tensor_parallel.hpp"
#include "jitembed/parallel/ulysses.hpp"

namespace jitembed::bench {

namespace detail {

inline tensor bench_randn(const shape& s, std::uint32_t seed) {
  tensor t = tensor::empty(s, dtype::f32);
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::uint64_t i = 0; i < t.numel(); ++i) {
    x = x * 1664525u + 1013904223u;
    t.view().data<float>()[i] = static_cast<float>(static_cast<std::int32_t>(x >> 8) % 2001 - 1000) / 1000.0f;
  }
  return t;
}

// Best seconds of `reps` steps on n ranks: the slowest rank's time of each step (all_reduce max).
template <class Setup>
double ranks_step_seconds(int n, int reps, Setup setup) {
  return on_gloo_ranks(n, [&](parallel::gloo_communicator& c) {
    auto step = setup(c);
    step();
    double best = 1e300;
    for (int i = 0; i < reps; ++i) {
      c.barrier().value();
      const auto t0 = std::chrono::steady_clock::now();
      step();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      c.all_reduce(tensor_view(&s, dtype::f64, shape{1}), parallel::reduce_op::max).value();
      best = std::min(best, s);
    }
    return best;
  });
}

inline double blas_seconds(int threads, int reps, const std::function<void()>& fn) {
  parallel::math::set_blas_threads(threads);
  const double s = best_seconds(reps, fn);
  parallel::math::set_blas_threads(1);
  return s;
}

}  // namespace detail

inline void run_tp_mlp_steps(reporter& rep) {
  namespace pm = parallel::math;
  const std::int64_t tokens = 512, hidden = 512, ffn = 2048;
  const int reps = 5;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  tensor x = detail::bench_randn({tokens, hidden}, 1), dy = detail::bench_randn({tokens, hidden}, 2);
  tensor w1 = detail::bench_randn({ffn, hidden}, 3), b1 = detail::bench_randn({ffn}, 4);
  tensor w2 = detail::bench_randn({hidden, ffn}, 5), b2 = detail::bench_randn({hidden}, 6);
  // Reference: the same MLP on one rank.
  tensor h = tensor::empty({tokens, ffn}, dtype::f32), a = tensor::empty({tokens, ffn}, dtype::f32);
  tensor y = tensor::empty({tokens, hidden}, dtype::f32), da = tensor::empty({tokens, ffn}, dtype::f32);
  tensor dx = tensor::empty({tokens, hidden}, dtype::f32);
  tensor gw1 = tensor::zeros(w1.shape(), dtype::f32), gb1 = tensor::zeros(b1.shape(), dtype::f32);
  tensor gw2 = tensor::zeros(w2.shape(), dtype::f32), gb2 = tensor::zeros(b2.shape(), dtype::f32);
  auto reference = [&] {
    const tensor_view b1v = b1.view(), b2v = b2.view(), dav = da.view(), dxv = dx.view();
    const tensor_view g1 = gw1.view(), gb1v = gb1.view(), g2 = gw2.view(), gb2v = gb2.view();
    pm::linear_forward(x, w1, &b1v, h);
    pm::gelu_forward(h, a);
    pm::linear_forward(a, w2, &b2v, y);
    pm::linear_backward(a, w2, dy, &dav, &g2, &gb2v);
    pm::gelu_backward(h, da, da);
    pm::linear_backward(x, w1, da, &dxv, &g1, &gb1v);
  };
  const double ref1 = detail::blas_seconds(1, reps, reference);
  const double ref_all = detail::blas_seconds(cores, reps, reference);
  const double flops = 3.0 * 2.0 * 2.0 * static_cast<double>(tokens * hidden * ffn);
  rep.add("tp_mlp/reference/1thread", "step_ms", ref1 * 1e3, "ms", {{"gflops", flops / ref1 / 1e9}});
  rep.add("tp_mlp/reference/" + std::to_string(cores) + "threads", "step_ms", ref_all * 1e3, "ms",
          {{"gflops", flops / ref_all / 1e9}});
  for (int n : {2, 4}) {
    std::uint64_t bytes = 0;
    const double tp = detail::ranks_step_seconds(n, reps, [&](parallel::gloo_communicator& c) {
      auto mlp = std::make_shared<parallel::tensor_parallel_mlp<parallel::gloo_communicator>>(
          parallel::tensor_parallel_mlp<parallel::gloo_communicator>::create(c, hidden, ffn).value());
      const tensor_view b1v = b1.view(), b2v = b2.view();
      mlp->load_full(w1, &b1v, w2, &b2v);
      return [&, mlp] {
        c.stats().reset();
        tensor out = mlp->forward(x).value();
        tensor din = mlp->backward(dy).value();
        if (c.rank() == 0) bytes = c.stats().total_bytes();
      };
    });
    const std::string name = "tp_mlp/tp" + std::to_string(n);
    rep.add(name, "step_ms", tp * 1e3, "ms",
            {{"ranks", n}, {"cores", cores}, {"tokens", tokens}, {"hidden", hidden}, {"ffn", ffn},
             {"comm_bytes_per_rank", bytes}, {"all_reduce_bytes_formula", 2 * tokens * hidden * 4}});
    rep.add(name + "/speedup_vs_1core_reference", "ratio", ref1 / tp, "x");
    rep.add(name + "/speedup_vs_all_core_reference", "ratio", ref_all / tp, "x");
  }
}

inline void run_ulysses_steps(reporter& rep) {
  namespace pm = parallel::math;
  const std::int64_t batch = 2, seq = 512, heads = 8, dim = 64;
  const int reps = 3;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const shape s{batch, seq, heads, dim};
  tensor q = detail::bench_randn(s, 11), k = detail::bench_randn(s, 12), v = detail::bench_randn(s, 13);
  tensor dout = detail::bench_randn(s, 14);
  tensor out = tensor::empty(s, dtype::f32), dq = tensor::empty(s, dtype::f32), dk = tensor::empty(s, dtype::f32),
         dv = tensor::empty(s, dtype::f32);
  auto reference = [&] {
    auto saved = pm::attention_forward(q, k, v, true, out);
    pm::attention_backward(q, k, v, saved, dout, dq, dk, dv);
  };
  const double ref1 = detail::blas_seconds(1, reps, reference);
  const double ref_all = detail::blas_seconds(cores, reps, reference);
  rep.add("ulysses/reference/1thread", "step_ms", ref1 * 1e3, "ms");
  rep.add("ulysses/reference/" + std::to_string(cores) + "threads", "step_ms", ref_all * 1e3, "ms");
  using so = parallel::ulysses_saved_output;
  // what the layer keeps for backward's δ: the default, then (SP=4) the two that keep no head-sharded output
  for (const auto& [n, mode, tag] : {std::tuple{2, so::head_sharded, ""}, std::tuple{4, so::head_sharded, ""},
                                     std::tuple{4, so::exchange_delta, "/exchange_delta"},
                                     std::tuple{4, so::recompute, "/recompute"}}) {
    std::uint64_t bytes = 0;
    const double t = detail::ranks_step_seconds(n, reps, [&](parallel::gloo_communicator& c) {
      const int r = c.rank();
      auto lq = std::make_shared<tensor>(parallel::local_chunk(q, 1, n, r));
      auto lk = std::make_shared<tensor>(parallel::local_chunk(k, 1, n, r));
      auto lv = std::make_shared<tensor>(parallel::local_chunk(v, 1, n, r));
      auto ld = std::make_shared<tensor>(parallel::local_chunk(dout, 1, n, r));
      auto attn = std::make_shared<parallel::ulysses_attention<parallel::gloo_communicator>>(
          parallel::ulysses_attention<parallel::gloo_communicator>::create(c, static_cast<int>(heads),
                                                                           {.causal = true, .saved_output = mode})
              .value());
      return [&, lq, lk, lv, ld, attn] {
        c.stats().reset();
        tensor o = attn->forward(*lq, *lk, *lv).value();
        auto g = attn->backward(*ld).value();
        if (c.rank() == 0) bytes = c.stats()[parallel::coll::all_to_all].bytes;
      };
    });
    const std::string name = "ulysses/sp" + std::to_string(n) + tag;
    const std::int64_t delta_bytes = mode == so::exchange_delta ? batch * seq / n * heads * 4 : 0;
    rep.add(name, "step_ms", t * 1e3, "ms",
            {{"ranks", n}, {"cores", cores}, {"batch", batch}, {"seq", seq}, {"heads", heads}, {"head_dim", dim},
             {"all_to_all_bytes_per_rank", bytes}, {"formula", 8 * batch * seq / n * heads * dim * 4 + delta_bytes}});
    rep.add(name + "/speedup_vs_1core_reference", "ratio", ref1 / t, "x");
    rep.add(name + "/speedup_vs_all_core_reference", "ratio", ref_all / t, "x");
  }
}

}  // namespace jitembed::bench
