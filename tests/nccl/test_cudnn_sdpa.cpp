// cuDNN's fused attention (parallel/cuda/cudnn_sdpa.hpp) against the exact attention: nn::attention_forward /
// backward in f32 on the same bf16-rounded inputs, forward (out, lse) and backward (dq, dk, dv), causal and
// not, S not a multiple of cuDNN's 64/128-row tiles, D 64 / 80 (the Qwen ViT's) / 128, both memory layouts;
// and as cuda_backend's attention engine under Ulysses (2 ranks, staged) against the single-rank reference.
// Tolerances (bf16 in and out, f32 inside): out, dq, dk, dv max|Δ| ≤ 1e-2·max|ref| (outputs are rounded to
// bf16, 2⁻⁸ relative, and the probabilities enter P·V and dS as bf16); lse (f32) max|Δ| ≤ 1e-3·max|ref|.
// Without a device every case prints "no CUDA device" (skipped); the argument checks of cuda_backend::create
// run everywhere.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "jitembed/cuda/buffer.hpp"
#include "jitembed/nn.hpp"
#include "jitembed/parallel/cuda/backend.hpp"
#include "jitembed/parallel/cuda/cudnn_sdpa.hpp"
#include "jitembed/parallel/cuda/host_staged.hpp"
#include "jitembed/parallel/gloo.hpp"
#include "jitembed/parallel/ulysses.hpp"

#include "device_support.hpp"

using namespace jitembed;
using namespace jitembed::parallel;

namespace {

using cuda_test::have_device;
using cuda_test::on_rank_threads;
using cuda_test::rel;

// bf16-representable normal values (the inputs a bf16 run sees), as f32.
tensor randn_bf16(const shape& s, std::uint64_t seed) { return cuda_test::rounded(cuda_test::randn(s, seed)); }

// [B, S, H, D] → [B, H, S, D] (a contiguous copy).
tensor to_bhsd(const tensor& x) {
  const std::int64_t b = x.size(0), s = x.size(1), h = x.size(2), d = x.size(3);
  tensor y = tensor::empty(shape{b, h, s, d}, dtype::f32);
  for (std::int64_t bi = 0; bi < b; ++bi)
    for (std::int64_t si = 0; si < s; ++si)
      for (std::int64_t hi = 0; hi < h; ++hi)
        for (std::int64_t di = 0; di < d; ++di)
          y.data<float>()[((bi * h + hi) * s + si) * d + di] = x.data<float>()[((bi * s + si) * h + hi) * d + di];
  return y;
}

struct exact {
  tensor out, lse, dq, dk, dv;
};

exact exact_attention(const tensor& q, const tensor& k, const tensor& v, const tensor& dout, bool causal) {
  exact e{tensor::empty(q.shape(), dtype::f32),
          {},
          tensor::empty(q.shape(), dtype::f32),
          tensor::empty(k.shape(), dtype::f32),
          tensor::empty(v.shape(), dtype::f32)};
  const auto saved = nn::attention_forward(q, k, v, causal, e.out);
  nn::attention_backward(q, k, v, saved, dout, e.dq, e.dk, e.dv);
  e.lse = saved.lse;
  return e;
}

// A fused engine that takes bf16 only and never runs: for cuda_backend::create's checks.
struct bf16_only_engine final : cuda_attention_engine {
  std::string_view name() const noexcept override { return "test"; }
  bool supports(dtype t) const noexcept override { return t == dtype::bf16; }
  cuda_attention_saved forward(const tensor_view&, const tensor_view&, const tensor_view&, bool,
                               const tensor&) override {
    throw error(errc::internal, "not run");
  }
  void backward(const tensor_view&, const tensor_view&, const tensor_view&, const cuda_attention_saved&,
                const tensor_view&, const tensor_view&, const tensor_view&, const tensor_view&) override {
    throw error(errc::internal, "not run");
  }
};

}  // namespace

TEST_CASE("cuda_backend::create refuses a fused attention engine that does not take its dtype") {
  auto r = cuda_backend::create(jitembed::cuda::stream_ref{}, dtype::f32, cuda_attention::of(bf16_only_engine{}));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == errc::invalid_argument);
  CHECK(r.error().message == "cuda_backend: the test attention engine does not take dtype f32");
}

