// Gloo communicator on CPU (Debian's libgloo-dev): TCP on loopback by default, rendezvous through a
// jitembed store (hash_store for ranks as threads, file_store for processes). Models `communicator`.
#pragma once

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "jitembed/core/dtype.hpp"
#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/detail/gloo_support.hpp"
#include "jitembed/parallel/store.hpp"

namespace jitembed::parallel {

struct gloo_options : comm_options {
  std::string hostname = "127.0.0.1";  // address the ranks' sockets bind to: loopback unless asked otherwise
};

// A copyable handle (rule 2.4): copies share one communicator — its group, its failure state, its stats —
// so a tensor-parallel layer keeps a copy and stays valid when the caller's communicator moves. Driven by
// one thread at a time, whichever copy it calls through. A moved-from handle may only be destroyed or
// assigned to.
class gloo_communicator {
 public:
  // An empty communicator (what a kNoColor rank gets from split()).
  gloo_communicator() = default;

  // Connects `size` ranks through `st` (every rank calls this with a copy of the same store handle and its
  // own rank).
  static result<gloo_communicator> create(shared_store st, int rank, int size, gloo_options opt = {}) {
    if (!st) return fail(errc::invalid_argument, "gloo: empty store");
    detail::ignore_sigpipe();
    if (size <= 0 || rank < 0 || rank >= size) {
      return fail(errc::invalid_argument, "gloo: rank " + std::to_string(rank) + " of " + std::to_string(size));
    }
    gloo_communicator c;
    c.s_->rendezvous = std::move(st);
    c.s_->opt = std::move(opt);
    try {
      ::gloo::transport::tcp::attr attr;
      attr.hostname = c.s_->opt.hostname;
      c.s_->device = ::gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      return fail(errc::comm_failed, std::string("gloo: cannot create a TCP device on ") + c.s_->opt.hostname + ": " + e.what());
    }
    JITEMBED_TRY(c.connect(c.s_->rendezvous, rank, size));
    return c;
  }

  int rank() const noexcept { return s_->context ? s_->context->rank : -1; }
  int size() const noexcept { return s_->context ? s_->context->size : 0; }
  bool valid() const noexcept { return s_->context != nullptr; }
  jitembed::device device() const noexcept { return jitembed::device::cpu(); }
  bool failed() const noexcept { return s_->failed; }
  const comm_stats& stats() const noexcept { return s_->stats; }
  comm_stats& stats() noexcept { return s_->stats; }
  const std::shared_ptr<::gloo::Context>& context() const noexcept { return s_->context; }

  result<void> all_reduce(const tensor_view& inout, reduce_op op) {
    JITEMBED_TRY(ready("all_reduce"));
    JITEMBED_TRY(detail::check_buffer(inout, device(), "all_reduce"));
    s_->stats.record(coll::all_reduce, inout.nbytes());
    if (inout.numel() == 0) return {};
    return guarded("all_reduce", [&] {
      detail::visit_dtype(inout.dtype(), [&](auto tag) {
        using T = decltype(tag);
        ::gloo::AllreduceOptions o(s_->context);
        o.setOutput(static_cast<T*>(inout.data()), inout.numel());
        o.setReduceFunction(detail::gloo_reduce_fn<T>(op));
        o.setTimeout(s_->opt.timeout);
        ::gloo::allreduce(o);
      });
    });
  }

  result<void> all_gather(const tensor_view& in, const tensor_view& out) {
    JITEMBED_TRY(ready("all_gather"));
    JITEMBED_TRY(check_pair(in, out, "all_gather"));
    JITEMBED_TRY(detail::check_numel(out.numel(), in.numel() * static_cast<std::uint64_t>(size()), "all_gather output"));
    s_->stats.record(coll::all_gather, out.nbytes());
    if (out.numel() == 0) return {};
    return guarded("all_gather", [&] {
      ::gloo::AllgatherOptions o(s_->context);
      o.setInput(detail::nonnull(in.data()), in.nbytes());
      o.setOutput(static_cast<std::byte*>(out.data()), out.nbytes());
      o.setTimeout(s_->opt.timeout);
      ::gloo::allgather(o);
    });
  }

