// cuda_backend and its kernels against the CPU math, the tensor-parallel layers on GPU tensors against the
// single-rank CPU reference (2 ranks as threads on one GPU, host-staged Gloo), and a CUDA-graph capture of
// one TP-MLP step at NCCL world size 1; the boundary transform of device tensors (staged Gloo, 3 ranks; NCCL
// at this machine's world) against the host transform. Without a device every case prints "no CUDA device".
// Tolerances: f32 max|Δ| ≤ 1e-5·max|ref|; bf16 against the CPU f32 math on the same bf16-rounded inputs,
// ≤ 1e-2·max|ref|.
#include <doctest/doctest.h>

#include <algorithm>
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
#include "jitembed/nn/detail/attention_reference.hpp"
#include "jitembed/parallel/cuda/backend.hpp"
#include "jitembed/parallel/cuda/host_staged.hpp"
#include "jitembed/parallel/gloo.hpp"
#include "jitembed/parallel/nccl.hpp"
#include "jitembed/parallel/tensor_parallel.hpp"
#include "jitembed/parallel/ulysses.hpp"
#include "jitembed/parallel/boundary.hpp"

#include "device_support.hpp"

using namespace jitembed;
using namespace jitembed::parallel;
namespace pw = jitembed::nn::pointwise;

namespace {

using cuda_test::have_device;
using cuda_test::on_rank_threads;
using cuda_test::randn;
using cuda_test::rel;
using cuda_test::rounded;

double tol(dtype t) { return t == dtype::f32 ? 1e-5 : 1e-2; }

struct gpu {
  jitembed::cuda::stream stream = jitembed::cuda::stream::create().value();
  cuda_backend be;
  explicit gpu(dtype t) : be(cuda_backend::create(stream, t).value()) {}
};

struct f32_case : std::integral_constant<dtype, dtype::f32> {};
struct bf16_case : std::integral_constant<dtype, dtype::bf16> {};

tensor ids_tensor(const std::vector<std::int64_t>& v) {
  return tensor::copy_of(bytes_view(reinterpret_cast<const std::byte*>(v.data()), v.size() * 8), dtype::i64,
                         shape{static_cast<std::int64_t>(v.size())});
}

}  // namespace

TYPE_TO_STRING(f32_case);
TYPE_TO_STRING(bf16_case);

