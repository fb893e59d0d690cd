// DeepSpeed-Ulysses attention (ulysses.hpp) against single-rank nn::attention_forward on the whole sequence:
// outputs and dq/dk/dv (fp32 rel. error ≤ 1e-5), causal and not, even and uneven sequences, cross-attention;
// the layout transforms; all_to_all counts and bytes; head counts not divisible by the degree; saved_output
// (no head-sharded output kept, gradients bitwise equal). 2 and 4 ranks.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "jitembed/core/memory_account.hpp"
#include "jitembed/nn.hpp"
#include "jitembed/parallel/ulysses.hpp"
#include "support.hpp"

using namespace jitembed;
using namespace jitembed::parallel;
using jitembed::parallel::testing::kTol;
using jitembed::parallel::testing::randn;
using jitembed::parallel::testing::rel_error;
using jitembed::parallel::testing::error_of;
using jitembed::parallel::testing::result_error;
using jitembed::parallel::testing::run_ranks;

namespace {


struct attention_ref {
  tensor out, dq, dk, dv;
};

attention_ref reference_attention(const tensor& q, const tensor& k, const tensor& v, bool causal, const tensor& dout) {
  attention_ref r;
  r.out = tensor::empty(q.shape(), dtype::f32);
  const auto saved = nn::attention_forward(q, k, v, causal, r.out);
  r.dq = tensor::empty(q.shape(), dtype::f32);
  r.dk = tensor::empty(k.shape(), dtype::f32);
  r.dv = tensor::empty(v.shape(), dtype::f32);
  nn::attention_backward(q, k, v, saved, dout, r.dq, r.dk, r.dv);
  return r;
}

tensor seq_chunk(const tensor& x, const gloo_communicator& c) { return local_chunk(x, 1, c.size(), c.rank()); }

}  // namespace

TEST_CASE("seq_to_head and head_to_seq: closed form and round trip") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [n](gloo_communicator& c) {
      const int r = c.rank();
      const std::int64_t B = 2, S = 3 * n, H = 2 * n, D = 3;
      // x[b, s, h, d] = 1000 b + 100 s + 10 h + d over the global tensor; rank r holds its seq chunk.
      tensor full = tensor::empty(shape{B, S, H, D}, dtype::f32);
      for (std::int64_t i = 0; i < static_cast<std::int64_t>(full.numel()); ++i) {
        const std::int64_t d = i % D, h = (i / D) % H, s = (i / (D * H)) % S, b = i / (D * H * S);
        full.data<float>()[i] = static_cast<float>(1000 * b + 100 * s + 10 * h + d);
      }
      const tensor local = seq_chunk(full, c);
      const tensor heads = seq_to_head(c, local);
      CHECK(heads.shape() == shape{B, S, H / n, D});
      CHECK(rel_error(heads, local_chunk(full, 2, n, r)) == 0.0);
      CHECK(c.stats()[coll::all_to_all].calls == 1);
      CHECK(c.stats()[coll::all_to_all].bytes == local.nbytes());
      const tensor back = head_to_seq(c, heads);
      CHECK(back.shape() == local.shape());
      CHECK(rel_error(back, local) == 0.0);
      CHECK(c.stats()[coll::all_to_all].calls == 2);
    });
  }
}

TEST_CASE("ulysses_attention equals single-rank attention (causal and not), 4 all_to_alls each way") {
  for (int n : {2, 4}) {
    for (bool causal : {false, true}) {
      CAPTURE(n);
      CAPTURE(causal);
      run_ranks(n, [n, causal](gloo_communicator& c) {
        const std::int64_t B = 2, S = 16, H = 4, D = 8;
        const tensor q = randn(shape{B, S, H, D}, 1), k = randn(shape{B, S, H, D}, 2), v = randn(shape{B, S, H, D}, 3);
        const tensor dout = randn(shape{B, S, H, D}, 4);
        const auto ref = reference_attention(q, k, v, causal, dout);

        auto attn = ulysses_attention<gloo_communicator>::create(c, static_cast<int>(H), {.causal = causal}).value();
        CHECK(attn.local_heads() == H / n);
        const tensor ql = seq_chunk(q, c);
        const tensor out = attn.forward(ql, seq_chunk(k, c), seq_chunk(v, c)).value();
        CHECK(out.shape() == ql.shape());
        CHECK(rel_error(out, seq_chunk(ref.out, c)) <= kTol);
        // q, k, v to head-sharded and the output back: 4 all_to_alls of the local tensor's bytes.
        CHECK(c.stats()[coll::all_to_all].calls == 4);
        CHECK(c.stats()[coll::all_to_all].bytes == 4 * ql.nbytes());
        CHECK(c.stats().bus_bytes(coll::all_to_all, n) ==
              doctest::Approx(4.0 * (n - 1) / n * static_cast<double>(ql.nbytes())));
        CHECK(c.stats().total_calls() == 4);

        c.stats().reset();
        const auto g = attn.backward(seq_chunk(dout, c)).value();
        CHECK(rel_error(g.dq, seq_chunk(ref.dq, c)) <= kTol);
        CHECK(rel_error(g.dk, seq_chunk(ref.dk, c)) <= kTol);
        CHECK(rel_error(g.dv, seq_chunk(ref.dv, c)) <= kTol);
        CHECK(c.stats()[coll::all_to_all].calls == 4);
        CHECK(c.stats()[coll::all_to_all].bytes == 4 * ql.nbytes());
        CHECK(c.stats().total_calls() == 4);
      });
    }
  }
}

