// Internals of parallel/nccl.hpp: NCCL dtype/op mapping, the non-blocking settle/poll loop, the owned comm
// and nccl_base (argument checks, enqueueing, failure handling, stats) shared by both communicator types.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/cuda/check.hpp"
#include "jitembed/cuda/stream.hpp"
#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/cuda/copy2d.hpp"
#include "jitembed/parallel/store.hpp"

namespace jitembed::parallel {

namespace detail {

using nccl_clock = std::chrono::steady_clock;

// NCCL's element type for a dtype; i16 and boolean have none.
inline result<ncclDataType_t> nccl_dtype(dtype t, std::string_view what) {
  switch (t) {
    case dtype::u8: return ncclUint8;
    case dtype::i8: return ncclInt8;
    case dtype::i32: return ncclInt32;
    case dtype::i64: return ncclInt64;
    case dtype::f16: return ncclFloat16;
    case dtype::bf16: return ncclBfloat16;
    case dtype::f32: return ncclFloat32;
    case dtype::f64: return ncclFloat64;
    default: break;
  }
  return fail(errc::dtype_mismatch, "nccl: " + std::string(what) + ": dtype " + std::string(to_string(t)) +
                                        " is not supported (u8 i8 i32 i64 f16 bf16 f32 f64)");
}

inline ncclRedOp_t nccl_op(reduce_op op) noexcept { return op == reduce_op::max ? ncclMax : ncclSum; }

inline std::string nccl_error_text(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += std::string(" (") + last + ")";
  return s;
}

// Poll pacing: yield for the first polls (collectives of a few microseconds), then sleep briefly so a long
// wait does not burn a core the other ranks' threads need.
class poll_backoff {
 public:
  void wait() {
    if (++polls_ < 256) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  int polls_ = 0;
};

// Waits while `comm` reports ncclInProgress (non-blocking init, split, enqueue). Returns the settled state,
// or nullopt when the deadline passes first.
inline std::optional<ncclResult_t> nccl_settle(ncclComm_t comm, nccl_clock::time_point deadline) {
  poll_backoff backoff;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (nccl_clock::now() >= deadline) return std::nullopt;
    backoff.wait();
  }
}

// Sets the current CUDA device for a scope and restores the caller's.
class device_scope {
 public:
  explicit device_scope(int dev) {
    if (cudaGetDevice(&prev_) != cudaSuccess) {
      (void)cudaGetLastError();
      prev_ = -1;
    }
    if (prev_ != dev) JITEMBED_CUDA_CHECK(cudaSetDevice(dev));
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;
  ~device_scope() {
    if (prev_ >= 0) (void)cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
};

inline result<void> check_cuda_device(int dev, std::string_view what) {
  const int n = jitembed::cuda::device_count();
  if (dev < 0 || dev >= n) {
    return fail(errc::invalid_argument, "nccl: " + std::string(what) + ": CUDA device " + std::to_string(dev) +
                                            " does not exist (" + std::to_string(n) + " visible)");
  }
  return {};
}

inline ncclConfig_t nonblocking_config() {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  return cfg;
}

// Sole owner of an ncclComm_t (and optionally of the stream its operations default to). Destruction
// finalizes (flushes queued work) within the timeout, then destroys; a comm that cannot finalize in time
// is aborted, so a destructor never hangs on a dead peer.
class nccl_owned_comm {
 public:
  nccl_owned_comm(ncclComm_t comm, std::chrono::milliseconds timeout) : comm_(comm), timeout_(timeout) {}
  nccl_owned_comm(const nccl_owned_comm&) = delete;
  nccl_owned_comm& operator=(const nccl_owned_comm&) = delete;
  ~nccl_owned_comm() {
    if (comm_ == nullptr) return;
    const ncclResult_t r = ncclCommFinalize(comm_);
    if (r == ncclSuccess || r == ncclInProgress) {
      const auto state = nccl_settle(comm_, nccl_clock::now() + timeout_);
      if (state && *state == ncclSuccess) {
        (void)ncclCommDestroy(comm_);
        return;
      }
    }
    (void)ncclCommAbort(comm_);
  }

  ncclComm_t comm() const noexcept { return comm_; }
  bool aborted() const noexcept { return aborted_; }
  void abort() noexcept {
    if (comm_ != nullptr) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    aborted_ = true;
  }

  std::optional<jitembed::cuda::stream> stream;  // destroyed after the comm is finalized

 private:
  ncclComm_t comm_;
  std::chrono::milliseconds timeout_;
  bool aborted_ = false;
};

// Everything both communicator types share: argument checks, enqueueing with the non-blocking protocol,
// polling, failure handling and stats. A communicator is driven by one thread at a time.
class nccl_base {
 public:
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  // A member of a group (false for the empty communicator a kNoColor rank gets from split()).
  bool valid() const noexcept { return size_ > 0; }
  jitembed::device device() const noexcept { return jitembed::device::cuda(device_); }
  int cuda_device() const noexcept { return device_; }
  // The raw handle (null once aborted).
  ncclComm_t get() const noexcept { return owner_ ? owner_->comm() : comm_; }
  cudaStream_t stream() const noexcept { return stream_; }
  // Operations enqueue on `s` from now on (the caller's stream instead of the communicator's own).
  void set_stream(cudaStream_t s) noexcept { stream_ = s; }
  // True after a failure or abort: every later call fails with comm_failed at once.
  bool failed() const noexcept { return failed_ || (owner_ && owner_->aborted()); }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  // Shared by copies (and by the view nccl_communicator::ref() returns).
  const comm_stats& stats() const noexcept { return *stats_; }
  comm_stats& stats() noexcept { return *stats_; }

  // parallel::device_memory (copy2d.hpp): staging tensors and copies of the dim collectives, ordered on
  // stream() with the collectives. The caller's current CUDA device is cuda_device().
  // The tensors it returns are freed on stream() after the consumer stream's work at that time (a
  // compute stream reading them; cuda_backend::before_comm names it).
  tensor empty_tensor(const shape& s, dtype t) const { return empty_for(s, t, device_, stream_, consumer_); }
  void set_consumer_stream(cudaStream_t s) noexcept { consumer_ = s; }
  void copy2d(const copy2d_desc& d) const { copy2d_async(d, stream_); }
  void zero_fill(const tensor_view& v) const { zero_fill_async(v, stream_); }

  result<void> all_reduce(const tensor_view& inout, reduce_op op) {
    JITEMBED_TRY(check_buf(inout, "all_reduce"));
    JITEMBED_ASSIGN_OR_RETURN(auto dt, nccl_dtype(inout.dtype(), "all_reduce"));
    JITEMBED_TRY(ready("all_reduce"));
    stats_->record(coll::all_reduce, inout.nbytes());
    if (inout.numel() == 0) return {};
    return launch("all_reduce", false, [&](ncclComm_t c) {
      return ncclAllReduce(inout.data(), inout.data(), inout.numel(), dt, nccl_op(op), c, stream_);
    });
  }

  result<void> all_gather(const tensor_view& in, const tensor_view& out) {
    JITEMBED_ASSIGN_OR_RETURN(auto dt, check_pair(in, out, "all_gather"));
    JITEMBED_TRY(check_numel(out.numel(), in.numel() * static_cast<std::uint64_t>(size_), "nccl: all_gather output"));
    JITEMBED_TRY(ready("all_gather"));
    stats_->record(coll::all_gather, out.nbytes());
    if (out.numel() == 0) return {};
    return launch("all_gather", false,
                  [&](ncclComm_t c) { return ncclAllGather(in.data(), out.data(), in.numel(), dt, c, stream_); });
  }

  // One broadcast per root inside a group: rank r's block lands at its offset in every output.
  result<void> all_gather_v(const tensor_view& in, const tensor_view& out, std::span<const std::int64_t> counts) {
    JITEMBED_ASSIGN_OR_RETURN(auto dt, check_pair(in, out, "all_gather_v"));
    JITEMBED_ASSIGN_OR_RETURN(auto total, check_counts(counts, size_, "nccl: all_gather_v"));
    JITEMBED_TRY(check_numel(in.numel(), static_cast<std::uint64_t>(counts[static_cast<std::size_t>(rank_)]),
                             "nccl: all_gather_v input"));
    JITEMBED_TRY(check_numel(out.numel(), total, "nccl: all_gather_v output"));
    JITEMBED_TRY(ready("all_gather_v"));
    stats_->record(coll::all_gather, out.nbytes());
    if (out.numel() == 0) return {};
    const std::size_t es = in.itemsize();
    return launch("all_gather_v", true, [&](ncclComm_t c) {
      std::size_t off = 0;
      for (int r = 0; r < size_; ++r) {
        const auto n = static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]);
        std::byte* dst = bytes_at(out, off * es);
        off += n;
        if (n == 0) continue;  // every rank skips the same roots: counts are part of the collective's contract
        const void* src = r == rank_ ? in.data() : dst;
        const ncclResult_t e = ncclBroadcast(src, dst, n, dt, r, c, stream_);
        if (e != ncclSuccess && e != ncclInProgress) return e;
      }
      return ncclSuccess;
    });
  }

