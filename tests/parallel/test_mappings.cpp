// Megatron's conjugate operators (mappings.hpp): closed forms with rank-valued inputs (as Megatron's
// test_mappings.py), the collective each direction issues, the adjoint property ⟨fwd(x), y⟩ = ⟨x, bwd(y)⟩
// for every pair, and divisibility errors. 2 and 4 ranks.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "jitembed/parallel/mappings.hpp"
#include "support.hpp"

using namespace jitembed;
using namespace jitembed::parallel;
using jitembed::parallel::testing::randn;
using jitembed::parallel::testing::error_of;
using jitembed::parallel::testing::run_ranks;

namespace {

tensor filled(const shape& s, float v) {
  tensor t = tensor::empty(s, dtype::f32);
  std::fill_n(t.data<float>(), t.numel(), v);
  return t;
}

// x[i0, i1, ...] = f(flat index, index along `dim`, index along the last dim).
template <class F>
tensor indexed(const shape& s, std::size_t dim, F f) {
  tensor t = tensor::empty(s, dtype::f32);
  const auto st = contiguous_strides(s);
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(t.numel()); ++i) {
    const std::int64_t along = (i / st[dim]) % s[dim];
    const std::int64_t last = i % s[s.size() - 1];
    t.data<float>()[i] = f(i, along, last);
  }
  return t;
}

bool all_equal_to(const tensor& t, float v) {
  for (std::uint64_t i = 0; i < t.numel(); ++i) {
    if (t.data<float>()[i] != v) return false;
  }
  return true;
}

bool same(const tensor& a, const tensor& b) {
  return a.shape() == b.shape() && std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>());
}

double local_dot(const tensor& a, const tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double s = 0;
  for (std::uint64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a.data<float>()[i]) * b.data<float>()[i];
  return s;
}

// The pairing of the adjoint test: the local dots summed over ranks, or one copy when both sides are replicated.
template <class C>
double paired(C& comm, const tensor& a, const tensor& b, bool one_copy) {
  double d = local_dot(a, b);
  if (one_copy) return d;
  comm.all_reduce(tensor_view(&d, dtype::f64, shape{1}), reduce_op::sum).value();
  return d;
}

}  // namespace

TEST_CASE("mappings: copy_to_tp and reduce_from_tp, closed forms and collectives") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [n](gloo_communicator& c) {
      const int r = c.rank();
      const float tri = static_cast<float>(n * (n + 1) / 2);
      const shape s{3, 4};

      // copy_to_tp: identity forward, all-reduce backward.
      tensor y = copy_to_tp::forward(c, filled(s, static_cast<float>(r)));
      CHECK(y.shape() == s);
      CHECK(all_equal_to(y, static_cast<float>(r)));
      CHECK(c.stats().total_calls() == 0);
      tensor g = copy_to_tp::backward(c, filled(s, static_cast<float>(r + 1)));
      CHECK(all_equal_to(g, tri));
      CHECK(c.stats()[coll::all_reduce].calls == 1);
      CHECK(c.stats()[coll::all_reduce].bytes == 48);

      // reduce_from_tp: all-reduce forward, identity backward.
      c.stats().reset();
      y = reduce_from_tp::forward(c, filled(s, static_cast<float>(r + 1)));
      CHECK(all_equal_to(y, tri));
      CHECK(c.stats()[coll::all_reduce].calls == 1);
      CHECK(c.stats()[coll::all_reduce].bytes == 48);
      g = reduce_from_tp::backward(c, filled(s, static_cast<float>(r)));
      CHECK(all_equal_to(g, static_cast<float>(r)));
      CHECK(c.stats().total_calls() == 1);
    });
  }
}

