// The communicator concept that both backends model (Gloo on CPU, NCCL on CUDA), per-operation call and
// byte counters with nccl-tests' bus-bandwidth conventions, and the point-to-point batch type.
#pragma once

#include <array>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::parallel {

enum class reduce_op : std::uint8_t { sum, max };

// The operations a communicator counts. Uneven (`_v`) variants count under their even name.
enum class coll : std::uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  broadcast,
  all_to_all,
  send,
  recv,
  barrier,
};
inline constexpr std::size_t kCollCount = 8;

constexpr std::string_view to_string(coll c) noexcept {
  switch (c) {
    case coll::all_reduce: return "all_reduce";
    case coll::all_gather: return "all_gather";
    case coll::reduce_scatter: return "reduce_scatter";
    case coll::broadcast: return "broadcast";
    case coll::all_to_all: return "all_to_all";
    case coll::send: return "send";
    case coll::recv: return "recv";
    case coll::barrier: return "barrier";
  }
  return "unknown";
}

// nccl-tests' bus-bandwidth factor: bus bytes = size × factor, where the size of an operation is
//   all_reduce, broadcast: the buffer;  all_gather: the output (n × input);
//   reduce_scatter: the input (n × output);  all_to_all: the send buffer;  send / recv: the message.
// all_reduce 2(n−1)/n, all_gather / reduce_scatter / all_to_all (n−1)/n, the rest 1.
constexpr double bus_factor(coll c, int n) noexcept {
  if (n <= 1) return c == coll::send || c == coll::recv ? 1.0 : 0.0;
  const double dn = n;
  switch (c) {
    case coll::all_reduce: return 2.0 * (dn - 1) / dn;
    case coll::all_gather:
    case coll::reduce_scatter:
    case coll::all_to_all: return (dn - 1) / dn;
    case coll::broadcast:
    case coll::send:
    case coll::recv: return 1.0;
    case coll::barrier: return 0.0;
  }
  return 0.0;
}

struct op_stats {
  std::uint64_t calls = 0;
  std::uint64_t bytes = 0;  // sum of the operation sizes (nccl-tests "size", above)
};

// Calls and bytes per operation. Each communicator owns one; a sub-communicator from split() starts at zero.
class comm_stats {
 public:
  void record(coll c, std::uint64_t bytes) noexcept {
    auto& s = ops_[static_cast<std::size_t>(c)];
    ++s.calls;
    s.bytes += bytes;
  }
  const op_stats& operator[](coll c) const noexcept { return ops_[static_cast<std::size_t>(c)]; }
  std::uint64_t total_calls() const noexcept {
    std::uint64_t n = 0;
    for (const auto& s : ops_) n += s.calls;
    return n;
  }
  std::uint64_t total_bytes() const noexcept {
    std::uint64_t n = 0;
    for (const auto& s : ops_) n += s.bytes;
    return n;
  }
  // Bytes each rank moves over the links, by nccl-tests' convention, for a group of `n` ranks.
  double bus_bytes(coll c, int n) const noexcept { return static_cast<double>((*this)[c].bytes) * bus_factor(c, n); }
  void reset() noexcept { ops_ = {}; }

 private:
  std::array<op_stats, kCollCount> ops_{};
};

// One send or receive of a batch (NCCL group, Gloo unbound buffers): all of a batch progress together,
// so a ring of sends and receives cannot deadlock.
struct p2p_op {
  enum class kind : std::uint8_t { send, recv };
  kind op = kind::send;
  tensor_view buffer;
  int peer = 0;

  static p2p_op isend(tensor_view b, int peer) { return {kind::send, b, peer}; }
  static p2p_op irecv(tensor_view b, int peer) { return {kind::recv, b, peer}; }
};

// Options both backends take.
struct comm_options {
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  // per operation and for rendezvous
};

// split(): a rank passing kNoColor belongs to no sub-group and receives an empty communicator.
inline constexpr int kNoColor = -1;

