// A communicator over device buffers that runs another (host) communicator's collectives on host copies:
// device → host on the rank's stream, C's collective, host → device. For several ranks on one GPU where
// NCCL cannot put them (NCCL < 2.30), in tests and examples; not a fast path.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/copy2d.hpp"
#include "jitembed/parallel/detail/capture.hpp"

namespace jitembed::parallel {

// The device side a host-staged communicator needs: parallel::device_memory on one stream (allocation,
// copy2d, zero fill; copy2d also moves between the device and host_buffer()), synchronize() that waits for
// everything enqueued so far, and host staging memory (pinned for CUDA). A cheap-to-copy handle (split()
// copies it). cuda_staging (parallel/cuda/host_staged.hpp) is the CUDA one.
template <class M>
concept staging_memory = requires(M& m, const M& cm, const shape& s, dtype t, const copy2d_desc& d,
                                  const tensor_view& v, std::size_t n) {
  { cm.device() } -> std::convertible_to<jitembed::device>;
  { m.empty_tensor(s, t) } -> std::same_as<tensor>;
  m.copy2d(d);
  m.zero_fill(v);
  m.synchronize();
  { m.host_buffer(n) } -> std::same_as<tensor>;  // at least n bytes of host memory (u8 [n])
} && std::copy_constructible<M>;

// Models communicator (on M's device) and device_memory. Each operation checks its buffers, copies them to
// one host arena on M's stream, waits for that stream (the only host synchronization: C's collective reads
// host memory), runs C's operation, and enqueues the copies back; it returns before they complete. The
// arena is reused: the next operation's wait also completes the previous copies back, and it only grows
// after such a wait. Stats are C's (the bytes C moved: the same sizes as NCCL's). A copyable handle when C
// is one (rule 2.4): copies share C's communicator and one arena, so a layer keeps a copy; one thread at a
// time, like C. A moved-from one may only be destroyed or assigned to.
template <communicator C, staging_memory M>
class basic_host_staged_communicator {
 public:
  basic_host_staged_communicator(C inner, M memory)
      : inner_(std::move(inner)), s_(std::make_shared<staging>(std::move(memory))) {}

  int rank() const noexcept { return inner_.rank(); }
  int size() const noexcept { return inner_.size(); }
  bool valid() const noexcept { return inner_.valid(); }
  jitembed::device device() const noexcept { return s_->mem.device(); }
  const comm_stats& stats() const noexcept { return inner_.stats(); }
  comm_stats& stats() noexcept { return inner_.stats(); }
  C& inner() noexcept { return inner_; }
  M& memory() noexcept { return s_->mem; }

  // device_memory (copy2d.hpp), on M's stream.
  tensor empty_tensor(const shape& s, dtype t) { return s_->mem.empty_tensor(s, t); }
  void copy2d(const copy2d_desc& d) { s_->mem.copy2d(d); }
  void zero_fill(const tensor_view& v) { s_->mem.zero_fill(v); }

  result<void> all_reduce(const tensor_view& inout, reduce_op op) {
    return staged("all_reduce", {&inout, 1}, {&inout, 1}, true,
                  [&](std::span<const tensor_view> h) { return inner_.all_reduce(h[0], op); });
  }
  result<void> broadcast(const tensor_view& inout, int root) {
    return staged("broadcast", {&inout, 1}, {&inout, 1}, true,
                  [&](std::span<const tensor_view> h) { return inner_.broadcast(h[0], root); });
  }
  result<void> all_gather(const tensor_view& in, const tensor_view& out) {
    return in_out("all_gather", in, out, [&](const tensor_view& i, const tensor_view& o) { return inner_.all_gather(i, o); });
  }
  result<void> all_gather_v(const tensor_view& in, const tensor_view& out, std::span<const std::int64_t> counts) {
    return in_out("all_gather_v", in, out,
                  [&](const tensor_view& i, const tensor_view& o) { return inner_.all_gather_v(i, o, counts); });
  }
  result<void> reduce_scatter(const tensor_view& in, const tensor_view& out, reduce_op op) {
    return in_out("reduce_scatter", in, out,
                  [&](const tensor_view& i, const tensor_view& o) { return inner_.reduce_scatter(i, o, op); });
  }
  result<void> reduce_scatter_v(const tensor_view& in, const tensor_view& out, std::span<const std::int64_t> counts,
                                reduce_op op) {
    return in_out("reduce_scatter_v", in, out,
                  [&](const tensor_view& i, const tensor_view& o) { return inner_.reduce_scatter_v(i, o, counts, op); });
  }
  result<void> all_to_all(const tensor_view& in, const tensor_view& out) {
    return in_out("all_to_all", in, out, [&](const tensor_view& i, const tensor_view& o) { return inner_.all_to_all(i, o); });
  }
  result<void> all_to_all_v(const tensor_view& in, std::span<const std::int64_t> send_counts, const tensor_view& out,
                            std::span<const std::int64_t> recv_counts) {
    return in_out("all_to_all_v", in, out, [&](const tensor_view& i, const tensor_view& o) {
      return inner_.all_to_all_v(i, send_counts, o, recv_counts);
    });
  }
  result<void> send(const tensor_view& buf, int peer) {
    return staged("send", {&buf, 1}, {}, false, [&](std::span<const tensor_view> h) { return inner_.send(h[0], peer); });
  }
  result<void> recv(const tensor_view& buf, int peer) {
    return staged("recv", {}, {&buf, 1}, false, [&](std::span<const tensor_view> h) { return inner_.recv(h[0], peer); });
  }
  // Sends are staged to the host, C's batch runs on host buffers, receives are copied back.
  result<void> batch_p2p(std::span<const p2p_op> ops) {
    std::vector<tensor_view> ins, outs;
    for (const auto& op : ops) (op.op == p2p_op::kind::send ? ins : outs).push_back(op.buffer);
    return staged("batch_p2p", ins, outs, false, [&](std::span<const tensor_view> h) {
      std::vector<p2p_op> host_ops;
      std::size_t si = 0, ri = ins.size();
      for (const auto& op : ops) host_ops.push_back({op.op, h[op.op == p2p_op::kind::send ? si++ : ri++], op.peer});
      return inner_.batch_p2p(host_ops);
    });
  }
  result<void> barrier() {
    JITEMBED_TRY(synchronize());
    return inner_.barrier();
  }
  // Waits for the copies on M's stream, then for C's queued work.
  result<void> synchronize() {
    JITEMBED_TRY(detail::capture("host_staged synchronize", [&] { s_->mem.synchronize(); }));
    return inner_.synchronize();
  }
  // C's split, staged through a copy of this memory handle.
  result<basic_host_staged_communicator> split(int color, int key) {
    JITEMBED_ASSIGN_OR_RETURN(auto s, inner_.split(color, key));
    return basic_host_staged_communicator(std::move(s), s_->mem);
  }