TEST_CASE("ulysses_attention with uneven sequence chunks and cross-attention") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [](gloo_communicator& c) {
      // Sq = 7 and Sk = 10 in torch.chunk layout (4 ranks: 2 2 2 1 and 3 3 3 1), global lengths passed.
      const std::int64_t B = 1, Sq = 7, Sk = 10, H = 4, D = 4;
      const tensor q = randn(shape{B, Sq, H, D}, 5), k = randn(shape{B, Sk, H, D}, 6), v = randn(shape{B, Sk, H, D}, 7);
      const tensor dout = randn(shape{B, Sq, H, D}, 8);
      for (bool causal : {false, true}) {
        CAPTURE(causal);
        const auto ref = reference_attention(q, k, v, causal, dout);
        auto attn = ulysses_attention<gloo_communicator>::create(c, static_cast<int>(H), {.causal = causal}).value();
        c.stats().reset();
        const tensor out = attn.forward(seq_chunk(q, c), seq_chunk(k, c), seq_chunk(v, c), Sq, Sk).value();
        CHECK(rel_error(out, seq_chunk(ref.out, c)) <= kTol);
        const auto g = attn.backward(seq_chunk(dout, c)).value();
        CHECK(g.dq.shape() == seq_chunk(q, c).shape());
        CHECK(g.dk.shape() == seq_chunk(k, c).shape());
        CHECK(rel_error(g.dq, seq_chunk(ref.dq, c)) <= kTol);
        CHECK(rel_error(g.dk, seq_chunk(ref.dk, c)) <= kTol);
        CHECK(rel_error(g.dv, seq_chunk(ref.dv, c)) <= kTol);
        CHECK(c.stats()[coll::all_to_all].calls == 8);
      }
    });
  }
}

TEST_CASE("ulysses rejects head counts not divisible by the degree and bad shapes") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [n](gloo_communicator& c) {
      const int heads = n == 2 ? 3 : 6;
      auto e = result_error(ulysses_attention<gloo_communicator>::create(c, heads));
      CHECK(e.code() == errc::invalid_argument);
      CHECK(std::string(e.what()).find(std::to_string(heads) + " heads not divisible by sequence-parallel degree " +
                                       std::to_string(n)) != std::string::npos);
      e = error_of([&] { (void)seq_to_head(c, randn(shape{1, 2, heads, 4}, 1)); });
      CHECK(e.code() == errc::invalid_argument);
      CHECK(std::string(e.what()).find("seq_to_head") != std::string::npos);

      auto attn = ulysses_attention<gloo_communicator>::create(c, 4, {.causal = true}).value();
      const tensor ok = randn(shape{1, 2, 4, 4}, 1);
      e = result_error(attn.forward(randn(shape{1, 2, 8, 4}, 1), ok, ok));  // 8 heads, expected 4
      CHECK(e.code() == errc::invalid_argument);
      CHECK(std::string(e.what()).find("expected 4 heads") != std::string::npos);
      CHECK(result_error(attn.forward(randn(shape{2, 4, 4}, 1), ok, ok)).code() == errc::invalid_argument);
      CHECK(result_error(attn.backward(ok)).code() == errc::invalid_argument);  // no forward yet
      CHECK(c.stats().total_calls() == 0);
      // A rank that returns before its peers finished connecting breaks their rendezvous: meet once at the end.
      c.barrier().value();
    });
  }
}

TEST_CASE("ulysses_attention keeps a copy of the communicator: moving it after create leaves the layer valid") {
  run_ranks(2, [](gloo_communicator& c) {
    const std::int64_t B = 1, S = 8, H = 4, D = 4;
    const tensor q = randn(shape{B, S, H, D}, 11), k = randn(shape{B, S, H, D}, 12), v = randn(shape{B, S, H, D}, 13);
    const tensor dout = randn(shape{B, S, H, D}, 14);
    const auto ref = reference_attention(q, k, v, true, dout);
    const tensor ql = seq_chunk(q, c), kl = seq_chunk(k, c), vl = seq_chunk(v, c), dl = seq_chunk(dout, c);
    const tensor want_out = seq_chunk(ref.out, c), want_dq = seq_chunk(ref.dq, c), want_dv = seq_chunk(ref.dv, c);

    auto attn = ulysses_attention<gloo_communicator>::create(c, static_cast<int>(H), {.causal = true}).value();
    gloo_communicator moved = std::move(c);  // the layer's copy shares the group with `moved`
    moved.stats().reset();
    CHECK(attn.local_heads() == 2);
    CHECK(rel_error(attn.forward(ql, kl, vl).value(), want_out) <= kTol);
    const auto g = attn.backward(dl).value();
    CHECK(rel_error(g.dq, want_dq) <= kTol);
    CHECK(rel_error(g.dv, want_dv) <= kTol);
    CHECK(moved.stats()[coll::all_to_all].calls == 8);
    moved.barrier().value();
  });
}