TEST_CASE("mappings: scatter_to_tp and gather_from_tp split and gather the last dim") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [n](gloo_communicator& c) {
      const int r = c.rank();
      const shape full{2, 3, 4 * n}, local{2, 3, 4};
      // x[row, j] = j + 100 · row (rows of the leading dims flattened): rank r keeps columns [4r, 4r + 4).
      const tensor x = indexed(full, 2, [n](std::int64_t i, std::int64_t, std::int64_t last) {
        return static_cast<float>(last + 100 * (i / (4 * n)));
      });
      const tensor mine = indexed(local, 2, [r](std::int64_t i, std::int64_t, std::int64_t last) {
        return static_cast<float>(4 * r + last + 100 * (i / 4));
      });
      tensor y = scatter_to_tp::forward(c, x);
      CHECK(y.shape() == local);
      CHECK(same(y, mine));
      CHECK(c.stats().total_calls() == 0);
      // Backward all-gathers: rank-valued pieces → column j holds j / 4.
      tensor g = scatter_to_tp::backward(c, filled(local, static_cast<float>(r)));
      CHECK(g.shape() == full);
      CHECK(same(g, indexed(full, 2, [](std::int64_t, std::int64_t, std::int64_t last) {
                   return static_cast<float>(last / 4);
                 })));
      CHECK(c.stats()[coll::all_gather].calls == 1);
      CHECK(c.stats()[coll::all_gather].bytes == full[0] * full[1] * full[2] * 4);

      c.stats().reset();
      y = gather_from_tp::forward(c, filled(local, static_cast<float>(r)));
      CHECK(same(y, g));
      CHECK(c.stats()[coll::all_gather].calls == 1);
      g = gather_from_tp::backward(c, x);
      CHECK(same(g, mine));
      CHECK(c.stats().total_calls() == 1);
    });
  }
}

TEST_CASE("mappings: sequence-parallel scatter, gather (both backwards) and reduce-scatter") {
  for (int n : {2, 4}) {
    for (std::size_t seq_dim : {std::size_t{0}, std::size_t{1}}) {
      CAPTURE(n);
      CAPTURE(seq_dim);
      run_ranks(n, [n, seq_dim](gloo_communicator& c) {
        const int r = c.rank();
        const float tri = static_cast<float>(n * (n + 1) / 2);
        // [s, b, h] (seq_dim 0) or [b, s, h] (seq_dim 1), 2 rows per rank.
        shape full = seq_dim == 0 ? shape{2 * n, 3, 5} : shape{3, 2 * n, 5};
        shape local = full;
        local[seq_dim] = 2;
        const auto row_value = [](std::int64_t, std::int64_t along, std::int64_t last) {
          return static_cast<float>(10 * along + last);
        };
        const auto local_rows = [r](std::int64_t, std::int64_t along, std::int64_t last) {
          return static_cast<float>(10 * (along + 2 * r) + last);
        };
        const auto rank_of_row = [](std::int64_t, std::int64_t along, std::int64_t) {
          return static_cast<float>(along / 2);
        };
        const tensor x = indexed(full, seq_dim, row_value);

        // scatter_to_sp: split / all-gather.
        tensor y = scatter_to_sp::forward(c, x, seq_dim);
        CHECK(same(y, indexed(local, seq_dim, local_rows)));
        CHECK(c.stats().total_calls() == 0);
        tensor g = scatter_to_sp::backward(c, filled(local, static_cast<float>(r)), seq_dim);
        CHECK(same(g, indexed(full, seq_dim, rank_of_row)));
        CHECK(c.stats()[coll::all_gather].calls == 1);
        CHECK(c.stats()[coll::all_gather].bytes == x.nbytes());

        // gather_from_sp: all-gather / reduce-scatter of partial gradients.
        c.stats().reset();
        y = gather_from_sp::forward(c, filled(local, static_cast<float>(r)), seq_dim);
        CHECK(same(y, indexed(full, seq_dim, rank_of_row)));
        CHECK(c.stats()[coll::all_gather].calls == 1);
        const tensor partial = indexed(full, seq_dim, [r](std::int64_t, std::int64_t along, std::int64_t last) {
          return static_cast<float>((r + 1) * (10 * along + last));
        });
        g = gather_from_sp::backward(c, partial, seq_dim);
        CHECK(same(g, indexed(local, seq_dim, [r, tri](std::int64_t, std::int64_t along, std::int64_t last) {
                     return tri * static_cast<float>(10 * (along + 2 * r) + last);
                   })));
        CHECK(c.stats()[coll::reduce_scatter].calls == 1);
        CHECK(c.stats()[coll::reduce_scatter].bytes == partial.nbytes());

        // gather_from_sp_split_grad: all-gather / split.
        c.stats().reset();
        y = gather_from_sp_split_grad::forward(c, filled(local, static_cast<float>(r)), seq_dim);
        CHECK(same(y, indexed(full, seq_dim, rank_of_row)));
        g = gather_from_sp_split_grad::backward(c, x, seq_dim);
        CHECK(same(g, indexed(local, seq_dim, local_rows)));
        CHECK(c.stats().total_calls() == 1);
        CHECK(c.stats()[coll::all_gather].calls == 1);

        // reduce_scatter_to_sp: reduce-scatter / all-gather.
        c.stats().reset();
        y = reduce_scatter_to_sp::forward(c, partial, seq_dim);
        CHECK(same(y, indexed(local, seq_dim, [r, tri](std::int64_t, std::int64_t along, std::int64_t last) {
                     return tri * static_cast<float>(10 * (along + 2 * r) + last);
                   })));
        CHECK(c.stats()[coll::reduce_scatter].calls == 1);
        CHECK(c.stats()[coll::reduce_scatter].bytes == partial.nbytes());
        g = reduce_scatter_to_sp::backward(c, filled(local, static_cast<float>(r)), seq_dim);
        CHECK(same(g, indexed(full, seq_dim, rank_of_row)));
        CHECK(c.stats()[coll::all_gather].calls == 1);
        CHECK(c.stats().total_calls() == 2);
      });
    }
  }
}