  result<void> reduce_scatter(const tensor_view& in, const tensor_view& out, reduce_op op) {
    JITEMBED_ASSIGN_OR_RETURN(auto dt, check_pair(in, out, "reduce_scatter"));
    JITEMBED_TRY(check_numel(in.numel(), out.numel() * static_cast<std::uint64_t>(size_), "nccl: reduce_scatter input"));
    JITEMBED_TRY(ready("reduce_scatter"));
    stats_->record(coll::reduce_scatter, in.nbytes());
    if (in.numel() == 0) return {};
    return launch("reduce_scatter", false, [&](ncclComm_t c) {
      return ncclReduceScatter(in.data(), out.data(), out.numel(), dt, nccl_op(op), c, stream_);
    });
  }

  // One reduce per root inside a group: block r of every input is reduced into rank r's output.
  result<void> reduce_scatter_v(const tensor_view& in, const tensor_view& out, std::span<const std::int64_t> counts,
                                reduce_op op) {
    JITEMBED_ASSIGN_OR_RETURN(auto dt, check_pair(in, out, "reduce_scatter_v"));
    JITEMBED_ASSIGN_OR_RETURN(auto total, check_counts(counts, size_, "nccl: reduce_scatter_v"));
    JITEMBED_TRY(check_numel(in.numel(), total, "nccl: reduce_scatter_v input"));
    JITEMBED_TRY(check_numel(out.numel(), static_cast<std::uint64_t>(counts[static_cast<std::size_t>(rank_)]),
                             "nccl: reduce_scatter_v output"));
    JITEMBED_TRY(ready("reduce_scatter_v"));
    stats_->record(coll::reduce_scatter, in.nbytes());
    if (in.numel() == 0) return {};
    const std::size_t es = in.itemsize();
    return launch("reduce_scatter_v", true, [&](ncclComm_t c) {
      std::size_t off = 0;
      for (int r = 0; r < size_; ++r) {
        const auto n = static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]);
        const std::byte* src = bytes_at(in, off * es);
        off += n;
        if (n == 0) continue;
        void* dst = r == rank_ ? out.data() : nullptr;
        const ncclResult_t e = ncclReduce(src, dst, n, dt, nccl_op(op), r, c, stream_);
        if (e != ncclSuccess && e != ncclInProgress) return e;
      }
      return ncclSuccess;
    });
  }

