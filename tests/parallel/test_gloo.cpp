// Gloo communicator: every collective with closed-form rank-valued inputs (2 and 4 ranks), uneven
// variants, split, point-to-point batches, stats, argument errors, dead peers, ranks as processes.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <csignal>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <numeric>

#include "jitembed/parallel/functional.hpp"
#include "support.hpp"

using namespace jitembed;
using namespace jitembed::parallel;
using jitembed::parallel::testing::fork_ranks;
using jitembed::parallel::testing::run_ranks;

namespace {

tensor filled(std::int64_t n, float v) {
  tensor t = tensor::empty(shape{n}, dtype::f32);
  std::fill_n(t.view().data<float>(), n, v);
  return t;
}

}  // namespace

TEST_CASE("gloo all_reduce sum and max, f32 / i64 / bf16, 2 and 4 ranks") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [n](gloo_communicator& c) {
      const int r = c.rank();
      REQUIRE(c.size() == n);
      tensor x = tensor::empty(shape{1000}, dtype::f32);
      for (int i = 0; i < 1000; ++i) x.view().data<float>()[i] = static_cast<float>(r + 1) * static_cast<float>(i);
      c.all_reduce(x.view(), reduce_op::sum).value();
      const float tri = static_cast<float>(n * (n + 1) / 2);
      for (int i = 0; i < 1000; i += 97) CHECK(x.view().data<float>()[i] == tri * static_cast<float>(i));

      std::vector<std::int64_t> v{r, -r, 10 * r};
      c.all_reduce(tensor_view(v.data(), dtype::i64, shape{3}), reduce_op::max).value();
      CHECK(v == std::vector<std::int64_t>{n - 1, 0, 10 * (n - 1)});

      std::vector<bfloat16> b(8, bfloat16(static_cast<float>(r)));
      c.all_reduce(tensor_view(b.data(), dtype::bf16, shape{8}), reduce_op::sum).value();
      CHECK(static_cast<float>(b[7]) == static_cast<float>(n * (n - 1) / 2));
      CHECK(c.stats()[coll::all_reduce].calls == 3);
      CHECK(c.stats()[coll::all_reduce].bytes == 4000 + 24 + 16);
    });
  }
}

TEST_CASE("gloo all_gather, reduce_scatter, broadcast, all_to_all: closed forms and byte counts") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [n](gloo_communicator& c) {
      const int r = c.rank();
      // all_gather: rank r contributes [r*10, r*10+1, r*10+2].
      std::vector<float> in{r * 10.f, r * 10.f + 1, r * 10.f + 2};
      std::vector<float> out(3 * static_cast<std::size_t>(n), -1.f);
      c.all_gather(tensor_view(in.data(), dtype::f32, shape{3}), tensor_view(out.data(), dtype::f32, shape{3 * n})).value();
      for (int s = 0; s < n; ++s) {
        for (int k = 0; k < 3; ++k) CHECK(out[static_cast<std::size_t>(3 * s + k)] == s * 10.f + k);
      }
      // reduce_scatter: element i of every rank's input is (rank+1)*i; rank r keeps chunk r of the sum.
      std::vector<float> rs_in(4 * static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = static_cast<float>((r + 1) * static_cast<int>(i));
      std::vector<float> rs_out(4);
      c.reduce_scatter(tensor_view(rs_in.data(), dtype::f32, shape{4 * n}), tensor_view(rs_out.data(), dtype::f32, shape{4}),
                       reduce_op::sum)
          .value();
      const float tri = static_cast<float>(n * (n + 1) / 2);
      for (int k = 0; k < 4; ++k) CHECK(rs_out[static_cast<std::size_t>(k)] == tri * static_cast<float>(4 * r + k));
      // broadcast from the last rank.
      tensor b = filled(5, static_cast<float>(r));
      c.broadcast(b.view(), n - 1).value();
      CHECK(b.view().data<float>()[4] == static_cast<float>(n - 1));
      // all_to_all: rank r sends value 100*r + j to rank j; receives 100*s + r from rank s.
      std::vector<std::int32_t> a_in(static_cast<std::size_t>(n) * 2), a_out(static_cast<std::size_t>(n) * 2);
      for (int j = 0; j < n; ++j) a_in[2 * j] = a_in[2 * j + 1] = 100 * r + j;
      c.all_to_all(tensor_view(a_in.data(), dtype::i32, shape{2 * n}), tensor_view(a_out.data(), dtype::i32, shape{2 * n})).value();
      for (int s = 0; s < n; ++s) CHECK(a_out[static_cast<std::size_t>(2 * s + 1)] == 100 * s + r);

      const auto& st = c.stats();
      CHECK(st[coll::all_gather].bytes == 3u * 4u * static_cast<unsigned>(n));
      CHECK(st[coll::reduce_scatter].bytes == 16u * static_cast<unsigned>(n));
      CHECK(st[coll::broadcast].bytes == 20u);
      CHECK(st[coll::all_to_all].bytes == 8u * static_cast<unsigned>(n));
      CHECK(st.bus_bytes(coll::all_reduce, n) == 0.0);
      CHECK(st.bus_bytes(coll::all_gather, n) == doctest::Approx(12.0 * n * (n - 1) / n));
    });
  }
}