namespace {

// One adjoint check: x and y random, replicated (same seed on every rank) or different per rank.
struct adjoint_case {
  bool x_replicated, y_replicated;
  bool lhs_one_copy, rhs_one_copy;  // ⟨fwd(x), y⟩ / ⟨x, bwd(y)⟩ pair two replicated tensors
};

template <class M>
void check_adjoint(gloo_communicator& c, const char* name, const shape& x_shape, const shape& y_shape, adjoint_case k) {
  CAPTURE(name);
  const auto r = static_cast<std::uint64_t>(c.rank());
  const tensor x = randn(x_shape, k.x_replicated ? 11 : 11 + 100 * (r + 1));
  const tensor y = randn(y_shape, k.y_replicated ? 23 : 23 + 100 * (r + 1));
  const tensor fx = M::forward(c, x);
  const tensor by = M::backward(c, y);
  REQUIRE(fx.shape() == y_shape);
  REQUIRE(by.shape() == x_shape);
  const double lhs = paired(c, fx, y, k.lhs_one_copy);
  const double rhs = paired(c, x, by, k.rhs_one_copy);
  CHECK(std::abs(lhs - rhs) <= 1e-5 * std::max(1.0, std::abs(rhs)));
  CHECK(std::abs(rhs) > 1e-3);  // not trivially zero
}

}  // namespace