  result<void> broadcast(const tensor_view& inout, int root) {
    JITEMBED_TRY(check_buf(inout, "broadcast"));
    JITEMBED_ASSIGN_OR_RETURN(auto dt, nccl_dtype(inout.dtype(), "broadcast"));
    JITEMBED_TRY(check_peer(root, size_, "nccl: broadcast root"));
    JITEMBED_TRY(ready("broadcast"));
    stats_->record(coll::broadcast, inout.nbytes());
    if (inout.numel() == 0) return {};
    return launch("broadcast", false, [&](ncclComm_t c) {
      return ncclBroadcast(inout.data(), inout.data(), inout.numel(), dt, root, c, stream_);
    });
  }

  result<void> all_to_all(const tensor_view& in, const tensor_view& out) {
    JITEMBED_ASSIGN_OR_RETURN(auto dt, check_pair(in, out, "all_to_all"));
    JITEMBED_TRY(check_numel(out.numel(), in.numel(), "nccl: all_to_all output"));
    if (size_ > 0 && in.numel() % static_cast<std::uint64_t>(size_) != 0) {
      return fail(errc::invalid_argument, "nccl: all_to_all: " + std::to_string(in.numel()) +
                                              " elements do not split into " + std::to_string(size_) + " equal chunks");
    }
    JITEMBED_TRY(ready("all_to_all"));
    stats_->record(coll::all_to_all, in.nbytes());
    if (in.numel() == 0) return {};
    const std::vector<std::int64_t> counts(static_cast<std::size_t>(size_),
                                           static_cast<std::int64_t>(in.numel() / static_cast<std::uint64_t>(size_)));
    return exchange("all_to_all", in, counts, out, counts, dt);
  }