TEST_CASE_TEMPLATE_DEFINE("cuda ops vs the CPU math", T, cuda_ops) {
  if (!have_device()) return;
  const dtype dt = T::value;
  CAPTURE(to_string(dt));
  gpu g(dt);
  auto& be = g.be;
  const auto in = [&](const tensor& x) { return dt == dtype::f32 ? x.clone() : rounded(x); };

  SUBCASE("linear forward and backward (cuBLAS)") {
    const tensor x = in(randn(shape{2, 24, 48}, 1)), w = in(randn(shape{40, 48}, 2)), b = in(randn(shape{40}, 3));
    const tensor dy = in(randn(shape{2, 24, 40}, 4));
    tensor y = tensor::empty(shape{2, 24, 40}, dtype::f32), dx = tensor::empty(x.shape(), dtype::f32);
    tensor dw = tensor::zeros(w.shape(), dtype::f32), db = tensor::zeros(b.shape(), dtype::f32);
    nn::linear_forward(x, w, &b.view(), y);
    const tensor_view dxv = dx, dwv = dw, dbv = db;
    nn::linear_backward(x, w, dy, &dxv, &dwv, &dbv);
    const tensor gx = be.upload(x), gw = be.upload(w), gb = be.upload(b), gdy = be.upload(dy);
    tensor gy = be.empty(y.shape(), dt), gdx = be.empty(x.shape(), dt);
    tensor gdw = be.zeros(w.shape(), dtype::f32), gdb = be.zeros(b.shape(), dtype::f32);
    be.linear_forward(gx, gw, &gb.view(), gy);
    const tensor_view gdxv = gdx, gdwv = gdw, gdbv = gdb;
    be.linear_backward(gx, gw, gdy, &gdxv, &gdwv, &gdbv);
    CHECK(rel(be.download(gy), y) <= tol(dt));
    CHECK(rel(be.download(gdx), dx) <= tol(dt));
    CHECK(rel(be.download(gdw), dw) <= tol(dt));
    CHECK(rel(be.download(gdb), db) <= tol(dt));
  }
  SUBCASE("gelu forward and backward") {
    const tensor x = in(randn(shape{1000}, 5, 2.0f)), dy = in(randn(shape{1000}, 6));
    tensor y = tensor::empty(x.shape(), dtype::f32), dx = tensor::empty(x.shape(), dtype::f32);
    nn::gelu_forward(x, y);
    nn::gelu_backward(x, dy, dx);
    const tensor gx = be.upload(x), gdy = be.upload(dy);
    tensor gy = be.empty(x.shape(), dt), gdx = be.empty(x.shape(), dt);
    be.gelu_forward(gx, gy);
    be.gelu_backward(gx, gdy, gdx);
    CHECK(rel(be.download(gy), y) <= tol(dt));
    CHECK(rel(be.download(gdx), dx) <= tol(dt));
  }
  SUBCASE("layer norm forward and backward") {
    const std::int64_t m = 7, h = 300;
    const tensor x = in(randn(shape{m, h}, 7, 2.0f)), gm = in(randn(shape{h}, 8)), bt = in(randn(shape{h}, 9));
    const tensor dy = in(randn(shape{m, h}, 10));
    tensor y = tensor::empty(x.shape(), dtype::f32), dx = tensor::empty(x.shape(), dtype::f32);
    tensor dg = tensor::zeros(shape{h}, dtype::f32), dbt = tensor::zeros(shape{h}, dtype::f32);
    const auto saved = nn::layer_norm_forward(x, gm, bt, 1e-5f, y);
    const tensor_view dgv = dg, dbv = dbt;
    nn::layer_norm_backward(x, gm, saved, dy, dx, &dgv, &dbv);
    const tensor gx = be.upload(x), ggm = be.upload(gm), gbt = be.upload(bt), gdy = be.upload(dy);
    tensor gy = be.empty(x.shape(), dt), gdx = be.empty(x.shape(), dt);
    tensor mean = be.empty(shape{m}, dtype::f32), rstd = be.empty(shape{m}, dtype::f32);
    tensor gdg = be.zeros(shape{h}, dtype::f32), gdb = be.zeros(shape{h}, dtype::f32);
    const cudaStream_t s = be.stream().get();
    kernels::layer_norm_forward(dt, gx.data(), ggm.data(), gbt.data(), 1e-5f, gy.data(), mean.data<float>(),
                                rstd.data<float>(), m, h, s);
    kernels::layer_norm_backward(dt, gx.data(), ggm.data(), mean.data<float>(), rstd.data<float>(), gdy.data(),
                                 gdx.data(), gdg.data<float>(), gdb.data<float>(), m, h, s);
    CHECK(rel(be.download(gy), y) <= tol(dt));
    CHECK(rel(be.download(rstd), saved.rstd) <= tol(dt));
    CHECK(rel(be.download(gdx), dx) <= tol(dt));
    CHECK(rel(be.download(gdg), dg) <= tol(dt));
    CHECK(rel(be.download(gdb), dbt) <= tol(dt));
  }
  SUBCASE("embedding lookup and backward on a vocab shard") {
    const std::int64_t v = 10, h = 16, start = 4, local = 5;  // this shard holds rows [4, 9)
    const tensor table = in(randn(shape{v, h}, 11)), dout = in(randn(shape{6, h}, 12));
    const std::vector<std::int64_t> idv{0, 4, 8, 8, 9, 5};
    const tensor ids = ids_tensor(idv);
    tensor want = tensor::zeros(shape{6, h}, dtype::f32), dtable = tensor::zeros(shape{local, h}, dtype::f32);
    for (std::size_t i = 0; i < idv.size(); ++i) {
      const std::int64_t r = idv[i] - start;
      if (r < 0 || r >= local) continue;
      for (std::int64_t j = 0; j < h; ++j) {
        want.data<float>()[i * h + j] = table.data<float>()[idv[i] * h + j];
        dtable.data<float>()[r * h + j] += dout.data<float>()[i * h + j];
      }
    }
    const tensor gtable = be.upload(narrow(table, 0, start, local)), gdout = be.upload(dout);
    const tensor gids = be.upload_as(ids, dtype::i64);
    tensor gout = be.empty(shape{6, h}, dt), gdt = be.zeros(shape{local, h}, dtype::f32);
    const cudaStream_t s = be.stream().get();
    kernels::embedding_forward(dt, gids.data<std::int64_t>(), gtable.data(), gout.data(), 6, h, start, local, s);
    kernels::embedding_backward(dt, gids.data<std::int64_t>(), gdout.data(), gdt.data<float>(), 6, h, start, local, s);
    CHECK(rel(be.download(gout), want) <= tol(dt));
    CHECK(rel(be.download(gdt), dtable) <= tol(dt));
  }
  SUBCASE("cross-entropy") {
    const std::int64_t m = 9, v = 70;
    const tensor logits = in(randn(shape{m, v}, 13, 3.0f));
    const std::vector<std::int64_t> tv{0, 69, 5, 5, 33, 12, 1, 68, 40};
    const tensor targets = ids_tensor(tv);
    tensor dl = tensor::empty(logits.shape(), dtype::f32);
    const tensor_view dlv = dl;
    const float loss = nn::cross_entropy_forward_backward(logits, targets, &dlv);
    const tensor gl = be.upload(logits), gt = be.upload_as(targets, dtype::i64);
    tensor gdl = be.empty(logits.shape(), dt), gloss = be.empty(shape{1}, dtype::f32);
    kernels::cross_entropy(dt, gl.data(), gt.data<std::int64_t>(), gloss.data<float>(), gdl.data(), m, v,
                           be.stream().get());
    CHECK(std::abs(be.download(gloss).data<float>()[0] - loss) <= tol(dt) * std::abs(loss));
    CHECK(rel(be.download(gdl), dl) <= tol(dt));
  }
  SUBCASE("attention forward and backward (batched GEMMs), causal and cross") {
    for (bool causal : {true, false}) {
      CAPTURE(causal);
      const std::int64_t b = 2, sq = 12, sk = causal ? 12 : 9, h = 4, d = 16;
      const tensor q = in(randn(shape{b, sq, h, d}, 41)), k = in(randn(shape{b, sk, h, d}, 42));
      const tensor v = in(randn(shape{b, sk, h, d}, 43)), dout = in(randn(shape{b, sq, h, d}, 44));
      tensor out = tensor::empty(q.shape(), dtype::f32), dq = tensor::empty(q.shape(), dtype::f32);
      tensor dk = tensor::empty(k.shape(), dtype::f32), dv = tensor::empty(v.shape(), dtype::f32);
      const auto saved = nn::attention_forward(q, k, v, causal, out);
      nn::attention_backward(q, k, v, saved, dout, dq, dk, dv);
      const tensor gq = be.upload(q), gk = be.upload(k), gv = be.upload(v), gdo = be.upload(dout);
      tensor gout = be.empty(q.shape(), dt), gdq = be.empty(q.shape(), dt);
      tensor gdk = be.empty(k.shape(), dt), gdv = be.empty(v.shape(), dt);
      const auto gsaved = be.attention_forward(gq, gk, gv, causal, gout);
      be.attention_backward(gq, gk, gv, gsaved, gdo, gdq, gdk, gdv);
      tensor ref_out = tensor::empty(q.shape(), dtype::f32);  // the exact probabilities (blockwise keeps none)
      const tensor probs = nn::detail::attention_reference_forward(q, k, v, causal, ref_out);
      CHECK(rel(be.download(gsaved.probs), probs) <= tol(dt));
      CHECK(rel(be.download(gout), out) <= tol(dt));
      CHECK(rel(be.download(gdq), dq) <= tol(dt));
      CHECK(rel(be.download(gdk), dk) <= tol(dt));
      CHECK(rel(be.download(gdv), dv) <= tol(dt));
    }
  }
  SUBCASE("softmax rows (causal) and its backward, f32 scores") {
    const std::int64_t b = 3, sq = 5, sk = 7;
    const tensor sc = randn(shape{b, sq, sk}, 14, 2.0f), dp = randn(shape{b, sq, sk}, 15);
    tensor p = sc.clone(), ds = dp.clone();
    for (std::int64_t r = 0; r < b * sq; ++r) nn::detail::softmax_row(p.data<float>() + r * sk, sk, r % sq);
    for (std::int64_t r = 0; r < b * sq; ++r) {
      double dot = 0;
      for (std::int64_t j = 0; j < sk; ++j) dot += ds.data<float>()[r * sk + j] * p.data<float>()[r * sk + j];
      for (std::int64_t j = 0; j < sk; ++j) {
        float& e = ds.data<float>()[r * sk + j];
        e = pw::softmax_grad(p.data<float>()[r * sk + j], e, static_cast<float>(dot));
      }
    }
    tensor gp = be.upload_as(sc, dtype::f32), gds = be.upload_as(dp, dtype::f32);
    kernels::softmax_rows(gp.data<float>(), b, sq, sk, true, be.stream().get());
    kernels::softmax_backward_rows(gp.data<float>(), gds.data<float>(), b * sq, sk, be.stream().get());
    CHECK(rel(be.download(gp), p) <= 1e-5);
    CHECK(rel(be.download(gds), ds) <= 1e-5);
  }
}