TEST_CASE("gloo uneven variants: all_gather_v, reduce_scatter_v, all_to_all_v (with empty chunks)") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [n](gloo_communicator& c) {
      const int r = c.rank();
      // rank s holds s elements (rank 0 holds none), all equal to s.
      std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
      std::iota(counts.begin(), counts.end(), 0);
      const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
      std::vector<double> in(static_cast<std::size_t>(r), static_cast<double>(r));
      std::vector<double> out(static_cast<std::size_t>(total));
      c.all_gather_v(tensor_view(in.data(), dtype::f64, shape{r}), tensor_view(out.data(), dtype::f64, shape{total}), counts).value();
      std::size_t at = 0;
      for (int s = 0; s < n; ++s) {
        for (int k = 0; k < s; ++k) CHECK(out[at++] == static_cast<double>(s));
      }
      // reduce_scatter_v: everyone contributes (rank+1) everywhere; rank s keeps counts[s] sums.
      std::vector<double> rs_in(static_cast<std::size_t>(total), static_cast<double>(r + 1));
      std::vector<double> rs_out(static_cast<std::size_t>(r), -1.0);
      c.reduce_scatter_v(tensor_view(rs_in.data(), dtype::f64, shape{total}), tensor_view(rs_out.data(), dtype::f64, shape{r}),
                         counts, reduce_op::sum)
          .value();
      for (double v : rs_out) CHECK(v == static_cast<double>(n * (n + 1) / 2));
      // all_to_all_v: rank r sends j+1 copies of (10r + j) to rank j.
      std::vector<std::int64_t> send_counts(static_cast<std::size_t>(n)), recv_counts(static_cast<std::size_t>(n), r + 1);
      std::vector<float> s_in;
      for (int j = 0; j < n; ++j) {
        send_counts[static_cast<std::size_t>(j)] = j + 1;
        for (int k = 0; k <= j; ++k) s_in.push_back(static_cast<float>(10 * r + j));
      }
      std::vector<float> s_out(static_cast<std::size_t>(n * (r + 1)));
      c.all_to_all_v(tensor_view(s_in.data(), dtype::f32, shape{static_cast<std::int64_t>(s_in.size())}), send_counts,
                     tensor_view(s_out.data(), dtype::f32, shape{static_cast<std::int64_t>(s_out.size())}), recv_counts)
          .value();
      for (int s = 0; s < n; ++s) {
        for (int k = 0; k <= r; ++k) CHECK(s_out[static_cast<std::size_t>(s * (r + 1) + k)] == static_cast<float>(10 * s + r));
      }
    });
  }
}

