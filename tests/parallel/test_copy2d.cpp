// copy2d and the slab arithmetic under the dim collectives (against an element-index reference), and the
// device path of functional.hpp / placement.hpp / the TP mappings through a host-staged communicator whose
// "device" memory is host memory labelled CUDA (every staging copy is then a counted copy2d).
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "jitembed/parallel/copy2d.hpp"
#include "jitembed/parallel/functional.hpp"
#include "jitembed/parallel/host_staged.hpp"
#include "jitembed/parallel/mappings.hpp"
#include "jitembed/parallel/placement.hpp"
#include "support.hpp"

using namespace jitembed;
using namespace jitembed::parallel;
using jitembed::parallel::testing::randn;
using jitembed::parallel::testing::run_ranks;

namespace {

// Element (flat index) of x[..., i_dim, ...] for a multi-index of a contiguous shape.
std::int64_t flat(const shape& s, const std::vector<std::int64_t>& idx) {
  std::int64_t f = 0;
  for (std::size_t d = 0; d < s.size(); ++d) f = f * s[d] + idx[d];
  return f;
}

// dst[..., dst_start + i, ...] = src[..., src_start + i, ...] for i < len, one element at a time.
void reference_copy(std::vector<float>& dst, const shape& ds, std::int64_t dst_start, const std::vector<float>& src,
                    const shape& ss, std::int64_t src_start, std::int64_t len, std::size_t dim) {
  std::vector<std::int64_t> idx(ss.size(), 0);
  shape it = ss;
  it[dim] = len;
  std::int64_t total = 1;
  for (auto e : it) total *= e;
  for (std::int64_t n = 0; n < total; ++n) {
    std::int64_t rem = n;
    for (std::size_t d = it.size(); d-- > 0;) {
      idx[d] = rem % it[d];
      rem /= it[d];
    }
    std::vector<std::int64_t> si = idx, di = idx;
    si[dim] += src_start;
    di[dim] += dst_start;
    dst[static_cast<std::size_t>(flat(ds, di))] = src[static_cast<std::size_t>(flat(ss, si))];
  }
}

// "Device" memory that is host memory labelled CUDA device 0: the dim collectives then take their device
// path (every staging copy a copy2d here, counted), runnable on CPU.
struct host_as_device {
  std::shared_ptr<int> copies = std::make_shared<int>(0);
  std::shared_ptr<int> syncs = std::make_shared<int>(0);

