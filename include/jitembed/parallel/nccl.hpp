// The NCCL communicator (CUDA buffers, asynchronous on a stream): nccl_communicator owns an ncclComm_t and
// its stream; nccl_communicator_ref views one created elsewhere (PyTorch). Non-blocking NCCL throughout, so
// a peer that never joins or dies ends in timeout / comm_failed, never a hang.
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
#include "jitembed/parallel/detail/nccl_base.hpp"
#include "jitembed/parallel/store.hpp"

namespace jitembed::parallel {

// A non-owning view over an ncclComm_t and a stream created elsewhere (e.g. PyTorch's ProcessGroupNCCL),
// with its own stats (shared by its copies). On a timeout or error it fails (comm_failed / timeout) but never
// aborts the borrowed comm: aborting frees it under its owner. A communicator from split(), or the view
// nccl_communicator::ref() returns, is owned by the refs copied from it (shared; the last one finalizes
// it) and uses the parent's stream.
class nccl_communicator_ref : public detail::nccl_base {
 public:
  nccl_communicator_ref() = default;

  // Trusts rank / size / device as given (no NCCL call), e.g. from the framework that made `comm`;
  // invalid_argument for a rank outside [0, size) or a negative device.
  static result<nccl_communicator_ref> wrap(ncclComm_t comm, cudaStream_t stream, int rank, int size, int cuda_device,
                                            comm_options opt = {}) {
    if (size <= 0 || rank < 0 || rank >= size || cuda_device < 0) {
      return fail(errc::invalid_argument, "nccl: ref: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                              " on CUDA device " + std::to_string(cuda_device));
    }
    return nccl_communicator_ref(comm, nullptr, stream, rank, size, cuda_device, opt.timeout);
  }

  // Asks NCCL for the rank, size and device of `comm`.
  static result<nccl_communicator_ref> wrap(ncclComm_t comm, cudaStream_t stream, comm_options opt = {}) {
    if (comm == nullptr) return fail(errc::invalid_argument, "nccl: wrap: null ncclComm_t");
    int rank = -1, size = 0, dev = -1;
    if (ncclCommUserRank(comm, &rank) != ncclSuccess || ncclCommCount(comm, &size) != ncclSuccess ||
        ncclCommCuDevice(comm, &dev) != ncclSuccess) {
      return fail(errc::comm_failed, "nccl: wrap: cannot read the communicator's rank, size and device");
    }
    return nccl_communicator_ref(comm, nullptr, stream, rank, size, dev, opt.timeout);
  }

  result<nccl_communicator_ref> split(int color, int key) {
    JITEMBED_ASSIGN_OR_RETURN(auto s, split_comm(color, key));
    if (s.comm == nullptr) return nccl_communicator_ref();
    return nccl_communicator_ref(nullptr, std::make_shared<detail::nccl_owned_comm>(s.comm, timeout()), stream(), s.rank,
                                 s.size, cuda_device(), timeout());
  }

 private:
  friend class nccl_communicator;  // ref(): a view sharing the owner
  // A borrowed `comm`, or one `owner` holds (split(), nccl_communicator::ref()).
  nccl_communicator_ref(ncclComm_t comm, std::shared_ptr<detail::nccl_owned_comm> owner, cudaStream_t s, int rank,
                        int size, int dev, std::chrono::milliseconds timeout)
      : nccl_base(comm, std::move(owner), s, rank, size, dev, timeout) {}
};

// Owns an NCCL communicator and the CUDA stream its operations run on (unless set_stream() names the
// caller's). Operations are asynchronous: synchronize() waits for them. Move-only.
class nccl_communicator : public detail::nccl_base {
 public:
  nccl_communicator() = default;
  nccl_communicator(nccl_communicator&&) noexcept = default;
  nccl_communicator& operator=(nccl_communicator&&) noexcept = default;
  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;
  ~nccl_communicator() = default;

  // Every rank calls this with the same store and key. Rank 0 makes the unique id and publishes it under
  // `key`; the others wait for it (errc::timeout after opt.timeout). The comm is initialised non-blocking
  // and polled: if a peer never joins within opt.timeout it is aborted and timeout is returned.
  static result<nccl_communicator> create(shared_store st, int rank, int size, int cuda_device,
                                          comm_options opt = {}, std::string key = "nccl/uid") {
    if (!st) return fail(errc::invalid_argument, "nccl: create: empty store");
    if (size <= 0 || rank < 0 || rank >= size) {
      return fail(errc::invalid_argument, "nccl: create: rank " + std::to_string(rank) + " outside [0, " +
                                              std::to_string(size) + ")");
    }
    if (cuda_device < 0) {
      return fail(errc::invalid_argument, "nccl: create: CUDA device " + std::to_string(cuda_device) + " is negative");
    }
    if (opt.timeout.count() <= 0) {
      return fail(errc::invalid_argument, "nccl: create: timeout " + std::to_string(opt.timeout.count()) + " ms");
    }
    if (key.empty()) return fail(errc::invalid_argument, "nccl: create: empty store key");

    ncclUniqueId id{};
    if (rank == 0) {
      JITEMBED_TRY(detail::check_cuda_device(cuda_device, "create"));
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) return fail(errc::comm_failed, "nccl: create: ncclGetUniqueId: " + detail::nccl_error_text(r, nullptr));
      JITEMBED_TRY(st.set(key, std::span<const std::byte>(reinterpret_cast<const std::byte*>(&id), sizeof id)));
    } else {
      auto v = st.get(key, opt.timeout);
      if (!v) {
        return fail(v.code(), "nccl: create: rank " + std::to_string(rank) + " waiting for rank 0's unique id: " +
                                  v.error().message);
      }
      if (v->size() != sizeof id) {
        return fail(errc::corrupt_data, "nccl: create: unique id under '" + key + "' is " + std::to_string(v->size()) +
                                            " bytes, expected " + std::to_string(sizeof id));
      }
      std::memcpy(&id, v->data(), sizeof id);
      JITEMBED_TRY(detail::check_cuda_device(cuda_device, "create"));
    }