  result<void> all_gather_v(const tensor_view& in, const tensor_view& out, std::span<const std::int64_t> counts) {
    JITEMBED_TRY(ready("all_gather_v"));
    JITEMBED_TRY(check_pair(in, out, "all_gather_v"));
    JITEMBED_ASSIGN_OR_RETURN(auto total, detail::check_counts(counts, size(), "all_gather_v"));
    JITEMBED_TRY(detail::check_numel(in.numel(), static_cast<std::uint64_t>(counts[static_cast<std::size_t>(rank())]),
                                     "all_gather_v input"));
    JITEMBED_TRY(detail::check_numel(out.numel(), total, "all_gather_v output"));
    s_->stats.record(coll::all_gather, out.nbytes());
    if (out.numel() == 0) return {};
    const std::size_t es = in.itemsize();
    std::vector<std::size_t> bytes(counts.size());
    for (std::size_t i = 0; i < counts.size(); ++i) bytes[i] = static_cast<std::size_t>(counts[i]) * es;
    return guarded("all_gather_v", [&] {
      ::gloo::AllgathervOptions o(s_->context);
      o.setInput(detail::nonnull(in.data()), in.nbytes());
      o.setOutput(static_cast<std::byte*>(out.data()), bytes);
      o.setTimeout(s_->opt.timeout);
      ::gloo::allgatherv(o);
    });
  }

  // Gloo's generic API has no reduce-scatter: chunk j goes to rank j through one all-to-all, then the
  // n received chunks are reduced here. Each rank sends and receives (n−1)/n of the input, the volume of
  // a ring reduce-scatter.
  result<void> reduce_scatter(const tensor_view& in, const tensor_view& out, reduce_op op) {
    JITEMBED_TRY(ready("reduce_scatter"));
    JITEMBED_TRY(check_pair(in, out, "reduce_scatter"));
    JITEMBED_TRY(detail::check_numel(in.numel(), out.numel() * static_cast<std::uint64_t>(size()), "reduce_scatter input"));
    std::vector<std::int64_t> counts(static_cast<std::size_t>(size()), static_cast<std::int64_t>(out.numel()));
    return reduce_scatter_impl(in, out, counts, op, "reduce_scatter");
  }

  result<void> reduce_scatter_v(const tensor_view& in, const tensor_view& out, std::span<const std::int64_t> counts,
                                reduce_op op) {
    JITEMBED_TRY(ready("reduce_scatter_v"));
    JITEMBED_TRY(check_pair(in, out, "reduce_scatter_v"));
    JITEMBED_ASSIGN_OR_RETURN(auto total, detail::check_counts(counts, size(), "reduce_scatter_v"));
    JITEMBED_TRY(detail::check_numel(in.numel(), total, "reduce_scatter_v input"));
    JITEMBED_TRY(detail::check_numel(out.numel(), static_cast<std::uint64_t>(counts[static_cast<std::size_t>(rank())]),
                                     "reduce_scatter_v output"));
    return reduce_scatter_impl(in, out, counts, op, "reduce_scatter_v");
  }

  result<void> broadcast(const tensor_view& inout, int root) {
    JITEMBED_TRY(ready("broadcast"));
    JITEMBED_TRY(detail::check_buffer(inout, device(), "broadcast"));
    JITEMBED_TRY(detail::check_peer(root, size(), "broadcast root"));
    s_->stats.record(coll::broadcast, inout.nbytes());
    if (inout.numel() == 0) return {};
    return guarded("broadcast", [&] {
      ::gloo::BroadcastOptions o(s_->context);
      o.setOutput(static_cast<std::byte*>(inout.data()), inout.nbytes());
      o.setRoot(root);
      o.setTimeout(s_->opt.timeout);
      ::gloo::broadcast(o);
    });
  }

