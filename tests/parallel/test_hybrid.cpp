// Hybrid plans: validation, module groups, and the boundary transform between differently laid-out
// modules (forward, backward and both in one exchange: values, and exactly the bytes it must move, on 4 ranks).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "jitembed/parallel/hybrid.hpp"
#include "support.hpp"

using namespace jitembed;
using namespace jitembed::parallel;
using jitembed::parallel::testing::randn;
using jitembed::parallel::testing::error_of;
using jitembed::parallel::testing::run_ranks;

namespace {

constexpr int kWorld = 4;

int index_of(const std::vector<int>& v, int x) {
  const auto it = std::find(v.begin(), v.end(), x);
  return it == v.end() ? -1 : static_cast<int>(it - v.begin());
}

// [start, end) of the k-th part of dim d under layout l.
std::pair<std::int64_t, std::int64_t> range_of(const shape& g, const layout& l, int k, std::size_t d) {
  if (!l.p.is_shard() || static_cast<std::size_t>(l.p.dim) != d) return {0, g[d]};
  const std::int64_t parts = static_cast<std::int64_t>(l.ranks.size());
  const std::int64_t chunk = (g[d] + parts - 1) / parts;
  return {std::min(chunk * k, g[d]), std::min(chunk * (k + 1), g[d])};
}

// Elements of the global tensor that part a of layout A and part b of layout B share.
std::uint64_t overlap(const shape& g, const layout& A, int a, const layout& B, int b) {
  std::uint64_t n = 1;
  for (std::size_t d = 0; d < g.size(); ++d) {
    const auto ra = range_of(g, A, a, d), rb = range_of(g, B, b, d);
    n *= static_cast<std::uint64_t>(
        std::max<std::int64_t>(0, std::min(ra.second, rb.second) - std::max(ra.first, rb.first)));
  }
  return n;
}

std::uint64_t part_numel(const shape& g, const layout& L, int k) { return overlap(g, L, k, L, k); }

// The reference: the global tensor cut by a layout (this rank's part).
tensor cut(const tensor& full, const layout& l, int k) {
  if (l.p.is_replicate()) return full.clone();
  return local_chunk(full.view(), static_cast<std::size_t>(l.p.dim), static_cast<int>(l.ranks.size()), k);
}

struct traffic {
  std::uint64_t send_bytes = 0, recv_bytes = 0, sends = 0, recvs = 0;
};

// What a transform from → to must move for parent rank r: a destination receives what it needs minus
// what it holds itself; a sharded source sends each destination its overlap; a replicated source's
// k-th destination (not itself a source) is served by source k mod |from|.
traffic expected_traffic(const shape& g, const layout& from, const layout& to, int r) {
  traffic t;
  const int fi = index_of(from.ranks, r), ti = index_of(to.ranks, r);
  const auto es = sizeof(float);
  if (ti >= 0) {
    const std::uint64_t need = part_numel(g, to, ti);
    std::uint64_t held = 0;
    if (fi >= 0) held = from.p.is_replicate() ? need : overlap(g, from, fi, to, ti);
    t.recv_bytes = (need - held) * es;
    if (from.p.is_replicate()) {
      t.recvs = (fi < 0 && need > 0) ? 1 : 0;
    } else {
      for (int i = 0; i < static_cast<int>(from.ranks.size()); ++i) {
        if (from.ranks[static_cast<std::size_t>(i)] != r && overlap(g, from, i, to, ti) > 0) ++t.recvs;
      }
    }
  }
  if (fi >= 0) {
    for (int j = 0; j < static_cast<int>(to.ranks.size()); ++j) {
      const int peer = to.ranks[static_cast<std::size_t>(j)];
      if (peer == r) continue;
      std::uint64_t piece = 0;
      if (from.p.is_replicate()) {
        if (index_of(from.ranks, peer) < 0 && j % static_cast<int>(from.ranks.size()) == fi)
          piece = part_numel(g, to, j);
      } else {
        piece = overlap(g, from, fi, to, j);
      }
      if (piece > 0) {
        t.send_bytes += piece * es;
        ++t.sends;
      }
    }
  }
  return t;
}

void check_traffic(const comm_stats& st, const traffic& want) {
  CHECK(st[coll::send].bytes == want.send_bytes);
  CHECK(st[coll::recv].bytes == want.recv_bytes);
  CHECK(st[coll::send].calls == want.sends);
  CHECK(st[coll::recv].calls == want.recvs);
  CHECK(st.total_calls() == want.sends + want.recvs);  // no collective
}

// Forward and backward of one boundary on 4 ranks against the references; returns the bytes the whole
// world received in the forward (checked against the sum of the per-rank formulas).
void run_boundary(const shape& g, const layout& src, const layout& dst) {
  std::array<std::uint64_t, kWorld> sent{}, received{};
  run_ranks(kWorld, [&](gloo_communicator& c) {
    const int r = c.rank();
    const int si = index_of(src.ranks, r), di = index_of(dst.ranks, r);
    const tensor x = randn(g, 1);  // the activation (the same on every rank: the reference)
    const tensor x_src = si >= 0 ? cut(x, src, si) : tensor();
    c.stats().reset();
    const tensor y = boundary_forward(c, si >= 0 ? &x_src.view() : nullptr, g, src, dst);
    check_traffic(c.stats(), expected_traffic(g, src, dst, r));
    sent[static_cast<std::size_t>(r)] = c.stats()[coll::send].bytes;
    received[static_cast<std::size_t>(r)] = c.stats()[coll::recv].bytes;
    if (di >= 0) {
      const tensor want = cut(x, dst, di);
      REQUIRE(y.shape() == want.shape());
      CHECK(std::memcmp(y.data(), want.data(), want.nbytes()) == 0);  // pure copies: exact
    } else {
      CHECK_FALSE(y.defined());
    }

    const tensor grad = randn(g, 2);  // the reference gradient of the activation
    const tensor g_dst = di >= 0 ? cut(grad, dst, di) : tensor();
    c.stats().reset();
    const tensor gx = boundary_backward(c, di >= 0 ? &g_dst.view() : nullptr, g, src, dst);
    check_traffic(c.stats(), expected_traffic(g, dst, src, r));
    if (si >= 0) {
      const tensor want = cut(grad, src, si);
      REQUIRE(gx.shape() == want.shape());
      CHECK(std::memcmp(gx.data(), want.data(), want.nbytes()) == 0);
    } else {
      CHECK_FALSE(gx.defined());
    }

    // Both directions in one batch (a pipeline step): the same tensors, the sum of the two transfers.
    c.stats().reset();
    const boundary_exchanged both =
        boundary_exchange(c, boundary_part{g, si >= 0 ? &x_src.view() : nullptr},
                          boundary_part{g, di >= 0 ? &g_dst.view() : nullptr}, src, dst);
    const traffic fwd = expected_traffic(g, src, dst, r), bwd = expected_traffic(g, dst, src, r);
    check_traffic(c.stats(), {fwd.send_bytes + bwd.send_bytes, fwd.recv_bytes + bwd.recv_bytes,
                              fwd.sends + bwd.sends, fwd.recvs + bwd.recvs});
    CHECK(both.activation.defined() == y.defined());
    if (y.defined()) CHECK(std::memcmp(both.activation.data(), y.data(), y.nbytes()) == 0);
    CHECK(both.gradient.defined() == gx.defined());
    if (gx.defined()) CHECK(std::memcmp(both.gradient.data(), gx.data(), gx.nbytes()) == 0);
    // One direction only, or none: like boundary_forward, and nothing at all.
    const boundary_exchanged fwd_only =
        boundary_exchange(c, boundary_part{g, si >= 0 ? &x_src.view() : nullptr}, std::nullopt, src, dst);
    CHECK(fwd_only.activation.defined() == y.defined());
    CHECK_FALSE(fwd_only.gradient.defined());
    c.stats().reset();
    const boundary_exchanged none = boundary_exchange(c, std::nullopt, std::nullopt, src, dst);
    CHECK_FALSE(none.activation.defined());
    CHECK(c.stats().total_calls() == 0);
  });
  std::uint64_t total_sent = 0, total_received = 0, need = 0;
  for (int r = 0; r < kWorld; ++r) {
    total_sent += sent[static_cast<std::size_t>(r)];
    total_received += received[static_cast<std::size_t>(r)];
    need += expected_traffic(g, src, dst, r).recv_bytes;
  }
  CHECK(total_sent == total_received);
  CHECK(total_received == need);
}

template <class F>
errc code_of(F&& f) {
  return error_of(std::forward<F>(f)).code();
}

template <class F>
std::string message_of(F&& f) {
  const auto e = error_of(std::forward<F>(f));
  return e.code() == errc::ok ? std::string() : e.message();
}

}  // namespace