  result<void> all_to_all_v(const tensor_view& in, std::span<const std::int64_t> send_counts, const tensor_view& out,
                            std::span<const std::int64_t> recv_counts) {
    JITEMBED_ASSIGN_OR_RETURN(auto dt, check_pair(in, out, "all_to_all_v"));
    JITEMBED_ASSIGN_OR_RETURN(auto s, check_counts(send_counts, size_, "nccl: all_to_all_v send"));
    JITEMBED_ASSIGN_OR_RETURN(auto r, check_counts(recv_counts, size_, "nccl: all_to_all_v recv"));
    JITEMBED_TRY(check_numel(in.numel(), s, "nccl: all_to_all_v input"));
    JITEMBED_TRY(check_numel(out.numel(), r, "nccl: all_to_all_v output"));
    JITEMBED_TRY(ready("all_to_all_v"));
    stats_->record(coll::all_to_all, in.nbytes());
    return exchange("all_to_all_v", in, send_counts, out, recv_counts, dt);
  }

  // A lone send or receive to this rank itself could never complete; batch_p2p can pair them.
  result<void> send(const tensor_view& buf, int peer) { return one_p2p(p2p_op::isend(buf, peer), "send"); }
  result<void> recv(const tensor_view& buf, int peer) { return one_p2p(p2p_op::irecv(buf, peer), "recv"); }

