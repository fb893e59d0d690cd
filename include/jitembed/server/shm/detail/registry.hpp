// The one registry of the shared-memory regions clients register (Triton's system and CUDA extensions, one
// namespace of names), for the HTTP routes and the gRPC front alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/cuda_ipc.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/server/shm/detail/cuda_region.hpp"
#include "jitembed/server/shm/detail/region.hpp"
#include "jitembed/server/shm/detail/system_region.hpp"

namespace jitembed::server::detail {

// At most this many regions (of both kinds) are registered at once (each holds a descriptor or a mapping).
inline constexpr std::size_t kMaxSharedMemoryRegions = 1024;

// What registering a CUDA region answers when the service has no CUDA backend (server_config::cuda_ipc).
inline constexpr std::string_view kNoCudaSharedMemory = "CUDA shared memory: this server was built without CUDA";

// The registered regions by name, both kinds in one namespace (as in Triton). Thread-safe.
class shared_memory_registry {
 public:
  using region_ptr = std::shared_ptr<const shared_memory_region>;

  shared_memory_registry() = default;
  // `cuda`: opens and copies CUDA regions; empty: registering one is invalid_argument kNoCudaSharedMemory.
  explicit shared_memory_registry(any_cuda_ipc_backend cuda) : cuda_(std::move(cuda)) {}

  // Whether CUDA regions can be registered (the server then advertises cuda_shared_memory).
  bool has_cuda() const noexcept { return static_cast<bool>(cuda_); }

  // Registers the system region `name` (system_shared_memory_region::open). Errors: invalid_argument
  // (Triton's "shared memory region 'x' already in manager", whichever kind holds the name; those of open),
  // limit_exceeded (kMaxSharedMemoryRegions).
  result<void> register_region(std::string name, std::string key, std::uint64_t offset, std::uint64_t byte_size) {
    return insert(std::move(name), [&](std::string n) -> result<region_ptr> {
      JITEMBED_ASSIGN_OR_RETURN(auto r,
                                system_shared_memory_region::open(std::move(n), std::move(key), offset, byte_size));
      return region_ptr(std::move(r));
    });
  }

  // Registers the CUDA region `name` (cuda_shared_memory_region::open). Errors: invalid_argument
  // kNoCudaSharedMemory without a backend; as register_region.
  result<void> register_cuda_region(std::string name, std::span<const std::byte> raw_handle, std::int64_t device_id,
                                    std::uint64_t byte_size) {
    if (!cuda_) return fail(errc::invalid_argument, std::string(kNoCudaSharedMemory));
    return insert(std::move(name), [&](std::string n) -> result<region_ptr> {
      JITEMBED_ASSIGN_OR_RETURN(auto r,
                                cuda_shared_memory_region::open(cuda_, std::move(n), raw_handle, device_id, byte_size));
      return region_ptr(std::move(r));
    });
  }

  // Unregisters `name` if a region of `kind` holds it (any other name is no error, as in Triton). A
  // request that holds the region keeps it open until it finishes.
  void unregister_region(std::string_view name, shared_memory_kind kind = shared_memory_kind::system) {
    region_ptr dropped;  // closed outside the lock
    std::lock_guard lock(mu_);
    if (auto it = regions_.find(name); it != regions_.end() && it->second->kind() == kind) {
      dropped = std::move(it->second);
      regions_.erase(it);
    }
  }
  // Unregisters every region of `kind`.
  void unregister_all(shared_memory_kind kind = shared_memory_kind::system) {
    std::vector<region_ptr> dropped;  // closed outside the lock
    std::lock_guard lock(mu_);
    std::erase_if(regions_, [&](const auto& e) {
      if (e.second->kind() != kind) return false;
      dropped.push_back(e.second);
      return true;
    });
  }

  // The region `name`, of either kind. Errors: invalid_argument "<what>: shared memory region 'x' is not
  // registered".
  result<region_ptr> find(std::string_view name, std::string_view what) const {
    std::lock_guard lock(mu_);
    if (auto it = regions_.find(name); it != regions_.end()) return it->second;
    return fail(errc::invalid_argument,
                std::string(what) + ": shared memory region '" + std::string(name) + "' is not registered");
  }

  // The status of the region `name` of `kind`, or of every region of `kind` when `name` is empty. Errors:
  // not_found (404) for a name no region of `kind` holds.
  result<std::vector<shared_memory_status>> status(std::string_view name = {},
                                                   shared_memory_kind kind = shared_memory_kind::system) const {
    std::vector<shared_memory_status> arr;
    std::lock_guard lock(mu_);
    if (name.empty()) {
      for (const auto& [n, r] : regions_)
        if (r->kind() == kind) arr.push_back(r->status());
      return arr;
    }
    auto it = regions_.find(name);
    if (it == regions_.end() || it->second->kind() != kind)
      return fail(errc::not_found, std::string("Unable to find ") +
                                       (kind == shared_memory_kind::cuda ? "CUDA" : "system") +
                                       " shared memory region: '" + std::string(name) + "'");
    arr.push_back(it->second->status());
    return arr;
  }

  std::size_t size() const {
    std::lock_guard lock(mu_);
    return regions_.size();
  }

 private:
  // Checks the name, then opens the region under the lock (two registrations of one name cannot race).
  template <class Open>
  result<void> insert(std::string name, Open&& open) {
    if (name.empty()) return fail(errc::invalid_argument, "shared memory region name is empty");
    std::lock_guard lock(mu_);
    if (regions_.contains(name))
      return fail(errc::invalid_argument, "shared memory region '" + name + "' already in manager");
    if (regions_.size() >= kMaxSharedMemoryRegions)
      return fail(errc::limit_exceeded, "shared memory region '" + name +
                                            "': " + std::to_string(kMaxSharedMemoryRegions) +
                                            " regions are registered already");
    JITEMBED_ASSIGN_OR_RETURN(auto r, open(name));
    regions_.emplace(std::move(name), std::move(r));
    return {};
  }

  any_cuda_ipc_backend cuda_;
  mutable std::mutex mu_;
  std::map<std::string, region_ptr, std::less<>> regions_;
};

}  // namespace jitembed::server::detail