TEST_CASE_TEMPLATE_INVOKE(cuda_ops, f32_case, bf16_case);

namespace {

// Runs fn(comm, backend) for n ranks as threads on GPU 0: Gloo over loopback, staged through pinned memory on
// the rank's stream, which is also its backend's (one stream per rank) — or, with two_streams, staged on a
// stream of its own, ordered against the backend's by the layers' events.
template <class F>
void run_staged(int n, dtype dt, F fn, bool two_streams = false) {
  auto st = shared_store(hash_store());
  on_rank_threads(n, [&](int r) {
    JITEMBED_CUDA_CHECK(cudaSetDevice(0));
    auto s = jitembed::cuda::stream::create().value();
    auto s_comm = jitembed::cuda::stream::create().value();
    auto g = gloo_communicator::create(st, r, n).value();
    host_staged_communicator<gloo_communicator> comm(std::move(g), cuda_staging(two_streams ? s_comm : s, 0));
    cuda_backend be = cuda_backend::create(s, dt).value();
    fn(comm, be);
    comm.synchronize().value();
  });
}

struct mlp_ref {
  tensor y, dx, dw1, db1, dw2, db2;
};

// The single-rank CPU MLP: y = gelu(x·w1ᵀ + b1)·w2ᵀ + b2 and its gradients for dy.
mlp_ref mlp_reference(const tensor& x, const tensor& w1, const tensor& b1, const tensor& w2, const tensor& b2,
                      const tensor& dy) {
  const std::int64_t ffn = w1.size(0), hidden = w1.size(1);
  shape hs = x.shape();
  hs[hs.size() - 1] = ffn;
  tensor h = tensor::empty(hs, dtype::f32), a = tensor::empty(hs, dtype::f32), da = tensor::empty(hs, dtype::f32);
  mlp_ref r{tensor::empty(x.shape(), dtype::f32), tensor::empty(x.shape(), dtype::f32),
            tensor::zeros(shape{ffn, hidden}, dtype::f32), tensor::zeros(shape{ffn}, dtype::f32),
            tensor::zeros(shape{hidden, ffn}, dtype::f32), tensor::zeros(shape{hidden}, dtype::f32)};
  nn::linear_forward(x, w1, &b1.view(), h);
  nn::gelu_forward(h, a);
  nn::linear_forward(a, w2, &b2.view(), r.y);
  const tensor_view dav = da, dw2 = r.dw2, db2 = r.db2, dxv = r.dx, dw1 = r.dw1, db1 = r.db1;
  nn::linear_backward(a, w2, dy, &dav, &dw2, &db2);
  nn::gelu_backward(h, da, da);
  nn::linear_backward(x, w1, da, &dxv, &dw1, &db1);
  return r;
}

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("TP layers on GPU tensors equal the single-rank CPU reference (2 ranks, staged)", T, tp_gpu) {
  if (!have_device()) return;
  const dtype dt = T::value;
  CAPTURE(to_string(dt));
  const std::int64_t tokens = 16, hidden = 32, ffn = 64;
  const auto in = [&](const tensor& x) { return dt == dtype::f32 ? x.clone() : rounded(x); };
  const tensor x = in(randn(shape{2, tokens / 2, hidden}, 21)), dy = in(randn(shape{2, tokens / 2, hidden}, 22));
  const tensor w1 = in(randn(shape{ffn, hidden}, 23, 0.2f)), b1 = in(randn(shape{ffn}, 24, 0.1f));
  const tensor w2 = in(randn(shape{hidden, ffn}, 25, 0.2f)), b2 = in(randn(shape{hidden}, 26, 0.1f));
  const mlp_ref ref = mlp_reference(x, w1, b1, w2, b2, dy);
  // bf16: the hidden activations are rounded between the layers, so allow the bf16 bound on every output.
  for (int variant = 0; variant < 3; ++variant) {  // no SP, SP, SP with the collectives on their own stream
    const bool sp = variant > 0, two_streams = variant == 2;
    CAPTURE(sp);
    CAPTURE(two_streams);
    run_staged(2, dt, [&](host_staged_communicator<gloo_communicator>& comm, cuda_backend& be) {
      auto mlp = tensor_parallel_mlp<host_staged_communicator<gloo_communicator>, cuda_backend>::create(
                     comm, hidden, ffn, {.sequence_parallel = sp, .seq_dim = 1}, be)
                     .value();
      mlp.load_full(w1, &b1.view(), w2, &b2.view());
      const tensor xin = sp ? local_chunk(x, 1, 2, comm.rank()) : x;
      const tensor gin = sp ? local_chunk(dy, 1, 2, comm.rank()) : dy;
      const tensor y = mlp.forward(be.upload(xin)).value();
      const tensor dx = mlp.backward(be.upload(gin)).value();
      const tensor want_y = sp ? local_chunk(ref.y, 1, 2, comm.rank()) : ref.y;
      const tensor want_dx = sp ? local_chunk(ref.dx, 1, 2, comm.rank()) : ref.dx;
      CHECK(rel(be.download(y), want_y) <= tol(dt));
      CHECK(rel(be.download(dx), want_dx) <= tol(dt));
      CHECK(rel(be.download(mlp.fc1().full_grad_weight().value()), ref.dw1) <= tol(dt));
      CHECK(rel(be.download(mlp.fc1().full_grad_bias().value()), ref.db1) <= tol(dt));
      CHECK(rel(be.download(mlp.fc2().full_grad_weight().value()), ref.dw2) <= tol(dt));
      CHECK(rel(be.download(mlp.fc2().full_grad_bias().value()), ref.db2) <= tol(dt));
    }, two_streams);
  }
  // Column-parallel with gather_output and row-parallel with a replicated input, on their own.
  run_staged(2, dt, [&](host_staged_communicator<gloo_communicator>& comm, cuda_backend& be) {
    using staged = host_staged_communicator<gloo_communicator>;
    auto col =
        column_parallel_linear<staged, cuda_backend>::create(comm, hidden, ffn, {.gather_output = true}, be).value();
    col.load_full(w1, b1);
    tensor h = tensor::empty(shape{2, tokens / 2, ffn}, dtype::f32);
    nn::linear_forward(x, w1, &b1.view(), h);
    CHECK(rel(be.download(col.forward(be.upload(x)).value()), h) <= tol(dt));
    auto row = row_parallel_linear<staged, cuda_backend>::create(comm, ffn, hidden, {}, be).value();
    row.load_full(w2, b2);
    const tensor hin = in(h);
    tensor y = tensor::empty(x.shape(), dtype::f32), dh = tensor::empty(h.shape(), dtype::f32);
    tensor dw = tensor::zeros(w2.shape(), dtype::f32);
    nn::linear_forward(hin, w2, &b2.view(), y);
    const tensor_view dhv = dh, dwv = dw;
    nn::linear_backward(hin, w2, dy, &dhv, &dwv, nullptr);
    CHECK(rel(be.download(row.forward(be.upload(hin)).value()), y) <= tol(dt));
    CHECK(rel(be.download(row.backward(be.upload(dy)).value()), dh) <= tol(dt));
    CHECK(rel(be.download(row.full_grad_weight().value()), dw) <= tol(dt));
  });
}

TEST_CASE_TEMPLATE_INVOKE(tp_gpu, f32_case, bf16_case);

TEST_CASE_TEMPLATE_DEFINE("vocab-parallel embedding and Ulysses attention on GPU tensors (2 ranks, staged)", T, sp_gpu) {
  if (!have_device()) return;
  const dtype dt = T::value;
  CAPTURE(to_string(dt));
  const auto in = [&](const tensor& x) { return dt == dtype::f32 ? x.clone() : rounded(x); };
  using staged = host_staged_communicator<gloo_communicator>;
  // Embedding: vocab 12 over 2 ranks, ids [2, 6] replicated; reference: the whole table on one rank.
  const tensor table = in(randn(shape{12, 8}, 51)), dout = in(randn(shape{2, 6, 8}, 52));
  const std::vector<std::int64_t> idv{0, 11, 5, 6, 6, 3, 7, 2, 9, 1, 0, 10};
  tensor ids = ids_tensor(idv);
  ids = *ids.reinterpret(dtype::i64, shape{2, 6});
  tensor want = tensor::empty(shape{2, 6, 8}, dtype::f32), dtable = tensor::zeros(table.shape(), dtype::f32);
  nn::embedding_forward(ids, table, want);
  nn::embedding_backward(ids, dout, dtable);
  run_staged(2, dt, [&](staged& comm, cuda_backend& be) {
    auto emb = vocab_parallel_embedding<staged, cuda_backend>::create(comm, 12, 8, {}, be).value();
    emb.load_full(table);
    const tensor out = emb.forward(be.upload_as(ids, dtype::i64)).value();
    emb.backward(be.upload(dout)).value();
    CHECK(rel(be.download(out), want) <= tol(dt));
    CHECK(rel(be.download(emb.full_grad_weight().value()), dtable) <= tol(dt));
  });
  // Ulysses: B 2, S 11 (uneven: 6 + 5, all_to_all_v), 4 heads, D 8, causal; reference: single-rank attention.
  const std::int64_t b = 2, s = 11, h = 4, d = 8;
  const tensor q = in(randn(shape{b, s, h, d}, 61)), k = in(randn(shape{b, s, h, d}, 62));
  const tensor v = in(randn(shape{b, s, h, d}, 63)), go = in(randn(shape{b, s, h, d}, 64));
  tensor out = tensor::empty(q.shape(), dtype::f32), dq = tensor::empty(q.shape(), dtype::f32);
  tensor dk = tensor::empty(q.shape(), dtype::f32), dv = tensor::empty(q.shape(), dtype::f32);
  const auto saved = nn::attention_forward(q, k, v, true, out);
  nn::attention_backward(q, k, v, saved, go, dq, dk, dv);
  run_staged(2, dt, [&](staged& comm, cuda_backend& be) {
    auto attn = ulysses_attention<staged, cuda_backend>::create(comm, static_cast<int>(h), {.causal = true}, be).value();
    const auto mine = [&](const tensor& x) { return be.upload(local_chunk(x, 1, 2, comm.rank())); };
    const tensor o = attn.forward(mine(q), mine(k), mine(v), s, s).value();
    const auto g = attn.backward(mine(go)).value();
    const auto want_of = [&](const tensor& x) { return local_chunk(x, 1, 2, comm.rank()); };
    CHECK(rel(be.download(o), want_of(out)) <= tol(dt));
    CHECK(rel(be.download(g.dq), want_of(dq)) <= tol(dt));
    CHECK(rel(be.download(g.dk), want_of(dk)) <= tol(dt));
    CHECK(rel(be.download(g.dv), want_of(dv)) <= tol(dt));
  });
}

TEST_CASE_TEMPLATE_INVOKE(sp_gpu, f32_case, bf16_case);

TEST_CASE("a TP-MLP forward + backward step captures into one CUDA graph at NCCL world size 1") {
  if (!have_device()) return;
  JITEMBED_CUDA_CHECK(cudaSetDevice(0));
  auto st = shared_store(hash_store());
  auto comm = nccl_communicator::create(st, 0, 1, 0).value();
  auto s = jitembed::cuda::stream::create().value();
  comm.set_stream(s.get());  // one stream: the capture follows every collective and copy
  cuda_backend be = cuda_backend::create(s, dtype::bf16).value();
  const std::int64_t hidden = 64, ffn = 256;
  const tensor x = rounded(randn(shape{32, hidden}, 31)), dy = rounded(randn(shape{32, hidden}, 32));
  const tensor w1 = rounded(randn(shape{ffn, hidden}, 33, 0.1f)), b1 = rounded(randn(shape{ffn}, 34, 0.1f));
  const tensor w2 = rounded(randn(shape{hidden, ffn}, 35, 0.1f)), b2 = rounded(randn(shape{hidden}, 36, 0.1f));
  auto mlp = tensor_parallel_mlp<nccl_communicator, cuda_backend>::create(comm, hidden, ffn, {}, be).value();
  mlp.load_full(w1, &b1.view(), w2, &b2.view());
  const tensor gx = be.upload(x), gdy = be.upload(dy);
  // One eager step first: cuBLAS and the memory pool set themselves up outside the capture.
  REQUIRE(mlp.forward(gx).has_value());
  REQUIRE(mlp.backward(gdy).has_value());
  mlp.zero_grad();
  s.synchronize();

  tensor y, dx;
  cudaGraph_t graph = nullptr;
  JITEMBED_CUDA_CHECK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal));
  auto fy = mlp.forward(gx);
  auto fdx = fy ? mlp.backward(gdy) : result<tensor>(fy.error());
  JITEMBED_CUDA_CHECK(cudaStreamEndCapture(s.get(), &graph));  // fails if anything synchronized or left the stream
  REQUIRE(fy.has_value());
  REQUIRE(fdx.has_value());
  y = *fy;
  dx = *fdx;
  cudaGraphExec_t exec = nullptr;
  JITEMBED_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  std::size_t nodes = 0;
  JITEMBED_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  CHECK(nodes > 0);
  JITEMBED_CUDA_CHECK(cudaGraphLaunch(exec, s.get()));
  s.synchronize();
  const mlp_ref ref = mlp_reference(x, w1, b1, w2, b2, dy);
  CHECK(rel(be.download(y), ref.y) <= 1e-2);
  CHECK(rel(be.download(dx), ref.dx) <= 1e-2);
  CHECK(rel(be.download(mlp.fc1().grad_weight()), ref.dw1) <= 1e-2);
  y = tensor();
  dx = tensor();
  s.synchronize();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