  // Every send and receive in one NCCL group: they progress together, so a ring cannot deadlock.
  result<void> batch_p2p(std::span<const p2p_op> ops) {
    std::vector<ncclDataType_t> types;
    types.reserve(ops.size());
    for (const auto& op : ops) {
      JITEMBED_TRY(check_buf(op.buffer, "batch_p2p"));
      JITEMBED_ASSIGN_OR_RETURN(auto dt, nccl_dtype(op.buffer.dtype(), "batch_p2p"));
      types.push_back(dt);
      JITEMBED_TRY(check_peer(op.peer, size_, "nccl: batch_p2p"));
    }
    JITEMBED_TRY(ready("batch_p2p"));
    for (const auto& op : ops) stats_->record(op.op == p2p_op::kind::send ? coll::send : coll::recv, op.buffer.nbytes());
    bool any = false;
    for (const auto& op : ops) any = any || op.buffer.numel() > 0;
    if (!any) return {};
    return launch("batch_p2p", true, [&](ncclComm_t c) {
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const auto& op = ops[i];
        if (op.buffer.numel() == 0) continue;
        const ncclResult_t e = op.op == p2p_op::kind::send
                                   ? ncclSend(op.buffer.data(), op.buffer.numel(), types[i], op.peer, c, stream_)
                                   : ncclRecv(op.buffer.data(), op.buffer.numel(), types[i], op.peer, c, stream_);
        if (e != ncclSuccess && e != ncclInProgress) return e;
      }
      return ncclSuccess;
    });
  }

  // A one-element all-reduce, then synchronize(): returns once every rank has reached it.
  result<void> barrier() {
    JITEMBED_TRY(ready("barrier"));
    stats_->record(coll::barrier, 0);
    if (!scratch_) {
      void* p = nullptr;
      try {
        device_scope scope(device_);
        JITEMBED_CUDA_CHECK(cudaMalloc(&p, 16));
      } catch (const error& e) {
        return fail(e.code(), "nccl: barrier: " + e.message());
      }
      scratch_ = std::shared_ptr<void>(p, [](void* q) { (void)cudaFree(q); });
    }
    JITEMBED_TRY(launch("barrier", false, [&](ncclComm_t c) {
      return ncclAllReduce(scratch_.get(), scratch_.get(), 1, ncclFloat32, ncclSum, c, stream_);
    }));
    return synchronize();
  }

  // Waits for the work queued on the stream, polling NCCL's async error alongside: an error or the
  // deadline aborts the communicator (when this object owns it) instead of blocking forever.
  result<void> synchronize() {
    JITEMBED_TRY(ready("synchronize"));
    const auto deadline = nccl_clock::now() + timeout_;
    poll_backoff backoff;
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q != cudaErrorNotReady && q != cudaSuccess) {
        (void)cudaGetLastError();
        return broken(errc::comm_failed, std::string("nccl: synchronize: cudaStreamQuery failed: ") + cudaGetErrorName(q));
      }
      if (q == cudaErrorNotReady) (void)cudaGetLastError();
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(get(), &state);
      if (r != ncclSuccess) state = r;
      if (state != ncclSuccess && state != ncclInProgress) {
        return broken(errc::comm_failed, "nccl: synchronize: " + nccl_error_text(state, get()));
      }
      if (q == cudaSuccess) return {};
      if (nccl_clock::now() >= deadline) {
        return broken(errc::timeout, "nccl: synchronize: queued work did not finish within " +
                                         std::to_string(timeout_.count()) + " ms (a peer died or never called?)");
      }
      backoff.wait();
    }
  }

 protected:
  nccl_base() = default;
  nccl_base(ncclComm_t comm, std::shared_ptr<nccl_owned_comm> owner, cudaStream_t stream, int rank, int size, int dev,
            std::chrono::milliseconds timeout)
      : comm_(comm), owner_(std::move(owner)), stream_(stream), rank_(rank), size_(size), device_(dev), timeout_(timeout) {}
  nccl_base(const nccl_base&) = default;
  nccl_base& operator=(const nccl_base&) = default;
  nccl_base(nccl_base&& o) noexcept { take(o); }
  nccl_base& operator=(nccl_base&& o) noexcept {
    if (this != &o) take(o);
    return *this;
  }
  ~nccl_base() = default;

  struct split_result {
    ncclComm_t comm = nullptr;  // null for kNoColor
    int rank = -1;
    int size = 0;
  };

  // ncclCommSplit with a non-blocking config, then waits until parent and child have settled.
  result<split_result> split_comm(int color, int key) {
    if (color < kNoColor) {
      return fail(errc::invalid_argument,
                  "nccl: split: color " + std::to_string(color) + " is negative (only kNoColor = -1 may be)");
    }
    JITEMBED_TRY(ready("split"));
    ncclConfig_t cfg = nonblocking_config();
    ncclComm_t child = nullptr;
    ncclResult_t r = ncclSuccess;
    try {
      device_scope scope(device_);
      r = ncclCommSplit(get(), color == kNoColor ? NCCL_SPLIT_NOCOLOR : color, key, &child, &cfg);
    } catch (const error& e) {
      return fail(e.code(), "nccl: split: " + e.message());
    }
    const auto deadline = nccl_clock::now() + timeout_;
    auto give_up = [&](errc code, std::string msg) -> error_info {
      if (child != nullptr) (void)ncclCommAbort(child);
      return broken(code, std::move(msg));
    };
    if (r != ncclSuccess && r != ncclInProgress) return give_up(errc::comm_failed, "nccl: split: " + nccl_error_text(r, get()));
    for (ncclComm_t c : {get(), child}) {
      if (c == nullptr) continue;
      const auto state = nccl_settle(c, deadline);
      if (!state) {
        return give_up(errc::timeout, "nccl: split: ncclCommSplit did not complete within " +
                                          std::to_string(timeout_.count()) + " ms");
      }
      if (*state != ncclSuccess) return give_up(errc::comm_failed, "nccl: split: " + nccl_error_text(*state, c));
    }
    split_result out;
    if (child == nullptr) return out;
    out.comm = child;
    if (ncclCommUserRank(child, &out.rank) != ncclSuccess || ncclCommCount(child, &out.size) != ncclSuccess) {
      (void)ncclCommAbort(child);
      return fail(errc::comm_failed, "nccl: split: cannot read the new communicator's rank and size");
    }
    return out;
  }

  result<void> ready(std::string_view what) const {
    if (failed()) {
      return fail(errc::comm_failed, "nccl: " + std::string(what) + ": the communicator failed earlier and was aborted");
    }
    if (!valid() || get() == nullptr) {
      return fail(errc::invalid_argument, "nccl: " + std::string(what) + ": empty communicator (this rank is in no group)");
    }
    return {};
  }

  // Marks the communicator failed; aborts it when this object (or its shared owner) owns it. A borrowed
  // comm is left to its owner: aborting frees it, and the owner would destroy it a second time.
  error_info broken(errc code, std::string msg) {
    failed_ = true;
    if (owner_) owner_->abort();
    return fail(code, std::move(msg));
  }

  std::shared_ptr<nccl_owned_comm>& owner() noexcept { return owner_; }
  const std::shared_ptr<nccl_owned_comm>& owner_handle() const noexcept { return owner_; }
  const std::shared_ptr<comm_stats>& stats_handle() const noexcept { return stats_; }
  void share_stats(std::shared_ptr<comm_stats> s) noexcept { stats_ = std::move(s); }

 private:
  void take(nccl_base& o) noexcept {
    comm_ = std::exchange(o.comm_, nullptr);
    owner_ = std::move(o.owner_);
    stream_ = std::exchange(o.stream_, nullptr);
    consumer_ = std::exchange(o.consumer_, nullptr);
    rank_ = std::exchange(o.rank_, -1);
    size_ = std::exchange(o.size_, 0);
    device_ = o.device_;
    timeout_ = o.timeout_;
    failed_ = std::exchange(o.failed_, false);
    std::swap(stats_, o.stats_);
    scratch_ = std::move(o.scratch_);
  }

  static std::byte* bytes_at(const tensor_view& v, std::size_t off) { return static_cast<std::byte*>(v.data()) + off; }

  result<void> check_buf(const tensor_view& v, std::string_view what) const {
    return check_buffer(v, device(), "nccl: " + std::string(what));
  }

  result<ncclDataType_t> check_pair(const tensor_view& in, const tensor_view& out, std::string_view what) const {
    JITEMBED_TRY(check_buf(in, std::string(what) + " input"));
    JITEMBED_TRY(check_buf(out, std::string(what) + " output"));
    JITEMBED_TRY(check_same_dtype(in, out, "nccl: " + std::string(what)));
    return nccl_dtype(in.dtype(), what);
  }

  result<void> one_p2p(const p2p_op& op, std::string_view what) {
    JITEMBED_TRY(check_peer(op.peer, size_, "nccl: " + std::string(what)));
    if (op.peer == rank_) {
      return fail(errc::invalid_argument, "nccl: " + std::string(what) + ": peer " + std::to_string(op.peer) +
                                              " is this rank (pair a send to self with its receive in batch_p2p)");
    }
    return batch_p2p(std::span<const p2p_op>(&op, 1));
  }

  // Grouped send/recv with per-peer counts (all_to_all and all_to_all_v); zero counts are skipped on
  // both sides alike, since a send count of a to b is b's receive count from a.
  result<void> exchange(std::string_view what, const tensor_view& in, std::span<const std::int64_t> send_counts,
                        const tensor_view& out, std::span<const std::int64_t> recv_counts, ncclDataType_t dt) {
    bool any = false;
    for (auto c : send_counts) any = any || c > 0;
    for (auto c : recv_counts) any = any || c > 0;
    if (!any) return {};
    const std::size_t es = in.itemsize();
    return launch(what, true, [&](ncclComm_t c) {
      std::size_t soff = 0, roff = 0;
      for (int p = 0; p < size_; ++p) {
        const auto sn = static_cast<std::size_t>(send_counts[static_cast<std::size_t>(p)]);
        const auto rn = static_cast<std::size_t>(recv_counts[static_cast<std::size_t>(p)]);
        if (sn > 0) {
          const ncclResult_t e = ncclSend(bytes_at(in, soff * es), sn, dt, p, c, stream_);
          if (e != ncclSuccess && e != ncclInProgress) return e;
        }
        if (rn > 0) {
          const ncclResult_t e = ncclRecv(bytes_at(out, roff * es), rn, dt, p, c, stream_);
          if (e != ncclSuccess && e != ncclInProgress) return e;
        }
        soff += sn;
        roff += rn;
      }
      return ncclSuccess;
    });
  }

  // Enqueues (inside ncclGroupStart/End when `grouped`), then waits while NCCL reports ncclInProgress:
  // a non-blocking comm may still be connecting to its peers; past the timeout the comm is aborted.
  template <class F>
  result<void> launch(std::string_view what, bool grouped, F&& issue) {
    ncclComm_t c = get();
    const auto before = nccl_settle(c, nccl_clock::now() + timeout_);  // NCCL takes no call while in progress
    if (!before) {
      return broken(errc::timeout, "nccl: " + std::string(what) + ": communicator busy for " +
                                       std::to_string(timeout_.count()) + " ms");
    }
    if (*before != ncclSuccess) {
      return broken(errc::comm_failed, "nccl: " + std::string(what) + ": earlier asynchronous error: " +
                                           nccl_error_text(*before, c));
    }
    ncclResult_t r = ncclSuccess;
    if (grouped) {
      r = ncclGroupStart();
      if (r != ncclSuccess) return broken(errc::comm_failed, "nccl: " + std::string(what) + ": ncclGroupStart: " + nccl_error_text(r, c));
      const ncclResult_t first = issue(c);
      const ncclResult_t end = ncclGroupEnd();
      r = first != ncclSuccess && first != ncclInProgress ? first : end;
    } else {
      r = issue(c);
    }
    if (r == ncclInProgress) {
      const auto settled = nccl_settle(c, nccl_clock::now() + timeout_);
      if (!settled) {
        return broken(errc::timeout, "nccl: " + std::string(what) + ": not enqueued within " +
                                         std::to_string(timeout_.count()) + " ms (a peer died or never called?)");
      }
      r = *settled;
    }
    if (r != ncclSuccess) return broken(errc::comm_failed, "nccl: " + std::string(what) + ": " + nccl_error_text(r, c));
    return {};
  }

  ncclComm_t comm_ = nullptr;                 // a borrowed handle (no owner)
  std::shared_ptr<nccl_owned_comm> owner_;    // or the owner of the handle
  cudaStream_t stream_ = nullptr;
  cudaStream_t consumer_ = nullptr;  // the compute stream reading the collectives' results (empty_tensor)
  int rank_ = -1;
  int size_ = 0;
  int device_ = 0;
  std::chrono::milliseconds timeout_{std::chrono::seconds(60)};
  bool failed_ = false;
  std::shared_ptr<comm_stats> stats_ = std::make_shared<comm_stats>();
  std::shared_ptr<void> scratch_;  // barrier's one element
};

}  // namespace detail

}  // namespace jitembed::parallel