  jitembed::device device() const noexcept { return jitembed::device::cuda(0); }
  tensor empty_tensor(const shape& s, dtype t) const {
    tensor h = tensor::empty(s, t);
    return tensor::wrap(h.owner(), tensor_view(h.data(), t, s, device()));
  }
  void copy2d(const copy2d_desc& d) const {
    CHECK(d.dpitch >= d.width);
    CHECK(d.spitch >= d.width);
    ++*copies;
    host_copy2d(d);
  }
  void zero_fill(const tensor_view& v) const { std::memset(v.data(), 0, v.nbytes()); }
  void synchronize() const { ++*syncs; }
  tensor host_buffer(std::size_t n) const { return tensor::empty(shape{static_cast<std::int64_t>(n)}, dtype::u8); }
};

using staged = basic_host_staged_communicator<gloo_communicator, host_as_device>;
static_assert(communicator<staged>);
static_assert(device_memory<staged>);
static_assert(!device_memory<gloo_communicator>);

tensor on_device(const tensor& cpu) {
  return tensor::wrap(cpu.owner(), tensor_view(cpu.data(), cpu.dtype(), cpu.shape(), jitembed::device::cuda(0)));
}
tensor on_host(const tensor& dev) { return tensor::wrap(dev.owner(), tensor_view(dev.data(), dev.dtype(), dev.shape())); }

bool equal(const tensor& a, const tensor& b) {
  return a.shape() == b.shape() && a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

}  // namespace

TEST_CASE("copy2d: slab_copy of rows of every dim equals the element-index copy") {
  std::mt19937 gen(7);
  const std::vector<shape> shapes{shape{7}, shape{3, 5}, shape{4, 1, 6}, shape{2, 3, 4, 5}, shape{1, 7, 1, 3}};
  for (const auto& s : shapes) {
    for (std::size_t dim = 0; dim < s.size(); ++dim) {
      const std::int64_t ext = s[dim];
      for (std::int64_t start = 0; start <= ext; ++start) {
        for (std::int64_t len = 0; start + len <= ext; ++len) {
          // src = s, dst has extent len + 2 along dim, the rows land at dst_start = 1
          shape ds = s;
          ds[dim] = len + 2;
          std::int64_t sn = 1, dn = 1;
          for (auto e : s) sn *= e;
          for (auto e : ds) dn *= e;
          std::vector<float> src(static_cast<std::size_t>(sn)), got(static_cast<std::size_t>(dn), -1.0f);
          for (auto& v : src) v = static_cast<float>(gen() % 1000);
          std::vector<float> want = got;
          reference_copy(want, ds, 1, src, s, start, len, dim);
          const copy2d_desc d = slab_copy(got.data(), slab_around(ds, dim, sizeof(float)), 1, src.data(),
                                          slab_around(s, dim, sizeof(float)), start, len);
          CHECK(d.dpitch >= d.width);
          CHECK(d.spitch >= d.width);
          host_copy2d(d);
          REQUIRE(got == want);
        }
      }
    }
  }
}

TEST_CASE("copy2d: geometry of a slab copy (the cudaMemcpy2D arguments)") {
  // [4, 6, 5] f32, rows [2, 5) of dim 1 into rows [0, 3) of a [4, 3, 5] tensor: 4 rows of 3·5·4 bytes.
  const slab gs = slab_around(shape{4, 6, 5}, 1, 4), gd = slab_around(shape{4, 3, 5}, 1, 4);
  CHECK(gs.outer == 4);
  CHECK(gs.extent == 6);
  CHECK(gs.inner == 5);
  float src[120] = {}, dst[60] = {};
  const copy2d_desc d = slab_copy(dst, gd, 0, src, gs, 2, 3);
  CHECK(d.height == 4);
  CHECK(d.width == 60);
  CHECK(d.spitch == 120);
  CHECK(d.dpitch == 60);
  CHECK(d.src == static_cast<const void*>(src + 10));
  CHECK(!d.contiguous());
  // Leading dim: one contiguous block, pitches equal to the width.
  const copy2d_desc lead = slab_copy(dst, slab_around(shape{3, 20}, 0, 4), 0, src, slab_around(shape{6, 20}, 0, 4), 3, 3);
  CHECK(lead.height == 1);
  CHECK(lead.contiguous());
  CHECK(lead.bytes() == 240);
  CHECK(lead.src == static_cast<const void*>(src + 60));
  // Nothing to copy.
  CHECK(slab_copy(dst, gd, 0, src, gs, 0, 0).empty());
  CHECK(slab_copy(dst, slab_around(shape{0, 3}, 1, 4), 0, src, slab_around(shape{0, 6}, 1, 4), 0, 3).empty());
}

TEST_CASE("copy2d: dim collectives and redistribute on device tensors through a host-staged communicator") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    run_ranks(n, [&](gloo_communicator& g) {
      gloo_communicator plain = g.split(0, g.rank()).value();  // the CPU reference, same ranks
      host_as_device mem;
      staged comm(std::move(g), mem);
      const int r = comm.rank();
      // [2, 7, 3]: uneven along dim 1 over 2 and 3 ranks.
      const tensor full = randn(shape{2, 7, 3}, 11);
      const tensor mine = local_chunk(full, 1, n, r);
      const tensor want_gather = all_gather_dim(plain, mine, 1, 7).value();
      const tensor got_gather = all_gather_dim(comm, on_device(mine), 1, 7).value();
      CHECK(got_gather.device() == jitembed::device::cuda(0));
      CHECK(equal(on_host(got_gather), want_gather));

      const tensor partial = randn(shape{2, 7, 3}, 20 + static_cast<std::uint64_t>(r));
      const tensor want_rs = reduce_scatter_dim(plain, partial, 1).value();
      const int copies_before = *mem.copies;
      const tensor got_rs = reduce_scatter_dim(comm, on_device(partial), 1).value();
      CHECK(*mem.copies > copies_before);  // packed with copy2d, staged with copy2d
      CHECK(equal(on_host(got_rs), want_rs));

      const tensor want_a2a = all_to_all_dim(plain, mine, 2, 1, 7).value();
      const tensor got_a2a = all_to_all_dim(comm, on_device(mine), 2, 1, 7).value();
      CHECK(equal(on_host(got_a2a), want_a2a));

      const tensor want_ar = all_reduce_copy(plain, partial).value();
      CHECK(equal(on_host(all_reduce_copy(comm, on_device(partial)).value()), want_ar));

      // redistribute: shard(1) → shard(2), → replicate, → partial, partial → shard(0), replicate → shard(0).
      const dtensor xs{on_device(mine), full.shape(), placement::shard(1)};
      const dtensor xh{mine, full.shape(), placement::shard(1)};
      for (placement to : {placement::shard(2), placement::replicate(), placement::partial(), placement::shard(0)}) {
        CAPTURE(to.to_string());
        const dtensor got = redistribute(comm, xs, to);
        const dtensor want = redistribute(plain, xh, to);
        CHECK(got.local.device() == jitembed::device::cuda(0));
        CHECK(equal(on_host(got.local), want.local));
        const dtensor back = redistribute(comm, got, placement::shard(1));
        const dtensor back_want = redistribute(plain, want, placement::shard(1));
        CHECK(equal(on_host(back.local), back_want.local));
      }
      const dtensor d = distribute(comm, on_device(full), placement::shard(1));
      CHECK(equal(on_host(d.local), mine));

      // TP mappings: scatter / gather of the last dim and the SP reduce-scatter, on device tensors.
      const tensor wide = randn(shape{4, 6}, 5);
      CHECK(equal(on_host(scatter_to_tp::forward(comm, on_device(wide))), scatter_to_tp::forward(plain, wide)));
      CHECK(equal(on_host(gather_from_tp::forward(comm, on_device(wide))), gather_from_tp::forward(plain, wide)));

      // A tensor on another device than the communicator's is rejected before anything is sent.
      CHECK(all_gather_dim(comm, tensor_view(mine.data(), mine.dtype(), mine.shape(), jitembed::device::cuda(1)), 1, 7)
                .error()
                .code == errc::invalid_argument);
      REQUIRE(comm.synchronize().has_value());
    });
  }
}