TEST_CASE("ulysses_attention given owning q, k, v releases each once converted: same result, lower forward peak") {
  run_ranks(2, [](gloo_communicator& c) {
    const std::int64_t B = 1, S = 64, H = 4, D = 8;
    const tensor q = randn(shape{B, S, H, D}, 31), k = randn(shape{B, S, H, D}, 32), v = randn(shape{B, S, H, D}, 33);
    const auto peak_of = [&](bool owning, tensor& out) {
      memory_account acc;
      memory_scope scope(acc, "attn");
      auto attn = ulysses_attention<gloo_communicator>::create(c, static_cast<int>(H)).value();
      tensor ql = seq_chunk(q, c).clone(), kl = seq_chunk(k, c).clone(), vl = seq_chunk(v, c).clone();
      if (owning) {
        out = attn.forward(std::move(ql), std::move(kl), std::move(vl)).value();
        CHECK_FALSE(ql.defined());
        CHECK_FALSE(kl.defined());
        CHECK_FALSE(vl.defined());
      } else {
        out = attn.forward(ql, kl, vl).value();
      }
      return acc.usage().peak;
    };
    tensor by_view, by_value;
    const auto view_peak = peak_of(false, by_view), owning_peak = peak_of(true, by_value);
    CHECK(rel_error(by_value, by_view) == 0.0);
    CHECK(owning_peak < view_peak);
    // one tensor given as q, k and v (self-attention on x): released after its last use, same result
    auto attn = ulysses_attention<gloo_communicator>::create(c, static_cast<int>(H)).value();
    tensor x = seq_chunk(q, c).clone();
    const tensor self_view = attn.forward(x, x, x).value();
    const tensor self_owning = attn.forward(std::move(x), std::move(x), std::move(x)).value();
    CHECK_FALSE(x.defined());
    CHECK(rel_error(self_owning, self_view) == 0.0);
  });
}

TEST_CASE("ulysses_attention saved_output recompute / exchange_delta keep no head-sharded output: same gradients, lower peak") {
  using so = ulysses_saved_output;
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    run_ranks(4, [causal](gloo_communicator& c) {
      const std::int64_t B = 2, S = 48, H = 4, D = 8;
      const tensor q = randn(shape{B, S, H, D}, 41), k = randn(shape{B, S, H, D}, 42), v = randn(shape{B, S, H, D}, 43);
      const tensor dout = randn(shape{B, S, H, D}, 44);
      const tensor ql = seq_chunk(q, c), kl = seq_chunk(k, c), vl = seq_chunk(v, c), gl = seq_chunk(dout, c);
      struct run {
        tensor out;
        ulysses_attention<gloo_communicator>::grads g;
        std::uint64_t kept = 0, peak = 0;  // live bytes between forward and backward (less out), step's peak
      };
      const auto step = [&](so mode) {
        run r;
        memory_account acc;
        memory_scope scope(acc, "attn");
        auto attn = ulysses_attention<gloo_communicator>::create(c, static_cast<int>(H),
                                                                 {.causal = causal, .saved_output = mode})
                        .value();
        r.out = attn.forward(ql, kl, vl).value();
        r.kept = acc.usage().live - r.out.nbytes();  // exchange_delta's handle shares r.out: counted once
        c.stats().reset();
        r.g = attn.backward(gl).value();
        if (mode == so::exchange_delta) {
          // the 5th all_to_all is δ [B, S/n, H, 1]: 1/D of dout's bytes
          CHECK(c.stats()[coll::all_to_all].calls == 5);
          CHECK(c.stats()[coll::all_to_all].bytes == 4 * gl.nbytes() + gl.nbytes() / D);
        } else {
          CHECK(c.stats()[coll::all_to_all].calls == 4);  // recompute: nothing more travels, O is local
          CHECK(c.stats()[coll::all_to_all].bytes == 4 * gl.nbytes());
        }
        CHECK(c.stats().total_calls() == c.stats()[coll::all_to_all].calls);
        r.peak = acc.usage().peak;
        return r;
      };
      const run kept = step(so::head_sharded);
      for (so mode : {so::recompute, so::exchange_delta}) {
        CAPTURE(static_cast<int>(mode));
        const run lean = step(mode);
        CHECK(std::memcmp(lean.out.data(), kept.out.data(), kept.out.nbytes()) == 0);
        CHECK(std::memcmp(lean.g.dq.data(), kept.g.dq.data(), kept.g.dq.nbytes()) == 0);
        CHECK(std::memcmp(lean.g.dk.data(), kept.g.dk.data(), kept.g.dk.nbytes()) == 0);
        CHECK(std::memcmp(lean.g.dv.data(), kept.g.dv.data(), kept.g.dv.nbytes()) == 0);
        // the head-sharded out [B, S, H/n, D] is exactly what is no longer kept (as many bytes as the local out)
        CHECK(kept.kept - lean.kept == ql.nbytes());
        CHECK(lean.peak < kept.peak);
      }
    });
  }
}
