// Tensor-parallel layers (tensor_parallel.hpp) against the single-rank nn reference (jitembed/nn.hpp) on full tensors:
// outputs, input gradients, gathered weight/bias gradients (fp32 rel. error ≤ 1e-5), with and without
// sequence parallelism; bytes each layer moves (comm.stats()); invalid configurations. 2 and 4 ranks.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <type_traits>

#include "jitembed/nn.hpp"
#include "jitembed/parallel/tensor_parallel.hpp"
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


shape last_is(const shape& s, std::int64_t last) {
  shape out = s;
  out[out.size() - 1] = last;
  return out;
}

// Reference y = x·wᵀ + b and its gradients for dy.
struct linear_ref {
  tensor y, dx, dw, db;
};

linear_ref reference_linear(const tensor& x, const tensor& w, const tensor* b, const tensor& dy) {
  linear_ref r;
  r.y = tensor::empty(last_is(x.shape(), w.size(0)), dtype::f32);
  nn::linear_forward(x, w, b ? &b->view() : nullptr, r.y);
  r.dx = tensor::empty(x.shape(), dtype::f32);
  r.dw = tensor::zeros(w.shape(), dtype::f32);
  r.db = tensor::zeros(shape{w.size(0)}, dtype::f32);
  const tensor_view dx = r.dx, dw = r.dw, db = r.db;
  nn::linear_backward(x, w, dy, &dx, &dw, &db);
  return r;
}

tensor chunk(const tensor& x, std::size_t dim, const gloo_communicator& c) {
  return local_chunk(x, dim, c.size(), c.rank());
}

double bus(coll op, int n) { return bus_factor(op, n); }

bool mentions(const jitembed::error& e, const std::string& s) { return std::string(e.what()).find(s) != std::string::npos; }

}  // namespace

TEST_CASE("column_parallel_linear equals the single-rank linear (plain and gather_output)") {
  for (int n : {2, 4}) {
    for (bool gather : {false, true}) {
      CAPTURE(n);
      CAPTURE(gather);
      run_ranks(n, [gather](gloo_communicator& c) {
        const std::int64_t in = 12, out = 8;
        const tensor x = randn(shape{2, 3, in}, 1), w = randn(shape{out, in}, 2), b = randn(shape{out}, 3);
        const tensor dy = randn(shape{2, 3, out}, 4);
        const auto ref = reference_linear(x, w, &b, dy);

        auto layer = column_parallel_linear<gloo_communicator>::create(c, in, out, {.gather_output = gather}).value();
        layer.load_full(w, b);
        CHECK(layer.weight().shape() == shape{out / c.size(), in});
        const tensor y = layer.forward(x).value();
        CHECK(rel_error(y, gather ? ref.y : chunk(ref.y, 2, c)) <= kTol);
        if (gather) {
          CHECK(c.stats()[coll::all_gather].calls == 1);
          CHECK(c.stats()[coll::all_gather].bytes == ref.y.nbytes());
        }
        CHECK(c.stats().total_calls() == (gather ? 1u : 0u));

        c.stats().reset();
        const tensor dx = layer.backward(gather ? dy : chunk(dy, 2, c)).value();
        CHECK(rel_error(dx, ref.dx) <= kTol);
        // copy_to_tp backward: one all_reduce of dx.
        CHECK(c.stats()[coll::all_reduce].calls == 1);
        CHECK(c.stats()[coll::all_reduce].bytes == x.nbytes());
        CHECK(c.stats().bus_bytes(coll::all_reduce, c.size()) ==
              doctest::Approx(bus(coll::all_reduce, c.size()) * static_cast<double>(x.nbytes())));
        CHECK(c.stats().total_calls() == 1);

        CHECK(rel_error(layer.grad_weight(), chunk(ref.dw, 0, c)) <= kTol);
        CHECK(rel_error(layer.full_grad_weight().value(), ref.dw) <= kTol);
        CHECK(rel_error(layer.full_grad_bias().value(), ref.db) <= kTol);

        // Gradients accumulate until zero_grad().
        (void)layer.forward(x).value();
        (void)layer.backward(gather ? dy : chunk(dy, 2, c)).value();
        tensor twice = ref.dw.clone();
        nn::add_inplace(twice, ref.dw);
        CHECK(rel_error(layer.full_grad_weight().value(), twice) <= kTol);
        layer.zero_grad();
        CHECK(rel_error(layer.full_grad_bias().value(), tensor::zeros(shape{out}, dtype::f32)) == 0.0);
      });
    }
  }
}