TEST_CASE("gloo batch_p2p ring, send/recv, split into sub-groups, barrier") {
  run_ranks(4, [](gloo_communicator& c) {
    const int r = c.rank(), n = c.size();
    // A ring where every rank sends first: a batch cannot deadlock.
    float to_next = static_cast<float>(r), from_prev = -1;
    const p2p_op ops[] = {p2p_op::isend(tensor_view(&to_next, dtype::f32, shape{1}), (r + 1) % n),
                          p2p_op::irecv(tensor_view(&from_prev, dtype::f32, shape{1}), (r + n - 1) % n)};
    c.batch_p2p(ops).value();
    CHECK(from_prev == static_cast<float>((r + n - 1) % n));
    // Two messages to the same peer in one batch arrive in order.
    if (r == 0) {
      std::int32_t a = 7, b = 8;
      const p2p_op two[] = {p2p_op::isend(tensor_view(&a, dtype::i32, shape{1}), 1),
                            p2p_op::isend(tensor_view(&b, dtype::i32, shape{1}), 1)};
      c.batch_p2p(two).value();
    } else if (r == 1) {
      std::int32_t a = 0, b = 0;
      const p2p_op two[] = {p2p_op::irecv(tensor_view(&a, dtype::i32, shape{1}), 0),
                            p2p_op::irecv(tensor_view(&b, dtype::i32, shape{1}), 0)};
      c.batch_p2p(two).value();
      CHECK(a == 7);
      CHECK(b == 8);
    }
    // Plain send / recv.
    if (r == 2) {
      double v = 3.5;
      c.send(tensor_view(&v, dtype::f64, shape{1}), 3).value();
    } else if (r == 3) {
      double v = 0;
      c.recv(tensor_view(&v, dtype::f64, shape{1}), 2).value();
      CHECK(v == 3.5);
    }
    // Even and odd ranks; key reverses the order inside a group.
    auto sub = c.split(r % 2, -r).value();
    REQUIRE(sub.valid());
    CHECK(sub.size() == 2);
    CHECK(sub.rank() == (r < 2 ? 1 : 0));
    float x = static_cast<float>(r);
    sub.all_reduce(tensor_view(&x, dtype::f32, shape{1}), reduce_op::sum).value();
    CHECK(x == (r % 2 == 0 ? 2.f : 4.f));
    CHECK(sub.stats()[coll::all_reduce].calls == 1);
    // Rank 3 opts out.
    auto some = c.split(r == 3 ? kNoColor : 0, r).value();
    CHECK(some.valid() == (r != 3));
    if (some.valid()) {
      CHECK(some.size() == 3);
      float y = 1;
      some.all_reduce(tensor_view(&y, dtype::f32, shape{1}), reduce_op::sum).value();
      CHECK(y == 3.f);
      CHECK(some.all_reduce(tensor_view(&y, dtype::f32, shape{1}), reduce_op::sum).has_value());
    } else {
      float y = 1;
      CHECK(some.all_reduce(tensor_view(&y, dtype::f32, shape{1}), reduce_op::sum).code() == errc::invalid_argument);
    }
    c.barrier().value();
    CHECK(c.stats()[coll::barrier].calls == 1);
  });
}

TEST_CASE("gloo functional collectives along a dim: gather, reduce-scatter and all-to-all with uneven chunks") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [n](gloo_communicator& c) {
      const int r = c.rank();
      // The global tensor G[i][j][k] = 100 i + 10 j + k of shape [3, 7, 2]; 7 rows over n ranks is uneven.
      tensor g = tensor::empty(shape{3, 7, 2}, dtype::f32);
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 7; ++j)
          for (int k = 0; k < 2; ++k) g.view().data<float>()[(i * 7 + j) * 2 + k] = static_cast<float>(100 * i + 10 * j + k);
      tensor mine = local_chunk(g.view(), 1, n, r);
      tensor full = all_gather_dim(c, mine.view(), 1, 7).value();
      CHECK(full.shape() == g.shape());
      CHECK(std::memcmp(full.data(), g.data(), g.nbytes()) == 0);
      // reduce_scatter_dim of G on every rank: chunk r of n·G.
      tensor part = reduce_scatter_dim(c, g.view(), 1).value();
      tensor want = local_chunk(g.view(), 1, n, r);
      REQUIRE(part.shape() == want.shape());
      for (std::uint64_t i = 0; i < want.numel(); ++i) CHECK(part.view().data<float>()[i] == n * want.view().data<float>()[i]);
      // all_to_all_dim: from shard(1) of G to shard(0) (3 rows over n ranks: uneven, maybe empty).
      tensor moved = all_to_all_dim(c, mine.view(), 0, 1, 7).value();
      tensor want0 = local_chunk(g.view(), 0, n, r);
      REQUIRE(moved.shape() == want0.shape());
      CHECK(std::memcmp(moved.data(), want0.data(), want0.nbytes()) == 0);
      // Wrong local size is rejected before anything is sent.
      CHECK(all_gather_dim(c, g.view(), 1, 7).code() == errc::invalid_argument);
    });
  }
}