TEST_CASE("boundary: SP=4 encoder (shard seq) to TP=2 LLM (replicate) on ranks {0 1} {2 3} {1 3}") {
  const shape g{2, 10, 6};  // [batch, seq, hidden]; 10 over 4: 3 3 3 1
  const layout sp4{{0, 1, 2, 3}, placement::shard(1)};
  for (const auto& tp : {std::vector<int>{0, 1}, std::vector<int>{2, 3}, std::vector<int>{1, 3}}) {
    CAPTURE(tp[0]);
    CAPTURE(tp[1]);
    run_boundary(g, sp4, layout{tp, placement::replicate()});
  }
}

TEST_CASE("boundary: SP=2 on {0 1} to SP=2 on {2 3} (disjoint rank sets and the same layout) with uneven seq") {
  run_boundary(shape{3, 7, 4}, layout{{0, 1}, placement::shard(1)}, layout{{2, 3}, placement::shard(1)});
}

TEST_CASE("boundary: shard(dim0) → shard(dim1) with different degrees and shared ranks") {
  run_boundary(shape{5, 6, 3}, layout{{0, 1, 2, 3}, placement::shard(0)}, layout{{2, 1}, placement::shard(1)});
  run_boundary(shape{6, 9, 2}, layout{{3, 0}, placement::shard(1)}, layout{{0, 1, 2}, placement::shard(0)});
}