TEST_CASE("column_parallel_linear with sequence parallelism: all-gather forward, reduce-scatter backward") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [](gloo_communicator& c) {
      const std::int64_t s = 8, in = 6, out = 8;
      const tensor x = randn(shape{s, 2, in}, 5), w = randn(shape{out, in}, 6), b = randn(shape{out}, 7);
      const tensor dy = randn(shape{s, 2, out}, 8);
      const auto ref = reference_linear(x, w, &b, dy);

      auto layer = column_parallel_linear<gloo_communicator>::create(c, in, out, {.sequence_parallel = true}).value();
      layer.load_full(w, b);
      const tensor y = layer.forward(chunk(x, 0, c)).value();
      CHECK(y.shape() == shape{s, 2, out / c.size()});
      CHECK(rel_error(y, chunk(ref.y, 2, c)) <= kTol);
      CHECK(c.stats()[coll::all_gather].calls == 1);
      CHECK(c.stats()[coll::all_gather].bytes == x.nbytes());  // the full input
      CHECK(c.stats().total_calls() == 1);

      c.stats().reset();
      const tensor dx = layer.backward(chunk(dy, 2, c)).value();
      CHECK(rel_error(dx, chunk(ref.dx, 0, c)) <= kTol);
      CHECK(c.stats()[coll::reduce_scatter].calls == 1);
      CHECK(c.stats()[coll::reduce_scatter].bytes == x.nbytes());
      CHECK(c.stats().bus_bytes(coll::reduce_scatter, c.size()) ==
            doctest::Approx(bus(coll::reduce_scatter, c.size()) * static_cast<double>(x.nbytes())));
      CHECK(c.stats().total_calls() == 1);
      CHECK(rel_error(layer.full_grad_weight().value(), ref.dw) <= kTol);
      CHECK(rel_error(layer.full_grad_bias().value(), ref.db) <= kTol);
    });
  }
}

TEST_CASE("row_parallel_linear equals the single-rank linear (parallel / replicated input, SP)") {
  struct variant {
    bool input_is_parallel, sp;
  };
  for (int n : {2, 4}) {
    for (variant v : {variant{true, false}, variant{false, false}, variant{true, true}}) {
      CAPTURE(n);
      CAPTURE(v.input_is_parallel);
      CAPTURE(v.sp);
      run_ranks(n, [v](gloo_communicator& c) {
        const std::int64_t s = 8, in = 8, out = 6;
        const tensor x = randn(shape{s, 2, in}, 9), w = randn(shape{out, in}, 10), b = randn(shape{out}, 11);
        const tensor dy = randn(shape{s, 2, out}, 12);
        const auto ref = reference_linear(x, w, &b, dy);

        auto layer = row_parallel_linear<gloo_communicator>::create(
                         c, in, out, {.input_is_parallel = v.input_is_parallel, .sequence_parallel = v.sp})
                         .value();
        layer.load_full(w, b);
        CHECK(layer.weight().shape() == shape{out, in / c.size()});
        const tensor y = layer.forward(v.input_is_parallel ? chunk(x, 2, c) : x).value();
        CHECK(rel_error(y, v.sp ? chunk(ref.y, 0, c) : ref.y) <= kTol);  // bias added after the reduction
        if (v.sp) {
          CHECK(c.stats()[coll::reduce_scatter].calls == 1);
          CHECK(c.stats()[coll::reduce_scatter].bytes == ref.y.nbytes());  // the full output
          CHECK(c.stats().bus_bytes(coll::reduce_scatter, c.size()) ==
                doctest::Approx((c.size() - 1.0) / c.size() * static_cast<double>(ref.y.nbytes())));
        } else {
          CHECK(c.stats()[coll::all_reduce].calls == 1);
          CHECK(c.stats()[coll::all_reduce].bytes == ref.y.nbytes());
          CHECK(c.stats().bus_bytes(coll::all_reduce, c.size()) ==
                doctest::Approx(2.0 * (c.size() - 1.0) / c.size() * static_cast<double>(ref.y.nbytes())));
        }
        CHECK(c.stats().total_calls() == 1);

        c.stats().reset();
        const tensor dx = layer.backward(v.sp ? chunk(dy, 0, c) : dy).value();
        CHECK(rel_error(dx, v.input_is_parallel ? chunk(ref.dx, 2, c) : ref.dx) <= kTol);
        if (v.sp) {
          CHECK(c.stats()[coll::all_gather].calls == 1);
          CHECK(c.stats()[coll::all_gather].bytes == dy.nbytes());
        } else if (!v.input_is_parallel) {
          CHECK(c.stats()[coll::all_gather].calls == 1);
          CHECK(c.stats()[coll::all_gather].bytes == x.nbytes());
        }
        CHECK(c.stats().total_calls() == (v.sp || !v.input_is_parallel ? 1u : 0u));
        CHECK(rel_error(layer.full_grad_weight().value(), ref.dw) <= kTol);
        CHECK(rel_error(layer.grad_bias(), ref.db) <= kTol);  // complete on every rank, SP included
        CHECK(rel_error(layer.full_grad_bias().value(), ref.db) <= kTol);
      });
    }
  }
}