TEST_CASE("copy2d: a CPU communicator rejects device tensors in the dim collectives") {
  run_ranks(2, [](gloo_communicator& comm) {
    const tensor x = randn(shape{2, 3}, 1);
    const tensor_view dev(x.data(), x.dtype(), x.shape(), jitembed::device::cuda(0));
    auto r = all_gather_dim(comm, dev, 0, 4);
    REQUIRE(!r.has_value());
    CHECK(r.error().code == errc::invalid_argument);
    CHECK(r.error().message.find("CPU tensors only") != std::string::npos);
  });
}

TEST_CASE("host-staged communicator: a copyable handle, a copy keeps working after the original moves") {
  static_assert(std::is_copy_constructible_v<staged> && std::is_nothrow_move_constructible_v<staged>);
  static_assert(std::is_same_v<kept_communicator_t<staged>, staged>);
  run_ranks(2, [](gloo_communicator& g) {
    host_as_device mem;
    staged original(g, mem);  // g is a handle too: both share one group
    staged copy = original;   // what a layer keeps (keep_communicator)
    staged moved = std::move(original);
    original = staged(gloo_communicator(), mem);  // the moved-from one reassigned: unrelated to the others
    CHECK_FALSE(original.valid());
    const int r = copy.rank();
    const tensor full = randn(shape{2, 4, 3}, 31);
    const tensor mine = local_chunk(full, 1, 2, r);
    g.stats().reset();
    const tensor got = all_gather_dim(copy, on_device(mine), 1, 4).value();
    CHECK(equal(on_host(got), full));
    CHECK(moved.stats()[coll::all_gather].calls == 1);  // the stats are the shared inner communicator's
    CHECK(g.stats()[coll::all_gather].calls == 1);
    REQUIRE(copy.synchronize().has_value());
    REQUIRE(moved.barrier().has_value());
  });
}
