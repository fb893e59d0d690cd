// Placements and redistribute: every transition and round trip on uneven shapes (2 and 4 ranks), the
// collective and byte count each transition records, the adjoint property of the backward, bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "jitembed/parallel/placement.hpp"
#include "support.hpp"

using namespace jitembed;
using namespace jitembed::parallel;
using jitembed::parallel::testing::randn;
using jitembed::parallel::testing::rel_error;
using jitembed::parallel::testing::run_ranks;

namespace {

// 7 rows (uneven over 2 and 4 ranks), 3 (fewer than 4 ranks: one rank holds nothing), 5 (uneven).
const shape kGlobal{7, 3, 5};

const std::vector<placement> kPlacements{placement::shard(0), placement::shard(1), placement::shard(2),
                                         placement::replicate(), placement::partial()};

std::uint64_t nbytes_of(const shape& s) { return checked_nbytes(s.span(), dtype::f32).value(); }

bool same_values(const tensor_view& a, const tensor_view& b, double tol = 1e-5) {
  return a.shape() == b.shape() && rel_error(a, b) <= tol;
}

// A random dtensor with placement p: replicated values from one seed, shards and partial summands per-rank
// random. `full` receives the global tensor it stands for (every rank computes the same).
dtensor random_dtensor(const gloo_communicator& c, placement p, std::uint64_t seed, tensor* full = nullptr) {
  const int n = c.size();
  dtensor x{tensor(), kGlobal, p};
  if (p.is_replicate()) {
    x.local = randn(kGlobal, seed);
    if (full) *full = x.local.clone();
  } else if (p.is_partial()) {
    x.local = randn(kGlobal, seed + static_cast<std::uint64_t>(c.rank()));
    if (full) {
      *full = tensor::zeros(kGlobal, dtype::f32);
      for (int r = 0; r < n; ++r) {
        const tensor part = randn(kGlobal, seed + static_cast<std::uint64_t>(r));
        for (std::uint64_t i = 0; i < part.numel(); ++i) full->data<float>()[i] += part.data<float>()[i];
      }
    }
  } else {
    const auto d = static_cast<std::size_t>(p.dim);
    std::vector<tensor> parts;
    for (int r = 0; r < n; ++r) {
      shape s = kGlobal;
      s[d] = chunk_size(kGlobal[d], n, r);
      parts.push_back(randn(s, seed + static_cast<std::uint64_t>(r)));
    }
    x.local = parts[static_cast<std::size_t>(c.rank())];
    if (full) {
      std::vector<tensor_view> views(parts.begin(), parts.end());
      *full = concat(views, d);
    }
  }
  return x;
}

// Σ over ranks of the local dot products; one copy counts when both are replicate; two partial tensors
// pair through their sums (the global tensors they stand for).
double pairing(gloo_communicator& c, const dtensor& a, const dtensor& b) {
  REQUIRE(a.place == b.place);
  if (a.place.is_partial()) {
    const tensor fa = full_tensor(c, a), fb = full_tensor(c, b);
    double s = 0;
    for (std::uint64_t i = 0; i < fa.numel(); ++i) s += double(fa.data<float>()[i]) * double(fb.data<float>()[i]);
    return s;
  }
  REQUIRE(a.local.shape() == b.local.shape());
  double s = 0;
  for (std::uint64_t i = 0; i < a.local.numel(); ++i)
    s += double(a.local.data<float>()[i]) * double(b.local.data<float>()[i]);
  c.all_reduce(tensor_view(&s, dtype::f64, shape{1}), reduce_op::sum).value();
  if (a.place.is_replicate()) s /= c.size();
  return s;
}

// The same per-rank pairing when the two placements differ (a partial primal against its replicated
// cotangent): Σ over ranks of the local dots, exactly as the definition with no special case.
double pairing_mixed(gloo_communicator& c, const dtensor& a, const dtensor& b) {
  REQUIRE(a.local.shape() == b.local.shape());
  double s = 0;
  for (std::uint64_t i = 0; i < a.local.numel(); ++i)
    s += double(a.local.data<float>()[i]) * double(b.local.data<float>()[i]);
  c.all_reduce(tensor_view(&s, dtype::f64, shape{1}), reduce_op::sum).value();
  if (a.place.is_replicate() && b.place.is_replicate()) s /= c.size();
  return s;
}

void check_close(double a, double b) { CHECK(std::abs(a - b) <= 1e-9 + 1e-6 * std::max(std::abs(a), std::abs(b))); }

// What this rank must hold of `full` under q.
tensor expected_local(const gloo_communicator& c, const tensor& full, placement q) {
  if (q.is_shard()) return local_chunk(full.view(), static_cast<std::size_t>(q.dim), c.size(), c.rank());
  if (q.is_replicate() || c.rank() == 0) return full.clone();
  return tensor::zeros(full.shape(), full.dtype());
}

// The one collective a transition records (total calls 0 or 1) and its bytes.
void check_stats(const gloo_communicator& c, placement p, placement q, const dtensor& x) {
  const comm_stats& st = c.stats();
  const std::uint64_t global_bytes = nbytes_of(kGlobal);
  auto only = [&](coll op, std::uint64_t bytes) {
    CHECK(st.total_calls() == 1);
    CHECK(st[op].calls == 1);
    CHECK(st[op].bytes == bytes);
  };
  if (p == q || (p.is_replicate() && !q.is_replicate())) {
    CHECK(st.total_calls() == 0);
    CHECK(st.total_bytes() == 0);
  } else if (p.is_shard() && q.is_shard()) {
    only(coll::all_to_all, x.local.nbytes());
  } else if (p.is_shard()) {
    only(coll::all_gather, global_bytes);  // to replicate, and to partial (through replicate)
  } else if (q.is_shard()) {
    only(coll::reduce_scatter, global_bytes);
  } else {
    only(coll::all_reduce, global_bytes);
  }
}

}  // namespace