TEST_CASE("vocab_parallel_embedding equals the single-rank embedding, with and without SP") {
  for (int n : {2, 4}) {
    for (bool sp : {false, true}) {
      CAPTURE(n);
      CAPTURE(sp);
      run_ranks(n, [sp](gloo_communicator& c) {
        const std::int64_t vocab = 16, hidden = 5, s = 8, b = 3;
        tensor ids = tensor::empty(shape{s, b}, dtype::i64);
        std::mt19937_64 gen(42);
        for (std::int64_t i = 0; i < s * b; ++i) ids.data<std::int64_t>()[i] = static_cast<std::int64_t>(gen() % vocab);
        ids.data<std::int64_t>()[0] = 0;
        ids.data<std::int64_t>()[1] = vocab - 1;
        ids.data<std::int64_t>()[2] = vocab - 1;  // repeated id: gradients accumulate
        const tensor table = randn(shape{vocab, hidden}, 13);
        const tensor dout = randn(shape{s, b, hidden}, 14);
        tensor ref = tensor::empty(shape{s, b, hidden}, dtype::f32);
        nn::embedding_forward(ids, table, ref);
        tensor ref_grad = tensor::zeros(shape{vocab, hidden}, dtype::f32);
        nn::embedding_backward(ids, dout, ref_grad);

        auto emb = vocab_parallel_embedding<gloo_communicator>::create(c, vocab, hidden, {.sequence_parallel = sp}).value();
        emb.load_full(table);
        CHECK(emb.vocab_start() == c.rank() * vocab / c.size());
        const tensor y = emb.forward(ids).value();
        CHECK(rel_error(y, sp ? chunk(ref, 0, c) : ref) == 0.0);  // one nonzero term per element: exact
        CHECK(c.stats()[sp ? coll::reduce_scatter : coll::all_reduce].calls == 1);
        CHECK(c.stats()[sp ? coll::reduce_scatter : coll::all_reduce].bytes == ref.nbytes());
        CHECK(c.stats().total_calls() == 1);

        c.stats().reset();
        emb.backward(sp ? chunk(dout, 0, c) : dout).value();
        CHECK(c.stats().total_calls() == (sp ? 1u : 0u));
        if (sp) {
          CHECK(c.stats()[coll::all_gather].bytes == dout.nbytes());
        }
        CHECK(rel_error(emb.grad_weight(), chunk(ref_grad, 0, c)) <= kTol);
        CHECK(rel_error(emb.full_grad_weight().value(), ref_grad) <= kTol);
      });
    }
  }
}