TEST_CASE("functional collectives report bad arguments in their result, never by throwing (docs/api.md 1.1)") {
  run_ranks(2, [](gloo_communicator& c) {
    const tensor x = tensor::zeros(shape{4, 2}, dtype::f32);
    // Every check fails on every rank alike, before anything is sent.
    result<tensor> r = fail(errc::internal, "not run");
    CHECK_NOTHROW(r = all_gather_dim(c, x.view(), 2, 8));
    CHECK(r.code() == errc::invalid_argument);
    CHECK(r.error().message == "all_gather_dim: dim 2 of a rank-2 tensor");
    CHECK_NOTHROW(r = all_gather_dim(c, x.view(), 0, -1));
    CHECK(r.code() == errc::invalid_argument);
    CHECK(r.error().message == "all_gather_dim: negative global_size -1");
    CHECK_NOTHROW(r = reduce_scatter_dim(c, x.view(), 5));
    CHECK(r.code() == errc::invalid_argument);
    CHECK(r.error().message == "reduce_scatter_dim: dim 5 of a rank-2 tensor");
    CHECK_NOTHROW(r = all_to_all_dim(c, x.view(), 0, 3, 4));
    CHECK(r.code() == errc::invalid_argument);
    CHECK(r.error().message == "all_to_all_dim: dim 3 of a rank-2 tensor");
    CHECK_NOTHROW(r = all_to_all_dim(c, x.view(), 0, 1, -2));
    CHECK(r.code() == errc::invalid_argument);
    gloo_communicator empty;  // what a rank outside a split's group holds
    CHECK_NOTHROW(r = all_reduce_copy(empty, x.view()));
    CHECK(r.code() == errc::invalid_argument);
    CHECK_NOTHROW(r = all_gather_dim(empty, x.view(), 0, 8));
    CHECK(r.code() == errc::invalid_argument);
  });
}

TEST_CASE("gloo rejects bad arguments before sending: dtype, sizes, counts, peers, devices") {
  run_ranks(2, [](gloo_communicator& c) {
    std::vector<float> f(4);
    std::vector<double> d(8);
    const tensor_view f4(f.data(), dtype::f32, shape{4});
    CHECK(c.all_gather(f4, tensor_view(d.data(), dtype::f64, shape{8})).code() == errc::dtype_mismatch);
    std::vector<float> f7(7);
    CHECK(c.all_gather(f4, tensor_view(f7.data(), dtype::f32, shape{7})).code() == errc::invalid_argument);
    const std::int64_t bad_counts[] = {1, 2, 3};
    CHECK(c.all_gather_v(f4, f4, bad_counts).code() == errc::invalid_argument);
    const std::int64_t negative[] = {-1, 5};
    CHECK(c.reduce_scatter_v(f4, f4, negative, reduce_op::sum).code() == errc::invalid_argument);
    CHECK(c.send(f4, 2).code() == errc::invalid_argument);
    CHECK(c.broadcast(f4, -1).code() == errc::invalid_argument);
    CHECK(c.all_reduce(tensor_view(f.data(), dtype::f32, shape{4}, device::cuda(0)), reduce_op::sum).code() ==
          errc::invalid_argument);
    CHECK(c.all_to_all(tensor_view(f7.data(), dtype::f32, shape{7}), tensor_view(f7.data(), dtype::f32, shape{7})).code() ==
          errc::invalid_argument);
    const tensor_view strided(f.data(), dtype::f32, shape{2}, shape{2}, device::cpu());
    CHECK(c.all_reduce(strided, reduce_op::sum).code() == errc::invalid_argument);
    // Nothing was sent, so the communicator still works.
    float x = 1;
    c.all_reduce(tensor_view(&x, dtype::f32, shape{1}), reduce_op::sum).value();
    CHECK(x == 2.f);
  });
  CHECK(gloo_communicator::create(shared_store(hash_store()), 2, 2).code() == errc::invalid_argument);
  CHECK(gloo_communicator::create(shared_store(), 0, 1).code() == errc::invalid_argument);
}