TEST_CASE("cudnn sdpa forward and backward equal the exact attention (bf16)") {
  if (!have_device()) return;
  JITEMBED_CUDA_CHECK(cudaSetDevice(0));
  auto stream = jitembed::cuda::stream::create().value();
  const cuda_backend be = cuda_backend::create(stream, dtype::bf16).value();  // upload / download
  auto sdpa = cudnn_sdpa::create(stream).value();
  struct shape_case {
    std::int64_t b, sq, sk, h, d;
    bool causal;
  };
  // S 100 / 77 / 130: not multiples of 64; causal with Sq == Sk (torch's is_causal), cross attention not causal.
  const shape_case cases[] = {{2, 100, 100, 3, 80, true}, {2, 100, 100, 3, 80, false}, {1, 77, 130, 2, 80, false},
                              {2, 65, 65, 2, 64, true},   {1, 130, 130, 2, 128, true}, {1, 64, 64, 4, 64, false}};
  for (const auto& c : cases) {
    for (const sdpa_layout layout : {sdpa_layout::bshd, sdpa_layout::bhsd}) {
      if (layout == sdpa_layout::bhsd && c.d != 80) continue;  // the other layout: its strides, once per mask
      CAPTURE(c.sq);
      CAPTURE(c.sk);
      CAPTURE(c.d);
      CAPTURE(c.causal);
      CAPTURE(layout == sdpa_layout::bshd);
      const tensor q = randn_bf16(shape{c.b, c.sq, c.h, c.d}, 1), k = randn_bf16(shape{c.b, c.sk, c.h, c.d}, 2);
      const tensor v = randn_bf16(shape{c.b, c.sk, c.h, c.d}, 3), dout = randn_bf16(shape{c.b, c.sq, c.h, c.d}, 4);
      const exact want = exact_attention(q, k, v, dout, c.causal);
      const auto lay = [&](const tensor& x) { return layout == sdpa_layout::bshd ? x : to_bhsd(x); };
      const tensor gq = be.upload(lay(q)), gk = be.upload(lay(k)), gv = be.upload(lay(v)), gdo = be.upload(lay(dout));
      tensor gout = be.empty(gq.shape(), dtype::bf16), glse = be.empty(shape{c.b, c.h, c.sq}, dtype::f32);
      tensor gdq = be.empty(gq.shape(), dtype::bf16), gdk = be.empty(gk.shape(), dtype::bf16);
      tensor gdv = be.empty(gv.shape(), dtype::bf16);
      auto f = sdpa.forward(gq, gk, gv, c.causal, gout, glse, layout);
      REQUIRE_MESSAGE(f.has_value(), f.error().message);
      auto b = sdpa.backward(gq, gk, gv, gout, gdo, glse, c.causal, gdq, gdk, gdv, layout);
      REQUIRE_MESSAGE(b.has_value(), b.error().message);
      CHECK(rel(be.download(gout), lay(want.out)) <= 1e-2);
      CHECK(rel(be.download(glse), want.lse) <= 1e-3);
      CHECK(rel(be.download(gdq), lay(want.dq)) <= 1e-2);
      CHECK(rel(be.download(gdk), lay(want.dk)) <= 1e-2);
      CHECK(rel(be.download(gdv), lay(want.dv)) <= 1e-2);
    }
  }
  // One graph per direction and shape: a second run of the first case builds nothing.
  const std::size_t graphs = sdpa.cached_graphs();
  const tensor q = be.upload(randn_bf16(shape{2, 100, 3, 80}, 5));
  tensor out = be.empty(q.shape(), dtype::bf16), lse = be.empty(shape{2, 3, 100}, dtype::f32);
  REQUIRE(sdpa.forward(q, q, q, true, out, lse).has_value());
  CHECK(sdpa.cached_graphs() == graphs);
  CHECK(sdpa.max_workspace_bytes() >= 0);
}