namespace {

// Reference MLP: y = gelu(x·w1ᵀ + b1)·w2ᵀ + b2 and its gradients for dy.
struct mlp_ref {
  tensor y, dx, dw1, db1, dw2, db2;
};

mlp_ref reference_mlp(const tensor& x, const tensor& w1, const tensor& b1, const tensor& w2, const tensor& b2,
                      const tensor& dy) {
  mlp_ref r;
  tensor h = tensor::empty(last_is(x.shape(), w1.size(0)), dtype::f32);
  nn::linear_forward(x, w1, &b1.view(), h);
  tensor a = tensor::empty(h.shape(), dtype::f32);
  nn::gelu_forward(h, a);
  r.y = tensor::empty(x.shape(), dtype::f32);
  nn::linear_forward(a, w2, &b2.view(), r.y);
  tensor da = tensor::empty(a.shape(), dtype::f32);
  r.dw2 = tensor::zeros(w2.shape(), dtype::f32);
  r.db2 = tensor::zeros(b2.shape(), dtype::f32);
  const tensor_view dav = da, dw2 = r.dw2, db2 = r.db2;
  nn::linear_backward(a, w2, dy, &dav, &dw2, &db2);
  tensor dh = tensor::empty(h.shape(), dtype::f32);
  nn::gelu_backward(h, da, dh);
  r.dx = tensor::empty(x.shape(), dtype::f32);
  r.dw1 = tensor::zeros(w1.shape(), dtype::f32);
  r.db1 = tensor::zeros(b1.shape(), dtype::f32);
  const tensor_view dx = r.dx, dw1 = r.dw1, db1 = r.db1;
  nn::linear_backward(x, w1, dh, &dx, &dw1, &db1);
  return r;
}

}  // namespace

TEST_CASE("tensor_parallel_mlp equals the single-rank MLP, with and without SP ([s,b,h] and [b,s,h])") {
  struct variant {
    bool sp;
    std::size_t seq_dim;
  };
  for (int n : {2, 4}) {
    for (variant v : {variant{false, 0}, variant{true, 0}, variant{true, 1}}) {
      CAPTURE(n);
      CAPTURE(v.sp);
      CAPTURE(v.seq_dim);
      run_ranks(n, [v](gloo_communicator& c) {
        const std::int64_t hidden = 8, ffn = 16, s = 8;
        const shape xs = v.seq_dim == 0 ? shape{s, 2, hidden} : shape{2, s, hidden};
        const tensor x = randn(xs, 15), dy = randn(xs, 16);
        const tensor w1 = randn(shape{ffn, hidden}, 17), b1 = randn(shape{ffn}, 18);
        const tensor w2 = randn(shape{hidden, ffn}, 19), b2 = randn(shape{hidden}, 20);
        const auto ref = reference_mlp(x, w1, b1, w2, b2, dy);

        auto mlp = tensor_parallel_mlp<gloo_communicator>::create(c, hidden, ffn, {.sequence_parallel = v.sp, .seq_dim = v.seq_dim}).value();
        mlp.load_full(w1, &b1.view(), w2, &b2.view());
        const tensor y = mlp.forward(v.sp ? chunk(x, v.seq_dim, c) : x).value();
        CHECK(rel_error(y, v.sp ? chunk(ref.y, v.seq_dim, c) : ref.y) <= kTol);
        const auto fwd = c.stats();
        const tensor dx = mlp.backward(v.sp ? chunk(dy, v.seq_dim, c) : dy).value();
        CHECK(rel_error(dx, v.sp ? chunk(ref.dx, v.seq_dim, c) : ref.dx) <= kTol);
        if (v.sp) {
          // all_gather(x) + reduce_scatter(y) forward; all_gather(dy) + reduce_scatter(dx) backward.
          CHECK(fwd[coll::all_gather].bytes == x.nbytes());
          CHECK(fwd[coll::reduce_scatter].bytes == x.nbytes());
          CHECK(fwd.total_calls() == 2);
          CHECK(c.stats()[coll::all_gather].calls == 2);
          CHECK(c.stats()[coll::reduce_scatter].calls == 2);
        } else {
          CHECK(fwd[coll::all_reduce].calls == 1);
          CHECK(fwd.total_calls() == 1);
          CHECK(c.stats()[coll::all_reduce].calls == 2);
          CHECK(c.stats()[coll::all_reduce].bytes == 2 * x.nbytes());
        }
        CHECK(c.stats().total_calls() == (v.sp ? 4u : 2u));
        CHECK(rel_error(mlp.fc1().full_grad_weight().value(), ref.dw1) <= kTol);
        CHECK(rel_error(mlp.fc1().full_grad_bias().value(), ref.db1) <= kTol);
        CHECK(rel_error(mlp.fc2().full_grad_weight().value(), ref.dw2) <= kTol);
        CHECK(rel_error(mlp.fc2().full_grad_bias().value(), ref.db2) <= kTol);
      });
    }
  }
}