 private:
  template <class F>
  result<void> in_out(const char* what, const tensor_view& in, const tensor_view& out, F f) {
    return staged(what, {&in, 1}, {&out, 1}, false,
                  [&](std::span<const tensor_view> h) { return f(h[0], h[1]); });
  }

  // Stages `ins` to host views, runs f over [host ins..., host outs...] (in_place: the one buffer is both),
  // copies the host outs back to `outs`. Buffers are checked first (C then checks counts and dtypes).
  template <class F>
  result<void> staged(const char* what, std::span<const tensor_view> ins, std::span<const tensor_view> outs,
                      bool in_place, F f) {
    return detail::capture(what, [&]() -> result<void> {
      const std::string name = std::string("host_staged: ") + what;
      for (auto v : ins) JITEMBED_TRY(detail::check_buffer(v, device(), name));
      for (auto v : outs) JITEMBED_TRY(detail::check_buffer(v, device(), name));
      const std::span<const tensor_view> all_outs = in_place ? std::span<const tensor_view>() : outs;
      std::size_t total = 0;
      for (auto v : ins) total += aligned(v.nbytes());
      for (auto v : all_outs) total += aligned(v.nbytes());
      std::byte* at = arena(total);
      std::vector<tensor_view> host;
      for (auto v : ins) {
        host.emplace_back(at, v.dtype(), v.shape());
        s_->mem.copy2d(copy2d_desc{at, v.nbytes(), v.data(), v.nbytes(), v.nbytes(), 1});
        at += aligned(v.nbytes());
      }
      for (auto v : all_outs) {
        host.emplace_back(at, v.dtype(), v.shape());
        at += aligned(v.nbytes());
      }
      s_->mem.synchronize();  // C reads the host copies (and the arena's previous copies back are done)
      JITEMBED_TRY(f(std::span<const tensor_view>(host)));
      const std::size_t first_out = in_place ? 0 : ins.size();
      for (std::size_t i = 0; i < outs.size(); ++i) {
        const tensor_view& d = outs[i];
        s_->mem.copy2d(copy2d_desc{d.data(), d.nbytes(), host[first_out + i].data(), d.nbytes(), d.nbytes(), 1});
      }
      return {};
    });
  }

  static std::size_t aligned(std::size_t n) noexcept { return (n + 255) / 256 * 256; }

  // At least n bytes of host staging; grows only after the stream is idle (copies back may read it).
  std::byte* arena(std::size_t n) {
    if (s_->host.owner() == nullptr || s_->host.nbytes() < n) {
      if (s_->host.owner() != nullptr) s_->mem.synchronize();
      s_->host = tensor();
      s_->host = s_->mem.host_buffer(std::max<std::size_t>(n, 1));
    }
    return static_cast<std::byte*>(s_->host.data());
  }

  // The memory handle and the host arena, shared by copies; the last one waits for the copies back that
  // still read the arena.
  struct staging {
    explicit staging(M m) : mem(std::move(m)) {}
    staging(const staging&) = delete;
    staging& operator=(const staging&) = delete;
    ~staging() {
      try {
        if (host.owner() != nullptr) mem.synchronize();
      } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor does not throw; the device already failed
      }
    }
    M mem;
    tensor host;
  };

  C inner_;
  std::shared_ptr<staging> s_;
};

}  // namespace jitembed::parallel