TEST_CASE("mappings: adjoint property <fwd(x), y> = <x, bwd(y)> for every pair") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [n](gloo_communicator& c) {
      const std::int64_t h = 8, s = 8;
      const shape tp_full{3, 2, h}, tp_local{3, 2, h / n};
      const shape sp_full{s, 2, 3}, sp_local{s / n, 2, 3};
      //                                                          x rep  y rep  lhs 1  rhs 1
      check_adjoint<copy_to_tp>(c, "copy_to_tp", tp_full, tp_full, {true, false, false, true});
      check_adjoint<reduce_from_tp>(c, "reduce_from_tp", tp_full, tp_full, {false, true, true, false});
      check_adjoint<scatter_to_tp>(c, "scatter_to_tp", tp_full, tp_local, {true, false, false, true});
      check_adjoint<gather_from_tp>(c, "gather_from_tp", tp_local, tp_full, {false, true, true, false});
      check_adjoint<scatter_to_sp>(c, "scatter_to_sp", sp_full, sp_local, {true, false, false, true});
      check_adjoint<gather_from_sp>(c, "gather_from_sp", sp_local, sp_full, {false, false, false, false});
      check_adjoint<gather_from_sp_split_grad>(c, "gather_from_sp_split_grad", sp_local, sp_full,
                                               {false, true, true, false});
      check_adjoint<reduce_scatter_to_sp>(c, "reduce_scatter_to_sp", sp_full, sp_local, {false, false, false, false});
    });
  }
}

TEST_CASE("mappings: splits and reduce-scatters need the dim divisible by the degree") {
  run_ranks(4, [](gloo_communicator& c) {
    const tensor odd_hidden = randn(shape{2, 6}, 1);  // 6 % 4 != 0
    auto e = error_of([&] { (void)scatter_to_tp::forward(c, odd_hidden); });
    CHECK(e.code() == errc::invalid_argument);
    CHECK(std::string(e.what()).find("size 6 of dim 1") != std::string::npos);
    CHECK(std::string(e.what()).find("degree 4") != std::string::npos);
    CHECK(error_of([&] { (void)gather_from_tp::backward(c, odd_hidden); }).code() == errc::invalid_argument);

    const tensor odd_seq = randn(shape{7, 2, 4}, 2);  // seq 7 % 4 != 0
    e = error_of([&] { (void)scatter_to_sp::forward(c, odd_seq); });
    CHECK(e.code() == errc::invalid_argument);
    CHECK(std::string(e.what()).find("size 7 of dim 0") != std::string::npos);
    CHECK(error_of([&] { (void)reduce_scatter_to_sp::forward(c, odd_seq); }).code() == errc::invalid_argument);
    CHECK(error_of([&] { (void)gather_from_sp::backward(c, odd_seq); }).code() == errc::invalid_argument);
    CHECK(error_of([&] { (void)gather_from_sp_split_grad::backward(c, odd_seq); }).code() == errc::invalid_argument);
    CHECK(error_of([&] { (void)scatter_to_sp::forward(c, odd_seq, 3); }).code() == errc::invalid_argument);  // no dim 3
    CHECK(c.stats().total_calls() == 0);  // nothing was sent
    // A rank that returns before its peers finished connecting breaks their rendezvous: meet once at the end.
    c.barrier().value();
  });
}

TEST_CASE("mappings: try_forward / try_backward return the error that forward / backward throw") {
  run_ranks(2, [](gloo_communicator& c) {
    const tensor odd_hidden = randn(shape{2, 3}, 1);  // 3 % 2 != 0
    const auto r = scatter_to_tp::try_forward(c, odd_hidden);  // returns; no exception to catch
    REQUIRE_FALSE(r.has_value());
    CHECK(r.code() == errc::invalid_argument);
    const auto thrown = error_of([&] { (void)scatter_to_tp::forward(c, odd_hidden); });
    CHECK(thrown.code() == r.code());
    CHECK(thrown.message() == r.error().message);
    const tensor scalar = randn(shape{}, 2);
    CHECK(gather_from_tp::try_forward(c, scalar).error().message == "gather_from_tp: rank-0 tensor has no last dim");
    // A success is the same tensor forward returns.
    const tensor x = randn(shape{3, 4}, 3);
    const auto ok = scatter_to_tp::try_forward(c, x);
    REQUIRE(ok);
    CHECK(same(*ok, scatter_to_tp::forward(c, x)));
    c.barrier().value();
  });
}