TEST_CASE("LayerNorm in an SP region before a column-parallel linear: synced gamma/beta grads equal the reference") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [](gloo_communicator& c) {
      const std::int64_t s = 8, h = 8, out = 12;
      const float eps = 1e-5f;
      const tensor x = randn(shape{s, 2, h}, 21), gamma = randn(shape{h}, 22), beta = randn(shape{h}, 23);
      const tensor w = randn(shape{out, h}, 24), b = randn(shape{out}, 25), dy = randn(shape{s, 2, out}, 26);
      // Reference on the whole sequence.
      tensor ln = tensor::empty(x.shape(), dtype::f32);
      const auto saved = nn::layer_norm_forward(x, gamma, beta, eps, ln);
      const auto lin = reference_linear(ln, w, &b, dy);
      tensor dx_ref = tensor::empty(x.shape(), dtype::f32);
      tensor dg_ref = tensor::zeros(shape{h}, dtype::f32), dbeta_ref = tensor::zeros(shape{h}, dtype::f32);
      const tensor_view dgv = dg_ref, dbv = dbeta_ref;
      nn::layer_norm_backward(x, gamma, saved, lin.dx, dx_ref, &dgv, &dbv);

      // SP: LayerNorm on this rank's sequence chunk, then the column-parallel linear all-gathers it.
      const tensor x_local = chunk(x, 0, c);
      tensor ln_local = tensor::empty(x_local.shape(), dtype::f32);
      const auto saved_local = nn::layer_norm_forward(x_local, gamma, beta, eps, ln_local);
      auto fc = column_parallel_linear<gloo_communicator>::create(c, h, out, {.sequence_parallel = true}).value();
      fc.load_full(w, b);
      const tensor y = fc.forward(ln_local).value();
      CHECK(rel_error(y, chunk(lin.y, 2, c)) <= kTol);
      const tensor dln = fc.backward(chunk(dy, 2, c)).value();
      tensor dx = tensor::empty(x_local.shape(), dtype::f32);
      tensor dg = tensor::zeros(shape{h}, dtype::f32), dbeta = tensor::zeros(shape{h}, dtype::f32);
      const tensor_view dgl = dg, dbl = dbeta;
      nn::layer_norm_backward(x_local, gamma, saved_local, dln, dx, &dgl, &dbl);
      CHECK(rel_error(dx, chunk(dx_ref, 0, c)) <= kTol);
      CHECK(rel_error(dg, dg_ref) > 1e-3);  // partial before the sync

      c.stats().reset();
      sync_replicated_grads(c, {dgl, dbl}).value();
      CHECK(c.stats()[coll::all_reduce].calls == 1);  // one fused buffer
      CHECK(c.stats()[coll::all_reduce].bytes == dg.nbytes() + dbeta.nbytes());
      CHECK(rel_error(dg, dg_ref) <= kTol);
      CHECK(rel_error(dbeta, dbeta_ref) <= kTol);
      CHECK(rel_error(fc.full_grad_weight().value(), lin.dw) <= kTol);
    });
  }
}