TEST_CASE("placement: factories / equality / to_string") {
  CHECK(placement::shard(1) == placement::shard(1));
  CHECK_FALSE(placement::shard(1) == placement::shard(0));
  CHECK_FALSE(placement::shard(0) == placement::replicate());
  CHECK(placement::replicate() == placement{placement::kind::replicate, 7});  // dim only matters for shard
  CHECK(placement::partial().is_partial());
  CHECK(placement::shard(2).to_string() == "shard(2)");
  CHECK(placement::replicate().to_string() == "replicate");
  CHECK(placement::partial().to_string() == "partial(sum)");
}

TEST_CASE("distribute and full_tensor for every placement on uneven shapes") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [](gloo_communicator& c) {
      const tensor full = randn(kGlobal, 11);
      c.stats().reset();
      for (const placement& p : kPlacements) {
        CAPTURE(p.to_string());
        const dtensor x = distribute(c, full.view(), p);
        CHECK(x.global == kGlobal);
        CHECK(x.place == p);
        CHECK(same_values(x.local.view(), expected_local(c, full, p).view(), 0.0));
        CHECK(same_values(full_tensor(c, x).view(), full.view(), 0.0));
      }
      CHECK(c.stats()[coll::all_gather].calls == 3);  // one per shard placement
      CHECK(c.stats()[coll::all_reduce].calls == 1);  // the partial one
      CHECK(c.stats().total_calls() == 4);
    });
  }
}

TEST_CASE("redistribute: every transition with its values / its one collective and bytes / the round trip") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [](gloo_communicator& c) {
      std::uint64_t seed = 100;
      for (const placement& p : kPlacements) {
        for (const placement& q : kPlacements) {
          CAPTURE(p.to_string());
          CAPTURE(q.to_string());
          tensor full;
          const dtensor x = random_dtensor(c, p, seed += 10, &full);
          c.stats().reset();
          const dtensor y = redistribute(c, x, q);
          check_stats(c, p, q, x);
          CHECK(y.global == kGlobal);
          CHECK(y.place == q);
          if (p == q) {
            CHECK(y.local.data() == x.local.data());  // no copy, no communication
          } else {
            CHECK(same_values(y.local.view(), expected_local(c, full, q).view()));
          }
          CHECK(same_values(full_tensor(c, y).view(), full.view()));
          // Round trip x → q → p: the same local tensor (a partial one comes back as rank 0 = the sum).
          const dtensor z = redistribute(c, y, p);
          CHECK(z.place == p);
          if (p.is_partial() && !q.is_partial()) {
            CHECK(same_values(z.local.view(), expected_local(c, full, p).view()));
          } else {
            CHECK(same_values(z.local.view(), x.local.view()));
          }
          CHECK(same_values(full_tensor(c, z).view(), full.view()));
        }
      }
    });
  }
}