TEST_CASE("gloo: a dead peer makes the others fail with comm_failed, not hang, a missing one times out") {
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<int> failures{0};
  run_ranks(
      4,
      [&](gloo_communicator& c) {
        float x = 1;
        c.all_reduce(tensor_view(&x, dtype::f32, shape{1}), reduce_op::sum).value();
        if (c.rank() == 3) return;  // rank 3 "dies": its communicator closes its connections
        std::vector<float> big(1 << 16, 1.f);
        auto r = c.all_reduce(tensor_view(big.data(), dtype::f32, shape{1 << 16}), reduce_op::sum);
        CHECK_FALSE(r.has_value());
        CHECK((r.code() == errc::comm_failed || r.code() == errc::timeout));
        // The communicator stays failed.
        CHECK(c.barrier().code() == errc::comm_failed);
        ++failures;
      },
      std::chrono::seconds(5));
  CHECK(failures == 3);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(12));

  // A rank that never joins: rendezvous times out.
  auto st = shared_store(hash_store());
  gloo_options opt;
  opt.timeout = std::chrono::milliseconds(300);
  auto lonely = gloo_communicator::create(st, 0, 2, opt);
  CHECK(lonely.code() == errc::timeout);
}

TEST_CASE("gloo ranks as processes rendezvous through a file_store") {
  const auto dir = std::filesystem::temp_directory_path() / ("jitembed_gloo_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  constexpr int kRanks = 3;
  const auto statuses = fork_ranks(kRanks, [&](int r) {
    auto st = shared_store(file_store::open(dir).value());
    gloo_options opt;
    opt.timeout = std::chrono::seconds(20);
    auto c = gloo_communicator::create(st, r, kRanks, opt).value();
    std::vector<std::int64_t> v{r + 1};
    c.all_reduce(tensor_view(v.data(), dtype::i64, shape{1}), reduce_op::sum).value();
    return v[0] == 6 ? 0 : 2;
  });
  for (int status : statuses) {
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("gloo: a rank process killed mid-job makes the others fail with an error, not hang") {
  const auto dir = std::filesystem::temp_directory_path() / ("jitembed_gloo_kill_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  constexpr int kRanks = 3;
  const auto t0 = std::chrono::steady_clock::now();
  const auto statuses = fork_ranks(kRanks, [&](int r) {
    auto st = shared_store(file_store::open(dir).value());
    gloo_options opt;
    opt.timeout = std::chrono::seconds(10);
    auto c = gloo_communicator::create(st, r, kRanks, opt).value();
    float x = 1;
    c.all_reduce(tensor_view(&x, dtype::f32, shape{1}), reduce_op::sum).value();
    if (r == kRanks - 1) ::raise(SIGKILL);  // dies without closing anything itself
    std::vector<float> big(1 << 18, 1.f);
    auto res = c.all_reduce(tensor_view(big.data(), dtype::f32, shape{1 << 18}), reduce_op::sum);
    return res.code() == errc::comm_failed ? 0 : res.code() == errc::timeout ? 1 : 2;
  });
  for (int r = 0; r < kRanks; ++r) {
    const int status = statuses[static_cast<std::size_t>(r)];
    CAPTURE(r);
    if (r == kRanks - 1) {
      CHECK(WIFSIGNALED(status));
    } else {
      CAPTURE(WIFSIGNALED(status) ? WTERMSIG(status) : 0);  // SIGPIPE here would mean a write to the dead peer killed us
      REQUIRE(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 0);  // comm_failed (the kernel closed the dead rank's sockets)
    }
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  std::filesystem::remove_all(dir);
}