TEST_CASE("tensor-parallel layers: create() reports invalid configurations as invalid_argument in the result") {
  using comm_t = gloo_communicator;
  run_ranks(4, [](comm_t& c) {
    auto e = result_error(column_parallel_linear<comm_t>::create(c, 8, 10));
    CHECK(e.code() == errc::invalid_argument);
    CHECK(mentions(e, "out_features 10 not divisible by tensor-parallel degree 4"));
    e = result_error(row_parallel_linear<comm_t>::create(c, 6, 8, {.input_is_parallel = true}));
    CHECK(e.code() == errc::invalid_argument);
    CHECK(mentions(e, "in_features 6 not divisible by tensor-parallel degree 4"));
    e = result_error(vocab_parallel_embedding<comm_t>::create(c, 30, 8));
    CHECK(e.code() == errc::invalid_argument);
    CHECK(mentions(e, "vocab 30 not divisible by tensor-parallel degree 4"));
    e = result_error(tensor_parallel_mlp<comm_t>::create(c, 8, 18));  // fc1: ffn 18 over 4 ranks
    CHECK(e.code() == errc::invalid_argument);
    CHECK(mentions(e, "column_parallel_linear"));
    CHECK(tensor_parallel_mlp<comm_t>::create(c, 0, 8).code() == errc::invalid_argument);
    CHECK(tensor_parallel_mlp<comm_t>::create(c, 6, 8).has_value());
    CHECK(column_parallel_linear<comm_t>::create(c, 8, 8, {.gather_output = true, .sequence_parallel = true}).code() == errc::invalid_argument);
    CHECK(row_parallel_linear<comm_t>::create(c, 8, 8, {.sequence_parallel = true}).code() == errc::invalid_argument);
    CHECK(column_parallel_linear<comm_t>::create(c, 0, 8).code() == errc::invalid_argument);
    CHECK(vocab_parallel_embedding<comm_t>::create(c, 16, 0).code() == errc::invalid_argument);

    // Sequence not divisible by the degree with SP (full sequence 6 over 4 ranks).
    auto row = row_parallel_linear<comm_t>::create(c, 8, 8, {.input_is_parallel = true, .sequence_parallel = true}).value();
    e = result_error(row.forward(randn(shape{6, 2, 2}, 1)));
    CHECK(e.code() == errc::invalid_argument);
    CHECK(mentions(e, "sequence length 6 (dim 0) not divisible by sequence-parallel degree 4"));
    auto emb = vocab_parallel_embedding<comm_t>::create(c, 16, 4, {.sequence_parallel = true}).value();
    e = result_error(emb.forward(tensor::zeros(shape{6, 2}, dtype::i64)));
    CHECK(e.code() == errc::invalid_argument);
    CHECK(mentions(e, "sequence length 6"));

    // Shapes, ids, order of calls.
    auto col = column_parallel_linear<comm_t>::create(c, 8, 8).value();
    e = result_error(col.forward(randn(shape{3, 7}, 1)));
    CHECK(e.code() == errc::invalid_argument);
    CHECK(mentions(e, "x last dim must be 8, got [3,7]"));
    CHECK(result_error(col.backward(randn(shape{3, 2}, 1))).code() == errc::invalid_argument);
    CHECK(error_of([&] { col.load_full(randn(shape{8, 9}, 1), nullptr); }).code() == errc::invalid_argument);
    auto emb2 = vocab_parallel_embedding<comm_t>::create(c, 16, 4).value();
    tensor bad_ids = tensor::zeros(shape{4}, dtype::i64);
    bad_ids.data<std::int64_t>()[2] = 16;
    e = result_error(emb2.forward(bad_ids));
    CHECK(e.code() == errc::invalid_argument);
    CHECK(mentions(e, "id 16 at index 2 outside [0, 16)"));
    CHECK(c.stats().total_calls() == 0);  // every check fires before anything is sent
    // A rank that returns before its peers finished connecting breaks their rendezvous: meet once at the end.
    c.barrier().value();
  });
}

TEST_CASE("tensor-parallel layers reject a rank outside the group") {
  run_ranks(2, [](gloo_communicator& c) {
    auto sub = c.split(c.rank() == 1 ? kNoColor : 0, 0).value();
    if (c.rank() == 1) {
      CHECK_FALSE(sub.valid());
      const auto e = result_error(column_parallel_linear<gloo_communicator>::create(sub, 8, 8));
      CHECK(e.code() == errc::invalid_argument);
      CHECK(mentions(e, "not in the communicator's group"));
      CHECK(result_error(sync_replicated_grads(sub, std::span<const tensor_view>{})).code() ==
            errc::invalid_argument);
    } else {
      CHECK(sub.size() == 1);
      // A group of one: no communication.
      auto one = column_parallel_linear<gloo_communicator>::create(sub, 4, 4).value();
      const tensor w = randn(shape{4, 4}, 3);
      one.load_full(w, nullptr);
      const tensor x = randn(shape{2, 4}, 4);
      const auto ref = reference_linear(x, w, nullptr, x);
      CHECK(rel_error(one.forward(x).value(), ref.y) <= kTol);
      CHECK(rel_error(one.backward(x).value(), ref.dx) <= kTol);
      CHECK(sub.stats().total_calls() == 0);
    }
  });
}