TEST_CASE("cudnn sdpa rejects bad arguments with specific errors before enqueueing anything") {
  if (!have_device()) return;
  JITEMBED_CUDA_CHECK(cudaSetDevice(0));
  auto stream = jitembed::cuda::stream::create().value();
  const cuda_backend be = cuda_backend::create(stream, dtype::bf16).value();
  auto sdpa = cudnn_sdpa::create(stream).value();
  const tensor q = be.empty(shape{1, 16, 2, 64}, dtype::bf16), lse = be.empty(shape{1, 2, 16}, dtype::f32);
  tensor out = be.empty(q.shape(), dtype::bf16);
  const tensor f32 = be.empty(q.shape(), dtype::f32);
  auto r = sdpa.forward(f32, f32, f32, false, f32, lse);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == errc::dtype_mismatch);
  CHECK(r.error().message == "cudnn sdpa forward: dtype f32 (bf16 or f16 only: cuDNN's fused attention)");
  const tensor odd = be.empty(shape{1, 16, 2, 36}, dtype::bf16);
  tensor odd_out = be.empty(odd.shape(), dtype::bf16);
  r = sdpa.forward(odd, odd, odd, false, odd_out, lse);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message == "cudnn sdpa forward: head dim 36 (a multiple of 8, at most 256)");
  const tensor bad_lse = be.empty(shape{1, 16, 2}, dtype::f32);
  r = sdpa.forward(q, q, q, false, out, bad_lse);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message == "cudnn sdpa forward: lse must be f32 [1,2,16], got f32 [1,16,2]");
  const tensor host = tensor::empty(q.shape(), dtype::bf16);
  r = sdpa.forward(host, host, host, false, out, lse);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message == "cudnn sdpa forward: q must be a contiguous tensor on cuda:0");
  CHECK(sdpa.cached_graphs() == 0);
}

TEST_CASE("Ulysses attention with cuDNN's engine equals the single-rank reference (2 ranks, staged, bf16)") {
  if (!have_device()) return;
  // B 1, S 129 (uneven: 65 + 64), 4 heads of D 64, causal; reference: single-rank CPU attention, f32.
  const std::int64_t b = 1, s = 129, h = 4, d = 64;
  const tensor q = randn_bf16(shape{b, s, h, d}, 61), k = randn_bf16(shape{b, s, h, d}, 62);
  const tensor v = randn_bf16(shape{b, s, h, d}, 63), go = randn_bf16(shape{b, s, h, d}, 64);
  const exact want = exact_attention(q, k, v, go, true);
  using staged = host_staged_communicator<gloo_communicator>;
  auto st = shared_store(hash_store());
  std::vector<std::string> engines(2);
  on_rank_threads(2, [&](int r) {
    JITEMBED_CUDA_CHECK(cudaSetDevice(0));
    auto stream = jitembed::cuda::stream::create().value();
    auto g = gloo_communicator::create(st, r, 2).value();
    staged comm(std::move(g), cuda_staging(stream, 0));
    const cuda_backend be = cuda_backend::create(stream, dtype::bf16, make_cudnn_attention(stream).value()).value();
    engines[static_cast<std::size_t>(r)] = std::string(be.attention_engine()->name());
    auto attn =
        ulysses_attention<staged, cuda_backend>::create(comm, static_cast<int>(h), {.causal = true}, be).value();
    const auto mine = [&](const tensor& x) { return local_chunk(x, 1, 2, comm.rank()); };
    if (r == 0) {  // the engine's saved state shares the caller's out (no device copy)
      const tensor x = be.upload(mine(q)), out = be.empty(x.shape(), dtype::bf16);
      CHECK(be.attention_forward(x, x, x, true, out).out.data() == out.data());
    }
    const tensor o = attn.forward(be.upload(mine(q)), be.upload(mine(k)), be.upload(mine(v)), s, s).value();
    const auto grads = attn.backward(be.upload(mine(go))).value();
    CHECK(rel(be.download(o), mine(want.out)) <= 1e-2);
    CHECK(rel(be.download(grads.dq), mine(want.dq)) <= 1e-2);
    CHECK(rel(be.download(grads.dk), mine(want.dk)) <= 1e-2);
    CHECK(rel(be.download(grads.dv), mine(want.dv)) <= 1e-2);
    comm.synchronize().value();
  });
  CHECK(engines[0] == "cudnn");
}