TEST_CASE("boundary: same dim with different degrees / seq shorter than the degree / replicated sources") {
  run_boundary(shape{2, 11, 3}, layout{{0, 1, 2, 3}, placement::shard(1)}, layout{{0, 1}, placement::shard(1)});
  run_boundary(shape{1, 3, 5}, layout{{0, 1, 2, 3}, placement::shard(1)}, layout{{1, 3}, placement::replicate()});
  // replicated source spreads its senders: {2,3} take their parts from 0 and 1.
  run_boundary(shape{2, 9, 4}, layout{{0, 1}, placement::replicate()}, layout{{0, 1, 2, 3}, placement::shard(1)});
  run_boundary(shape{2, 5, 4}, layout{{0, 1}, placement::replicate()}, layout{{2, 3}, placement::replicate()});
}

TEST_CASE("boundary through a hybrid plan: encoder SP=4 feeding LLM TP=2 with layouts from the plan") {
  const hybrid_plan plan =
      hybrid_plan::create(
          {{"encoder", strategy::sequence_parallel, 4, {0, 1, 2, 3}}, {"llm", strategy::tensor_parallel, 2, {3, 1}}},
          kWorld)
          .value();
  const layout enc = plan.activation_layout("encoder", 1);
  const layout llm = plan.activation_layout("llm", 1);
  CHECK(enc.p == placement::shard(1));
  CHECK(llm.p == placement::replicate());
  CHECK(llm.ranks == std::vector<int>{3, 1});
  run_boundary(shape{2, 13, 8}, enc, llm);
}