TEST_CASE("tensor-parallel layers keep a copy of the communicator: moving it after create leaves them valid") {
  static_assert(std::is_same_v<kept_communicator_t<gloo_communicator>, gloo_communicator>);
  run_ranks(2, [](gloo_communicator& c) {
    const std::int64_t s = 4, in = 6, out = 8, vocab = 10;
    const tensor x = randn(shape{s, 2, in}, 21), w = randn(shape{out, in}, 22), b = randn(shape{out}, 23);
    const tensor dy = randn(shape{s, 2, out}, 24);
    const auto ref = reference_linear(x, w, &b, dy);
    const tensor w2 = randn(shape{in, out}, 25), dy2 = randn(shape{s, 2, in}, 26);
    const tensor table = randn(shape{vocab, in}, 27);

    auto col = column_parallel_linear<gloo_communicator>::create(c, in, out, {.gather_output = true}).value();
    auto row = row_parallel_linear<gloo_communicator>::create(c, out, in, {.bias = false}).value();
    auto mlp = tensor_parallel_mlp<gloo_communicator>::create(c, in, out, {.bias = false}).value();
    auto emb = vocab_parallel_embedding<gloo_communicator>::create(c, vocab, in).value();
    col.load_full(w, b);
    row.load_full(w2, nullptr);
    mlp.load_full(w, nullptr, w2, nullptr);
    emb.load_full(table);

    // The caller's communicator moves away (and the moved-from object is reassigned to an empty one): the
    // layers run on their copies, which share the group, its stats and its failure state with `moved`.
    gloo_communicator moved = std::move(c);
    c = gloo_communicator();
    CHECK_FALSE(c.valid());
    CHECK(moved.valid());
    moved.stats().reset();

    const tensor y = col.forward(x).value();
    CHECK(rel_error(y, ref.y) <= kTol);
    CHECK(rel_error(col.backward(dy).value(), ref.dx) <= kTol);
    CHECK(rel_error(col.full_grad_weight().value(), ref.dw) <= kTol);
    CHECK(moved.stats()[coll::all_gather].calls == 2);  // gather_output + full_grad_weight, seen by the handle
    CHECK(moved.stats()[coll::all_reduce].calls == 1);  // dx

    // row_parallel_linear (replicated input, split here) against y·w2ᵀ.
    const auto ref2 = reference_linear(ref.y, w2, nullptr, dy2);
    CHECK(rel_error(row.forward(ref.y).value(), ref2.y) <= kTol);
    CHECK(rel_error(row.backward(dy2).value(), ref2.dx) <= kTol);

    // The MLP: fc1 → GELU → fc2, against the nn reference.
    tensor h = tensor::empty(shape{s, 2, out}, dtype::f32), a = tensor::empty(shape{s, 2, out}, dtype::f32);
    nn::linear_forward(x, w, nullptr, h);
    nn::gelu_forward(h, a);
    tensor want = tensor::empty(shape{s, 2, in}, dtype::f32);
    nn::linear_forward(a, w2, nullptr, want);
    CHECK(rel_error(mlp.forward(x).value(), want) <= kTol);
    CHECK(mlp.backward(dy2).value().shape() == x.shape());

    // The embedding: rows of the full table.
    tensor ids = tensor::empty(shape{3}, dtype::i64);
    for (std::int64_t i = 0; i < 3; ++i) ids.data<std::int64_t>()[i] = 3 * i + 1;
    const tensor e = emb.forward(ids).value();
    for (std::int64_t i = 0; i < 3; ++i) {
      for (std::int64_t j = 0; j < in; ++j) {
        CHECK(e.data<float>()[i * in + j] == table.data<float>()[(3 * i + 1) * in + j]);
      }
    }
    CHECK(emb.backward(e).has_value());
    moved.barrier().value();
  });
}