    try {
      detail::device_scope scope(cuda_device);
      auto s = jitembed::cuda::stream::create().value();
      ncclConfig_t cfg = detail::nonblocking_config();
      ncclComm_t comm = nullptr;
      const ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &cfg);
      if (r != ncclSuccess && r != ncclInProgress) {
        if (comm != nullptr) (void)ncclCommAbort(comm);
        return fail(errc::comm_failed, "nccl: create: ncclCommInitRankConfig: " + detail::nccl_error_text(r, comm));
      }
      const auto state = detail::nccl_settle(comm, detail::nccl_clock::now() + opt.timeout);
      if (!state || *state != ncclSuccess) {
        std::string why = state ? detail::nccl_error_text(*state, comm) : std::string();
        (void)ncclCommAbort(comm);
        if (!state) {
          return fail(errc::timeout, "nccl: create: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                         ": not initialised within " + std::to_string(opt.timeout.count()) +
                                         " ms (a peer never joined?)");
        }
        return fail(errc::comm_failed, "nccl: create: ncclCommInitRankConfig: " + why);
      }
      auto owner = std::make_shared<detail::nccl_owned_comm>(comm, opt.timeout);
      owner->stream.emplace(std::move(s));
      const cudaStream_t raw = owner->stream->get();
      return nccl_communicator(std::move(owner), raw, rank, size, cuda_device, opt.timeout);
    } catch (const error& e) {
      return fail(e.code(), "nccl: create: " + e.message());
    }
  }

  // A view of this communicator (same comm, stream and stats) that shares the ownership of the comm and its
  // stream: it stays valid when this communicator moves or is destroyed (what a tensor-parallel layer keeps),
  // and a failure through it aborts the comm for both. A later set_stream() here does not reach it.
  nccl_communicator_ref ref() const {
    if (!valid() || get() == nullptr) return nccl_communicator_ref();
    nccl_communicator_ref r(nullptr, owner_handle(), stream(), rank(), size(), cuda_device(), timeout());
    r.share_stats(stats_handle());
    return r;
  }

  // Aborts now (in-flight work is cancelled); every later call fails with comm_failed.
  void abort() noexcept {
    if (owner()) owner()->abort();
  }

  // A sub-communicator with its own stream on the same device; kNoColor gives an empty one.
  result<nccl_communicator> split(int color, int key) {
    JITEMBED_ASSIGN_OR_RETURN(auto s, split_comm(color, key));
    if (s.comm == nullptr) return nccl_communicator();
    auto owner = std::make_shared<detail::nccl_owned_comm>(s.comm, timeout());
    try {
      detail::device_scope scope(cuda_device());
      owner->stream.emplace(jitembed::cuda::stream::create().value());
    } catch (const error& e) {
      return fail(e.code(), "nccl: split: " + e.message());
    }
    const cudaStream_t raw = owner->stream->get();
    return nccl_communicator(std::move(owner), raw, s.rank, s.size, cuda_device(), timeout());
  }

 private:
  nccl_communicator(std::shared_ptr<detail::nccl_owned_comm> owner, cudaStream_t s, int rank, int size, int dev,
                    std::chrono::milliseconds timeout)
      : nccl_base(nullptr, std::move(owner), s, rank, size, dev, timeout) {}
};

static_assert(communicator<nccl_communicator>);
static_assert(communicator<nccl_communicator_ref>);
static_assert(!std::is_copy_constructible_v<nccl_communicator> && std::is_nothrow_move_constructible_v<nccl_communicator>);
static_assert(std::is_copy_constructible_v<nccl_communicator_ref>);

// The CUDA device of each rank when one process runs a whole NCCL world as threads: one rank per visible
// GPU, or `ranks_per_gpu` ranks all on GPU 0 where NCCL (≥ 2.30, with NCCL_MULTI_RANK_GPU_ENABLE=1) lets
// several ranks share a GPU. Empty without a device.
inline std::vector<int> nccl_thread_devices(int ranks_per_gpu = 4) {
  const int n = jitembed::cuda::device_count();
  if (n == 0) return {};
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) version = 0;
  const char* env = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  if (version >= NCCL_VERSION(2, 30, 0) && env != nullptr && std::string_view(env) == "1" && ranks_per_gpu > 1) {
    return std::vector<int>(static_cast<std::size_t>(ranks_per_gpu), 0);
  }
  std::vector<int> devs(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) devs[static_cast<std::size_t>(i)] = i;
  return devs;
}

}  // namespace jitembed::parallel