namespace {

// The layouts a boundary test moves between, over a world of n ranks (src always shards dim 1 over all).
struct boundary_case {
  const char* name;
  layout src, dst;
};

std::vector<boundary_case> boundary_cases(int n) {
  std::vector<int> all(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) all[static_cast<std::size_t>(r)] = r;
  std::vector<int> tail(all.begin() + (n > 1 ? 1 : 0), all.end()), reversed(all.rbegin(), all.rend());
  return {
      {"shard(1) -> replicate", {all, placement::shard(1)}, {all, placement::replicate()}},
      {"shard(1) -> shard(1) of another degree", {all, placement::shard(1)}, {tail, placement::shard(1)}},
      {"shard(1) -> shard(2) on reversed ranks", {all, placement::shard(1)}, {reversed, placement::shard(2)}},
      {"replicate -> shard(1) of another degree", {tail, placement::replicate()}, {all, placement::shard(1)}},
  };
}

// This rank's part of x under l (undefined outside l).
tensor part_of(const tensor& x, const layout& l, int rank) {
  const auto it = std::find(l.ranks.begin(), l.ranks.end(), rank);
  if (it == l.ranks.end()) return {};
  if (l.p.is_replicate()) return x.clone();
  return local_chunk(x, static_cast<std::size_t>(l.p.dim), static_cast<int>(l.ranks.size()),
                     static_cast<int>(it - l.ranks.begin()));
}

// The boundary transform of device tensors over comm (device memory: staged or NCCL) equals the one of the
// same CPU tensors over the host communicator `host` (Gloo; null: the expected chunks of the global tensor,
// what the CPU tests check the host transform gives), forward and the gradient's way back.
template <class C, class H>
void check_device_boundary(C& comm, H* host, const cuda_backend& be, const tensor& x, const tensor& dy) {
  const int me = comm.rank();
  for (const auto& bc : boundary_cases(comm.size())) {
    CAPTURE(bc.name);
    const tensor xs = part_of(x, bc.src, me), gd = part_of(dy, bc.dst, me);
    const tensor dxs = xs.defined() ? be.upload_as(xs, dtype::f32) : tensor();
    const tensor dgd = gd.defined() ? be.upload_as(gd, dtype::f32) : tensor();
    be.stream().synchronize();  // the uploads are on the backend's stream; the transform runs on comm's
    const tensor y = boundary_forward(comm, xs.defined() ? &dxs.view() : nullptr, x.shape(), bc.src, bc.dst);
    const tensor g = boundary_backward(comm, gd.defined() ? &dgd.view() : nullptr, x.shape(), bc.src, bc.dst);
    comm.synchronize().value();
    tensor want_y = part_of(x, bc.dst, me), want_g = part_of(dy, bc.src, me);
    if (host != nullptr) {
      want_y = boundary_forward(*host, xs.defined() ? &xs.view() : nullptr, x.shape(), bc.src, bc.dst);
      want_g = boundary_backward(*host, gd.defined() ? &gd.view() : nullptr, x.shape(), bc.src, bc.dst);
    }
    CHECK(y.defined() == want_y.defined());
    CHECK(g.defined() == want_g.defined());
    if (y.defined()) {
      CHECK(y.device() == comm.device());
      CHECK(rel(be.download(y), want_y) == 0.0);  // a copy: exact
    }
    if (g.defined()) CHECK(rel(be.download(g), want_g) == 0.0);
  }
}

}  // namespace