TEST_CASE("boundary errors: bad layouts and local tensors") {
  run_ranks(2, [](gloo_communicator& c) {
    const shape g{2, 4, 3};
    const tensor x = randn(g, 1);
    const layout all{{0, 1}, placement::replicate()};
    CHECK(code_of([&] {
            (void)boundary_forward(c, &x.view(), g, layout{{0, 2}, placement::replicate()}, all);
          }) == errc::invalid_argument);
    CHECK(message_of([&] {
            (void)boundary_forward(c, &x.view(), g, all, layout{{1, 1}, placement::replicate()});
          }) == "boundary: dst layout: rank 1 listed twice");
    CHECK(code_of([&] {
            (void)boundary_forward(c, &x.view(), g, all, layout{{0, 1}, placement::partial()});
          }) == errc::invalid_argument);
    CHECK(code_of([&] {
            (void)boundary_forward(c, &x.view(), g, all, layout{{0, 1}, placement::shard(3)});
          }) == errc::invalid_argument);
    CHECK(code_of([&] {
            (void)boundary_forward(c, &x.view(), g, all, layout{{}, placement::replicate()});
          }) == errc::invalid_argument);
    CHECK(code_of([&] { (void)boundary_forward(c, nullptr, g, all, all); }) == errc::invalid_argument);
    // A whole tensor where the src layout gives this rank a chunk.
    const layout sharded{{0, 1}, placement::shard(1)};
    CHECK(message_of([&] { (void)boundary_forward(c, &x.view(), g, sharded, all); }) ==
          "boundary: parent rank " + std::to_string(c.rank()) +
              " holds [2,4,3], its src part (shard(1) of [2,4,3] over 2 ranks) is [2,2,3]");
    // The backward checks the gradient against the dst layout.
    CHECK(message_of([&] { (void)boundary_backward(c, &x.view(), g, all, sharded); }) ==
          "boundary_backward: parent rank " + std::to_string(c.rank()) +
              " holds [2,4,3], its dst part (shard(1) of [2,4,3] over 2 ranks) is [2,2,3]");
    const tensor wrong_dtype = tensor::zeros(g, dtype::f64);
    CHECK(code_of([&] { (void)boundary_forward(c, &wrong_dtype.view(), g, all, all); }) == errc::dtype_mismatch);
    // An exchange checks each direction against its own layout before anything is sent.
    CHECK(message_of([&] { (void)boundary_exchange(c, std::nullopt, boundary_part{g, nullptr}, sharded, all); }) ==
          "boundary_exchange: parent rank " + std::to_string(c.rank()) + " is in dst and passed no tensor");
    CHECK(message_of([&] {
            (void)boundary_exchange(c, boundary_part{g, &x.view()}, boundary_part{g, &x.view()}, sharded, all);
          }) == "boundary_exchange: parent rank " + std::to_string(c.rank()) +
                    " holds [2,4,3], its src part (shard(1) of [2,4,3] over 2 ranks) is [2,2,3]");
    CHECK(c.stats().total_calls() == 0);
    c.barrier().value();  // no rank closes its connections while a peer is still connecting
  });
}