// What a communicator offers. Buffers are contiguous views on the backend's device with the same dtype
// in and out; counts are in elements; the layout of a gathered or scattered buffer is rank-major. Every
// operation returns result<void>: invalid arguments fail with invalid_argument / dtype_mismatch before
// anything is sent; a dead peer or broken link fails with comm_failed (or timeout), never hangs, and
// leaves the communicator failed (later calls fail at once). Operations are collective unless noted.
//   all_reduce(inout, op)                      in place
//   all_gather(in, out)                        out.numel == size × in.numel
//   all_gather_v(in, out, counts)              counts[r] elements from rank r; in.numel == counts[rank]
//   reduce_scatter(in, out, op)                in.numel == size × out.numel
//   reduce_scatter_v(in, out, counts, op)      rank r receives counts[r] elements; in.numel == Σ counts
//   broadcast(inout, root)
//   all_to_all(in, out)                        equal chunks of numel / size
//   all_to_all_v(in, send_counts, out, recv_counts)
//   send(buf, peer) / recv(buf, peer)          point to point, not collective
//   batch_p2p(ops)                             sends and receives that progress together
//   barrier(), synchronize()                   synchronize waits for queued work (NCCL's stream)
//   split(color, key)                          sub-communicator of the ranks with the same color, ordered
//                                              by (key, rank); kNoColor gives an empty one (valid() false)
template <class C>
concept communicator = requires(C& c, const C& cc, tensor_view v, std::span<const std::int64_t> counts,
                                std::span<const p2p_op> ops) {
  { cc.rank() } -> std::convertible_to<int>;
  { cc.size() } -> std::convertible_to<int>;
  { cc.valid() } -> std::convertible_to<bool>;
  { cc.device() } -> std::convertible_to<jitembed::device>;
  { c.all_reduce(v, reduce_op::sum) } -> std::same_as<result<void>>;
  { c.all_gather(v, v) } -> std::same_as<result<void>>;
  { c.all_gather_v(v, v, counts) } -> std::same_as<result<void>>;
  { c.reduce_scatter(v, v, reduce_op::sum) } -> std::same_as<result<void>>;
  { c.reduce_scatter_v(v, v, counts, reduce_op::sum) } -> std::same_as<result<void>>;
  { c.broadcast(v, 0) } -> std::same_as<result<void>>;
  { c.all_to_all(v, v) } -> std::same_as<result<void>>;
  { c.all_to_all_v(v, counts, v, counts) } -> std::same_as<result<void>>;
  { c.send(v, 0) } -> std::same_as<result<void>>;
  { c.recv(v, 0) } -> std::same_as<result<void>>;
  { c.batch_p2p(ops) } -> std::same_as<result<void>>;
  { c.barrier() } -> std::same_as<result<void>>;
  { c.synchronize() } -> std::same_as<result<void>>;
  { c.split(0, 0) } -> std::same_as<result<C>>;
  { cc.stats() } -> std::convertible_to<const comm_stats&>;
  { c.stats() } -> std::same_as<comm_stats&>;
};

// What a long-lived user of a communicator (a tensor-parallel layer) keeps of it, so that moving the
// caller's communicator never leaves the user pointing at a moved-from object: a copy of a communicator
// that is a handle whose copies share one communicator (gloo_communicator, host_staged_communicator over
// one, nccl_communicator_ref), or, for an owner that cannot be copied, the view its ref() returns
// (nccl_communicator::ref() shares the ownership of the comm and its stream).
template <class C>
concept keepable_communicator =
    communicator<C> && (std::copy_constructible<C> || requires(const C& c) {
      { c.ref() } -> communicator;
    });

template <keepable_communicator C>
auto keep_communicator(const C& c) {
  if constexpr (std::copy_constructible<C>) {
    return C(c);
  } else {
    return c.ref();
  }
}

// The type keep_communicator(C&) returns: C itself, or its ref() view.
template <keepable_communicator C>
using kept_communicator_t = decltype(keep_communicator(std::declval<const C&>()));

namespace detail {

// Argument checks shared by the backends; each returns the error to report or ok.
inline result<void> check_buffer(const tensor_view& v, jitembed::device dev, std::string_view what) {
  if (v.numel() > 0 && v.data() == nullptr) return fail(errc::invalid_argument, std::string(what) + ": null data");
  if (!v.is_contiguous()) return fail(errc::invalid_argument, std::string(what) + ": buffer is not contiguous");
  if (v.device().type != dev.type || (!dev.is_cpu() && v.device().ordinal != dev.ordinal)) {
    return fail(errc::invalid_argument, std::string(what) + ": buffer is on the wrong device");
  }
  return {};
}

inline result<void> check_same_dtype(const tensor_view& a, const tensor_view& b, std::string_view what) {
  if (a.dtype() != b.dtype()) {
    return fail(errc::dtype_mismatch, std::string(what) + ": input is " + std::string(to_string(a.dtype())) +
                                          ", output is " + std::string(to_string(b.dtype())));
  }
  return {};
}

inline result<void> check_numel(std::uint64_t got, std::uint64_t want, std::string_view what) {
  if (got != want) {
    return fail(errc::invalid_argument,
                std::string(what) + ": " + std::to_string(got) + " elements, expected " + std::to_string(want));
  }
  return {};
}

// counts must have one non-negative entry per rank; returns their sum.
inline result<std::uint64_t> check_counts(std::span<const std::int64_t> counts, int size, std::string_view what) {
  if (counts.size() != static_cast<std::size_t>(size)) {
    return fail(errc::invalid_argument, std::string(what) + ": " + std::to_string(counts.size()) +
                                            " counts for " + std::to_string(size) + " ranks");
  }
  std::uint64_t sum = 0;
  for (auto c : counts) {
    if (c < 0) return fail(errc::invalid_argument, std::string(what) + ": negative count");
    sum += static_cast<std::uint64_t>(c);
  }
  return sum;
}

inline result<void> check_peer(int peer, int size, std::string_view what) {
  if (peer < 0 || peer >= size) {
    return fail(errc::invalid_argument,
                std::string(what) + ": peer " + std::to_string(peer) + " outside [0, " + std::to_string(size) + ")");
  }
  return {};
}

}  // namespace detail

}  // namespace jitembed::parallel