TEST_CASE("boundary transform of device tensors equals the Gloo host transform (3 ranks, staged)") {
  if (!have_device()) return;
  const tensor x = randn(shape{2, 10, 6}, 71), dy = randn(shape{2, 10, 6}, 72);  // seq 10 over 3: 4 + 3 + 3
  auto st = shared_store(hash_store());
  auto st_host = shared_store(hash_store());
  on_rank_threads(3, [&](int r) {
    JITEMBED_CUDA_CHECK(cudaSetDevice(0));
    auto s = jitembed::cuda::stream::create().value();
    host_staged_communicator<gloo_communicator> comm(gloo_communicator::create(st, r, 3).value(), cuda_staging(s, 0));
    auto host = gloo_communicator::create(st_host, r, 3).value();
    const cuda_backend be = cuda_backend::create(s, dtype::f32).value();
    check_device_boundary(comm, &host, be, x, dy);
  });
}

TEST_CASE("boundary transform of device tensors over NCCL (grouped send/recv) equals the host result") {
  if (!have_device()) return;
  // One rank per visible GPU (or several on GPU 0 with NCCL >= 2.30 and NCCL_MULTI_RANK_GPU_ENABLE=1); on one
  // GPU with the toolkit's NCCL that is a world of 1: the self-copies on the device, no message.
  const std::vector<int> devs = nccl_thread_devices();
  const int n = static_cast<int>(devs.size());
  std::printf("boundary over NCCL: %d rank(s)\n", n);
  const tensor x = randn(shape{2, 11, 8}, 73), dy = randn(shape{2, 11, 8}, 74);
  auto st = shared_store(hash_store());
  on_rank_threads(n, [&](int r) {
    const int dev = devs[static_cast<std::size_t>(r)];
    JITEMBED_CUDA_CHECK(cudaSetDevice(dev));
    auto comm = nccl_communicator::create(st, r, n, dev).value();
    auto s = jitembed::cuda::stream::create().value();
    const cuda_backend be = cuda_backend::create(s, dtype::f32).value();
    check_device_boundary(comm, static_cast<gloo_communicator*>(nullptr), be, x, dy);
    // bf16 moves as bytes too: replicate -> shard(1) -> replicate gives the tensor back
    std::vector<int> ranks(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) ranks[static_cast<std::size_t>(i)] = i;
    const layout rep{ranks, placement::replicate()}, sharded{ranks, placement::shard(1)};
    const tensor xb = rounded(x);
    const tensor full = be.upload(xb);  // bf16 on the device
    be.stream().synchronize();
    const tensor mine = boundary_forward(comm, &full.view(), xb.shape(), rep, sharded, dtype::bf16);
    const tensor back = boundary_forward(comm, &mine.view(), xb.shape(), sharded, rep, dtype::bf16);
    comm.synchronize().value();
    CHECK(rel(be.download(back), xb) == 0.0);
  });
}