TEST_CASE("hybrid_plan::create: validation names the module, in the result") {
  auto make = [](std::vector<module_plan> m, int world = kWorld) { return hybrid_plan::create(std::move(m), world); };
  const std::vector<std::pair<std::vector<module_plan>, std::string>> bad{
      {{{"vit", strategy::sequence_parallel, 0, {}}}, "hybrid_plan: module 'vit': degree 0 < 1"},
      {{{"vit", strategy::sequence_parallel, 2, {0, 1, 2}}}, "hybrid_plan: module 'vit': degree 2 but 3 ranks"},
      {{{"vit", strategy::sequence_parallel, 2, {1, 1}}}, "hybrid_plan: module 'vit': rank 1 listed twice"},
      {{{"lm", strategy::tensor_parallel, 2, {3, 4}}}, "hybrid_plan: module 'lm': rank 4 outside [0, 4)"},
      {{{"lm", strategy::tensor_parallel, 1, {-1}}}, "hybrid_plan: module 'lm': rank -1 outside [0, 4)"},
      {{{"lm", strategy::tensor_parallel, 1, {0}}, {"lm", strategy::replicate, 1, {1}}},
       "hybrid_plan: module 'lm' is listed twice"},
      {{{"", strategy::replicate, 1, {0}}}, "hybrid_plan: module 0 has no name"},
  };
  for (const auto& [modules, msg] : bad) {
    CAPTURE(msg);
    result<hybrid_plan> r = result<hybrid_plan>(fail(errc::internal, "not run"));
    CHECK_NOTHROW(r = make(modules));  // the errors the constructor used to throw come back in the result
    REQUIRE_FALSE(r);
    CHECK(r.code() == errc::invalid_argument);
    CHECK(r.error().message == msg);
  }
  CHECK(make({}, 0).code() == errc::invalid_argument);
  CHECK(make({}, 0).error().message == "hybrid_plan: world size 0");
  CHECK(make({{"x", static_cast<strategy>(7), 1, {0}}}).error().message == "hybrid_plan: module 'x': unknown strategy");
  CHECK(make({}, 1).has_value());  // an empty plan is valid
  const hybrid_plan ok =
      make({{"vit", strategy::sequence_parallel, 4, {0, 1, 2, 3}}, {"lm", strategy::tensor_parallel, 2, {2, 0}}})
          .value();
  CHECK(ok["lm"].degree == 2);
  CHECK(ok.contains("vit"));
  CHECK_FALSE(ok.contains("audio"));
  CHECK(ok.is_member("lm", 2));
  CHECK_FALSE(ok.is_member("lm", 1));
  CHECK(code_of([&] { (void)ok["audio"]; }) == errc::not_found);
  CHECK(activation_layout(ok["vit"], 1).p == placement::shard(1));
  CHECK(activation_layout(module_plan{"dp", strategy::replicate, 1, {0}}, 1).p == placement::replicate());
}

TEST_CASE("hybrid_plan::group: module communicators ordered like the plan's ranks") {
  const hybrid_plan plan = hybrid_plan::create({{"encoder", strategy::sequence_parallel, 4, {0, 1, 2, 3}},
                                                {"llm", strategy::tensor_parallel, 2, {3, 1}},
                                                {"head", strategy::replicate, 1, {2}}},
                                               kWorld)
                               .value();
  run_ranks(kWorld, [&](gloo_communicator& c) {
    const int r = c.rank();
    for (const auto& m : plan.modules()) {
      CAPTURE(m.name);
      auto g = plan.group(c, m.name).value();
      const int k = index_of(m.ranks, r);
      CHECK(g.valid() == (k >= 0));
      if (k < 0) continue;
      CHECK(g.size() == m.degree);
      CHECK(g.rank() == k);
      // Gathering the parent ranks in group order gives the plan's list.
      std::int32_t mine = r;
      std::vector<std::int32_t> all(static_cast<std::size_t>(g.size()));
      g.all_gather(tensor_view(&mine, dtype::i32, shape{1}), tensor_view(all.data(), dtype::i32, shape{g.size()}))
          .value();
      CHECK(std::vector<int>(all.begin(), all.end()) == m.ranks);
    }
    CHECK(plan.group(c, "audio").code() == errc::not_found);
  });
  const hybrid_plan small = hybrid_plan::create({{"a", strategy::replicate, 1, {0}}}, 2).value();
  run_ranks(kWorld, [&](gloo_communicator& c) {
    CHECK(small.group(c, "a").code() == errc::invalid_argument);
    c.barrier().value();
  });
}