  result<void> all_to_all(const tensor_view& in, const tensor_view& out) {
    JITEMBED_TRY(ready("all_to_all"));
    JITEMBED_TRY(check_pair(in, out, "all_to_all"));
    JITEMBED_TRY(detail::check_numel(out.numel(), in.numel(), "all_to_all output"));
    if (in.numel() % static_cast<std::uint64_t>(size()) != 0) {
      return fail(errc::invalid_argument, "all_to_all: " + std::to_string(in.numel()) + " elements do not split into " +
                                              std::to_string(size()) + " equal chunks");
    }
    s_->stats.record(coll::all_to_all, in.nbytes());
    if (in.numel() == 0) return {};
    return guarded("all_to_all", [&] {
      ::gloo::AlltoallOptions o(s_->context);
      o.setInput(static_cast<std::byte*>(in.data()), in.nbytes());
      o.setOutput(static_cast<std::byte*>(out.data()), out.nbytes());
      o.setTimeout(s_->opt.timeout);
      ::gloo::alltoall(o);
    });
  }

  result<void> all_to_all_v(const tensor_view& in, std::span<const std::int64_t> send_counts, const tensor_view& out,
                            std::span<const std::int64_t> recv_counts) {
    JITEMBED_TRY(ready("all_to_all_v"));
    JITEMBED_TRY(check_pair(in, out, "all_to_all_v"));
    JITEMBED_ASSIGN_OR_RETURN(auto s, detail::check_counts(send_counts, size(), "all_to_all_v send"));
    JITEMBED_ASSIGN_OR_RETURN(auto r, detail::check_counts(recv_counts, size(), "all_to_all_v recv"));
    JITEMBED_TRY(detail::check_numel(in.numel(), s, "all_to_all_v input"));
    JITEMBED_TRY(detail::check_numel(out.numel(), r, "all_to_all_v output"));
    s_->stats.record(coll::all_to_all, in.nbytes());
    return guarded("all_to_all_v", [&] { alltoallv_bytes(in.data(), send_counts, out.data(), recv_counts, in.itemsize()); });
  }

  result<void> send(const tensor_view& buf, int peer) {
    const p2p_op op = p2p_op::isend(buf, peer);
    return batch_p2p(std::span<const p2p_op>(&op, 1));
  }
  result<void> recv(const tensor_view& buf, int peer) {
    const p2p_op op = p2p_op::irecv(buf, peer);
    return batch_p2p(std::span<const p2p_op>(&op, 1));
  }

  // Posts every send and receive, then waits for all: a batch cannot deadlock on its own order. The k-th
  // message from a to b in a batch matches b's k-th receive from a.
  result<void> batch_p2p(std::span<const p2p_op> ops) {
    JITEMBED_TRY(ready("batch_p2p"));
    for (const auto& op : ops) {
      JITEMBED_TRY(detail::check_buffer(op.buffer, device(), "batch_p2p"));
      JITEMBED_TRY(detail::check_peer(op.peer, size(), "batch_p2p"));
    }
    for (const auto& op : ops) s_->stats.record(op.op == p2p_op::kind::send ? coll::send : coll::recv, op.buffer.nbytes());
    return guarded("batch_p2p", [&] {
      std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> sends, recvs;
      std::vector<std::uint32_t> sent(static_cast<std::size_t>(size()), 0), received(static_cast<std::size_t>(size()), 0);
      for (const auto& op : ops) {
        if (op.buffer.nbytes() == 0) continue;
        auto ub = s_->context->createUnboundBuffer(op.buffer.data(), op.buffer.nbytes());
        const auto p = static_cast<std::size_t>(op.peer);
        if (op.op == p2p_op::kind::send) {
          ub->send(op.peer, p2p_slot(sent[p]++));
          sends.push_back(std::move(ub));
        } else {
          ub->recv(op.peer, p2p_slot(received[p]++));
          recvs.push_back(std::move(ub));
        }
      }
      for (auto& ub : recvs) wait_or_throw(ub->waitRecv(s_->opt.timeout));
      for (auto& ub : sends) wait_or_throw(ub->waitSend(s_->opt.timeout));
    });
  }

