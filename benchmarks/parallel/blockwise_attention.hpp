#pragma once
// bench_parallel, part "attention": blockwise attention (nn::attention_forward / backward, O(S) saved) against
// the exact O(S²) reference (nn::detail::attention_reference_*), forward + backward, B 1, H 4, D 64, causal,
// side by side on one BLAS thread; then blockwise alone at S 16384 (the reference's probabilities would be
// 4 GiB) and a block-size sweep at S 4096. The machine may be shared: compare ratios, not times.
#include <cstdint>
#include <string>

#include "bench_util.hpp"
#include "jitembed/nn/attention.hpp"
#include "jitembed/nn/detail/attention_reference.hpp"
#include "parallel/layer_steps.hpp"

namespace jitembed::bench {

inline void run_blockwise_attention(reporter& rep) {
  const std::int64_t b = 1, h = 4, d = 64;
  parallel::math::set_blas_threads(1);
  const auto saved_bytes = [](const nn::attention_saved& s) { return static_cast<double>(s.lse.nbytes() + s.out.nbytes()); };
  for (std::int64_t seq : {1024, 4096, 16384}) {
    const shape s{b, seq, h, d};
    tensor q = detail::bench_randn(s, 21), k = detail::bench_randn(s, 22), v = detail::bench_randn(s, 23);
    tensor dout = detail::bench_randn(s, 24);
    tensor out = tensor::empty(s, dtype::f32), dq = tensor::empty(s, dtype::f32), dk = tensor::empty(s, dtype::f32),
           dv = tensor::empty(s, dtype::f32);
    const nlohmann::json extra = {{"b", b}, {"h", h}, {"d", d}, {"s", seq}, {"causal", true}, {"blas_threads", 1}};
    const std::string name = "attention/s" + std::to_string(seq);
    double kept = 0;
    auto blockwise_fwd = [&] { kept = saved_bytes(nn::attention_forward(q, k, v, true, out)); };
    auto blockwise = [&] {
      auto saved = nn::attention_forward(q, k, v, true, out);
      kept = saved_bytes(saved);
      nn::attention_backward(q, k, v, saved, dout, dq, dk, dv);
    };
    if (seq > 4096) {  // the reference would keep 4·B·H·S² bytes (4 GiB here) and as much again in backward
      const double t = best_seconds(1, blockwise);
      rep.add(name + "/blockwise", "step_ms", t * 1e3, "ms", extra);
      rep.add(name + "/blockwise", "saved_bytes", kept, "B", extra);
      continue;
    }
    tensor probs;
    auto reference_fwd = [&] { probs = nn::detail::attention_reference_forward(q, k, v, true, out); };
    auto reference = [&] {
      probs = nn::detail::attention_reference_forward(q, k, v, true, out);
      nn::detail::attention_reference_backward(q, k, v, probs, dout, dq, dk, dv);
    };
    const int rounds = seq <= 1024 ? 5 : 2;
    const auto [rf, bf] = side_by_side(rounds, reference_fwd, blockwise_fwd);
    const auto [rs, bs] = side_by_side(rounds, reference, blockwise);
    const double ref_bytes = static_cast<double>(probs.nbytes());
    rep.add(name + "/reference", "forward_ms", rf * 1e3, "ms", extra);
    rep.add(name + "/blockwise", "forward_ms", bf * 1e3, "ms", extra);
    rep.add(name + "/reference", "step_ms", rs * 1e3, "ms", extra);
    rep.add(name + "/blockwise", "step_ms", bs * 1e3, "ms", extra);
    rep.add(name + "/forward_speedup", "ratio", rf / bf, "x", extra);
    rep.add(name + "/step_speedup", "ratio", rs / bs, "x", extra);
    rep.add(name + "/reference", "saved_bytes", ref_bytes, "B", extra);
    rep.add(name + "/blockwise", "saved_bytes", kept, "B", extra);
    rep.add(name + "/saved_bytes_reduction", "ratio", ref_bytes / kept, "x", extra);
  }
  // block sizes (q × k) at S 4096: the default (128 × 128) should be at or near the best
  const shape s{b, 4096, h, d};
  tensor q = detail::bench_randn(s, 31), k = detail::bench_randn(s, 32), v = detail::bench_randn(s, 33);
  tensor dout = detail::bench_randn(s, 34);
  tensor out = tensor::empty(s, dtype::f32), dq = tensor::empty(s, dtype::f32), dk = tensor::empty(s, dtype::f32),
         dv = tensor::empty(s, dtype::f32);
  for (std::int64_t blk : {32, 64, 128, 256}) {
    const nn::attention_options opt{.block_q = blk, .block_k = blk};
    const double t = best_seconds(1, [&] {
      auto saved = nn::attention_forward(q, k, v, true, out, opt);
      nn::attention_backward(q, k, v, saved, dout, dq, dk, dv, opt);
    });
    rep.add("attention/s4096/blocks" + std::to_string(blk), "step_ms", t * 1e3, "ms",
            {{"block_q", blk}, {"block_k", blk}, {"blas_threads", 1}});
  }
}

}  // namespace jitembed::bench