TEST_CASE("redistribute_backward: adjoint of every transition and DTensor's partial normalisation") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [](gloo_communicator& c) {
      std::uint64_t seed = 5000;
      for (const placement& p : kPlacements) {
        for (const placement& q : kPlacements) {
          CAPTURE(p.to_string());
          CAPTURE(q.to_string());
          const dtensor x = random_dtensor(c, p, seed += 10);
          const dtensor y = random_dtensor(c, q, seed += 10);
          const dtensor fwd = redistribute(c, x, q);
          c.stats().reset();
          const dtensor bwd = redistribute_backward(c, y, p);
          // The inverse transition: the same collective as redistribute(y → p') records.
          const placement back = p.is_partial() && !q.is_partial() ? placement::replicate() : p;
          check_stats(c, q, back, y);
          CHECK(bwd.place == back);
          if (back == p) {
            check_close(pairing(c, fwd, y), pairing(c, x, bwd));
          } else {
            check_close(pairing(c, fwd, y), pairing_mixed(c, x, bwd));  // partial x, replicated gradient
          }
          if (q.is_partial() && !p.is_partial()) {
            // In training, the gradient of a partial tensor reaches it replicated (the reduction after it
            // normalises its own backward): every rank's summand gets the whole gradient.
            const dtensor yr = random_dtensor(c, placement::replicate(), seed += 10);
            const dtensor br = redistribute_backward(c, yr, p);
            CHECK(br.place == p);
            check_close(pairing_mixed(c, fwd, yr), pairing(c, x, br));
          }
        }
      }
    });
  }
}

TEST_CASE("placement errors: dims out of range / local tensor not this rank's part / empty group") {
  run_ranks(2, [](gloo_communicator& c) {
    const tensor full = randn(kGlobal, 3);
    auto code_of = [](auto&& f) {
      try {
        f();
      } catch (const error& e) {
        return e.code();
      }
      return errc::ok;
    };
    CHECK(code_of([&] { (void)distribute(c, full.view(), placement::shard(3)); }) == errc::invalid_argument);
    CHECK(code_of([&] { (void)distribute(c, full.view(), placement::shard(-1)); }) == errc::invalid_argument);
    const dtensor x = distribute(c, full.view(), placement::shard(0));
    CHECK(code_of([&] { (void)redistribute(c, x, placement::shard(5)); }) == errc::invalid_argument);
    CHECK(code_of([&] { (void)redistribute_backward(c, x, placement::shard(9)); }) == errc::invalid_argument);
    // The whole tensor labelled as a shard: the message names both shapes.
    const dtensor wrong{full, kGlobal, placement::shard(0)};
    try {
      (void)redistribute(c, wrong, placement::replicate());
      FAIL("no error");
    } catch (const error& e) {
      CHECK(e.code() == errc::invalid_argument);
      const std::string want = "redistribute: rank " + std::to_string(c.rank()) +
                               " of 2 holds [7,3,5], shard(0) of [7,3,5] needs [" +
                               std::to_string(chunk_size(7, 2, c.rank())) + ",3,5]";
      CHECK(e.message() == want);
    }
    // A global shape that does not match a replicated local tensor.
    const dtensor mismatch{full, shape{7, 3, 6}, placement::replicate()};
    CHECK(code_of([&] { (void)redistribute(c, mismatch, placement::shard(0)); }) == errc::invalid_argument);
    CHECK(c.stats().total_calls() == 0);  // every error came before any communication
    c.barrier().value();
    gloo_communicator none;
    CHECK(code_of([&] { (void)distribute(none, full.view(), placement::replicate()); }) == errc::invalid_argument);
  });
}