  result<void> barrier() {
    JITEMBED_TRY(ready("barrier"));
    s_->stats.record(coll::barrier, 0);
    return guarded("barrier", [&] {
      ::gloo::BarrierOptions o(s_->context);
      o.setTimeout(s_->opt.timeout);
      ::gloo::barrier(o);
    });
  }

  // Gloo operations complete before they return.
  result<void> synchronize() { return ready("synchronize"); }

  // Ranks with the same color form a sub-communicator ordered by (key, rank); it rendezvous on the parent's
  // store under a fresh prefix and shares the parent's TCP device.
  result<gloo_communicator> split(int color, int key) {
    JITEMBED_TRY(ready("split"));
    if (color < kNoColor) return fail(errc::invalid_argument, "split: color " + std::to_string(color));
    std::vector<std::int32_t> mine{color, key};
    std::vector<std::int32_t> all(2 * static_cast<std::size_t>(size()));
    JITEMBED_TRY(all_gather(tensor_view(mine.data(), dtype::i32, shape{2}), tensor_view(all.data(), dtype::i32, shape{2 * size()})));
    const int seq = s_->split_seq++;
    if (color == kNoColor) return gloo_communicator();
    std::vector<std::pair<std::int32_t, int>> members;  // (key, parent rank)
    for (int r = 0; r < size(); ++r) {
      if (all[2 * static_cast<std::size_t>(r)] == color) members.emplace_back(all[2 * static_cast<std::size_t>(r) + 1], r);
    }
    std::sort(members.begin(), members.end());
    int new_rank = 0;
    while (members[static_cast<std::size_t>(new_rank)].second != rank()) ++new_rank;
    gloo_communicator c;
    c.s_->opt = s_->opt;
    c.s_->device = s_->device;
    c.s_->prefix = s_->prefix + "split" + std::to_string(seq) + "/color" + std::to_string(color) + "/";
    c.s_->rendezvous = s_->rendezvous;
    JITEMBED_TRY(c.connect(s_->rendezvous, new_rank, static_cast<int>(members.size())));
    return c;
  }

 private:
  result<void> connect(const shared_store& st, int rank, int size) {
    try {
      auto ctx = std::make_shared<::gloo::rendezvous::Context>(rank, size);
      ctx->setTimeout(s_->opt.timeout);
      detail::gloo_store_adapter adapter(shared_store(prefix_store(st, s_->prefix + "gloo/")), s_->opt.timeout);
      ctx->connectFullMesh(adapter, s_->device);
      // Every rank has connected before any returns: a rank that returned and closed at once could
      // otherwise break a peer that is still connecting to it.
      ::gloo::BarrierOptions b(ctx);
      b.setTimeout(s_->opt.timeout);
      ::gloo::barrier(b);
      s_->context = std::move(ctx);
    } catch (const jitembed::error& e) {
      return fail(e.code(), "gloo: rendezvous of rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                " failed: " + e.message());
    } catch (const std::exception& e) {
      return fail(errc::comm_failed, "gloo: connecting rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                         " failed: " + e.what());
    }
    return {};
  }

  result<void> ready(const char* what) const {
    if (!s_->context) return fail(errc::invalid_argument, std::string(what) + ": empty communicator");
    if (s_->failed) return fail(errc::comm_failed, std::string(what) + ": communicator failed earlier: " + s_->failure);
    return {};
  }

  result<void> check_pair(const tensor_view& in, const tensor_view& out, const char* what) const {
    JITEMBED_TRY(detail::check_buffer(in, device(), what));
    JITEMBED_TRY(detail::check_buffer(out, device(), what));
    return detail::check_same_dtype(in, out, what);
  }

  // Runs a gloo call; an exception (a closed connection, a timeout) fails this call and every later one.
  template <class F>
  result<void> guarded(const char* what, F&& f) {
    try {
      f();
      return {};
    } catch (const std::exception& e) {
      s_->failed = true;
      s_->failure = e.what();
      const bool timed_out = s_->failure.find("imed out") != std::string::npos || s_->failure.find("imeout") != std::string::npos;
      return fail(timed_out ? errc::timeout : errc::comm_failed,
                  std::string(what) + " on rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ": " + s_->failure);
    }
  }

  static void wait_or_throw(bool completed) {
    if (!completed) throw ::gloo::IoException("gloo: point-to-point operation aborted");
  }

  static std::uint64_t p2p_slot(std::uint32_t index) { return (std::uint64_t{0xE1} << 56) | index; }

  void alltoallv_bytes(void* in, std::span<const std::int64_t> send_counts, void* out,
                       std::span<const std::int64_t> recv_counts, std::size_t es) {
    std::vector<std::int64_t> sb(send_counts.size()), rb(recv_counts.size());
    for (std::size_t i = 0; i < sb.size(); ++i) {
      sb[i] = send_counts[i] * static_cast<std::int64_t>(es);
      rb[i] = recv_counts[i] * static_cast<std::int64_t>(es);
    }
    // No early return when this rank has nothing to move: gloo's alltoallv posts a (possibly empty)
    // message to every peer, and the peers wait for this rank's.
    ::gloo::AlltoallvOptions o(s_->context);
    o.setInput(detail::nonnull(in), sb);
    o.setOutput(detail::nonnull(out), rb);
    o.setTimeout(s_->opt.timeout);
    ::gloo::alltoallv(o);
  }

  result<void> reduce_scatter_impl(const tensor_view& in, const tensor_view& out, std::span<const std::int64_t> counts,
                                   reduce_op op, const char* what) {
    s_->stats.record(coll::reduce_scatter, in.nbytes());
    const auto n = static_cast<std::size_t>(size());
    const std::int64_t mine = counts[static_cast<std::size_t>(rank())];
    std::vector<std::int64_t> recv_counts(n, mine);
    std::byte* staging = scratch(static_cast<std::size_t>(mine) * n * in.itemsize());
    return guarded(what, [&] {
      alltoallv_bytes(in.data(), counts, staging, recv_counts, in.itemsize());
      if (mine == 0) return;
      const std::size_t bytes = static_cast<std::size_t>(mine) * in.itemsize();
      std::memcpy(out.data(), staging, bytes);
      for (std::size_t r = 1; r < n; ++r) {
        detail::local_reduce_into(out.data(), staging + r * bytes, in.dtype(), static_cast<std::size_t>(mine), op);
      }
    });
  }

  // A grow-only receive buffer for reduce_scatter, kept between calls (no zeroing, no page faults per call).
  std::byte* scratch(std::size_t bytes) {
    if (bytes > s_->scratch_size) {
      s_->scratch.reset(new std::byte[bytes]);
      s_->scratch_size = bytes;
    }
    return s_->scratch.get();
  }

  // Everything a copy shares: the group, its failure state, the stats, the reduce-scatter scratch.
  struct state {
    shared_store rendezvous;
    gloo_options opt;
    std::unique_ptr<std::byte[]> scratch;
    std::size_t scratch_size = 0;
    std::shared_ptr<::gloo::transport::Device> device;
    std::shared_ptr<::gloo::Context> context;
    std::string prefix;
    int split_seq = 0;
    bool failed = false;
    std::string failure;
    comm_stats stats;
  };
  std::shared_ptr<state> s_ = std::make_shared<state>();
};

static_assert(communicator<gloo_communicator>);
static_assert(std::is_copy_constructible_v<gloo_communicator> && std::is_nothrow_move_constructible_v<gloo_communicator>);

}  // namespace jitembed::parallel
