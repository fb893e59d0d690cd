// Triton's system and CUDA shared-memory extensions, server side: the registry of regions that clients
// register (POSIX shared-memory objects: shared_memory_region.hpp; CUDA IPC handles: cuda_shared_memory.hpp),
// inputs read from them and outputs written into them. Protocol-neutral: the HTTP routes (service_core.hpp)
// and the gRPC front end call the same registry, and the pipeline (pipeline.hpp) resolves every request's
// regions whichever front end decoded it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/cuda_ipc.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/net/kserve/bytes_elements.hpp"
#include "jitembed/net/kserve/datatype.hpp"
#include "jitembed/net/kserve/decode.hpp"
#include "jitembed/net/kserve/limits.hpp"
#include "jitembed/net/kserve/message.hpp"
#include "jitembed/net/kserve/shared_memory.hpp"
#include "jitembed/server/detail/cuda_shared_memory.hpp"
#include "jitembed/server/detail/shared_memory_region.hpp"

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
    for (auto it = regions_.begin(); it != regions_.end();) {
      if (it->second->kind() != kind) {
        ++it;
        continue;
      }
      dropped.push_back(std::move(it->second));
      it = regions_.erase(it);
    }
  }

  // The region `name`, of either kind. Errors: invalid_argument "<what>: shared memory region 'x' is not
  // registered".
  result<region_ptr> find(std::string_view name, std::string_view what) const {
    std::lock_guard lock(mu_);
    if (auto it = regions_.find(name); it != regions_.end()) return it->second;
    return fail(errc::invalid_argument,
                std::string(what) + ": shared memory region '" + std::string(name) + "' is not registered");
  }

  // Triton's status JSON of the regions of `kind`: [{"name", "key", "offset", "byte_size"}] (system) or
  // [{"name", "device_id", "byte_size"}] (CUDA) of `name`, or of every region of `kind` when `name` is empty.
  // Errors: not_found (404) for a name no region of `kind` holds.
  result<nlohmann::ordered_json> status(std::string_view name = {},
                                        shared_memory_kind kind = shared_memory_kind::system) const {
    auto arr = nlohmann::ordered_json::array();
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

// Whether the request names a region on an input or a requested output.
inline bool uses_shared_memory(const net::kserve::infer_request& req) {
  for (const auto& t : req.inputs)
    if (net::kserve::has_shared_memory(t.parameters)) return true;
  for (const auto& o : req.outputs)
    if (net::kserve::has_shared_memory(o.parameters)) return true;
  return false;
}

// Gives every input of `req` that names a region its bytes: a copy of shared_memory_byte_size bytes at
// shared_memory_offset into the region (a copy, so that the region's owner changing or truncating it
// later cannot reach the request). Errors (invalid_argument unless said, each naming the input and the
// region): a region not registered, offset or bytes past the region's end, byte_size other than the
// tensor's (fixed-size datatypes), BYTES elements that do not match the shape, the object truncated since
// registration; limit_exceeded: the inputs' byte sizes together over lim.max_body_bytes (what a body may
// carry), checked before anything is read.
inline result<void> read_shared_memory_inputs(const shared_memory_registry& shm, net::kserve::infer_request& req,
                                              const net::kserve::protocol_limits& lim) {
  std::uint64_t total = 0;
  for (const auto& t : req.inputs) {
    JITEMBED_ASSIGN_OR_RETURN(const auto ref,
                              net::kserve::shared_memory_parameters(t.parameters, "input '" + t.name + "'"));
    if (!ref) continue;
    total = ref->byte_size > ~std::uint64_t{0} - total ? ~std::uint64_t{0} : total + ref->byte_size;  // saturates
    if (total > lim.max_body_bytes)
      return fail(errc::limit_exceeded, "input '" + t.name + "': shared_memory_byte_size " +
                                            std::to_string(ref->byte_size) + " brings the inputs in shared memory to " +
                                            std::to_string(total) + " bytes > max_body_bytes " +
                                            std::to_string(lim.max_body_bytes));
  }
  for (auto& t : req.inputs) {
    const std::string w = "input '" + t.name + "'";
    JITEMBED_ASSIGN_OR_RETURN(const auto ref, net::kserve::shared_memory_parameters(t.parameters, w));
    if (!ref) continue;
    JITEMBED_ASSIGN_OR_RETURN(const auto region, shm.find(ref->region, w));
    JITEMBED_TRY(region->check_bounds(ref->offset, ref->byte_size, w));
    if (t.type != net::kserve::datatype::bytes) {
      JITEMBED_ASSIGN_OR_RETURN(const auto numel, checked_numel(t.shape));
      const std::uint64_t es = net::kserve::element_size(t.type);
      if (numel > ~std::uint64_t{0} / es || numel * es != ref->byte_size)
        return fail(errc::invalid_argument, w + ": shared_memory_byte_size " + std::to_string(ref->byte_size) +
                                                " does not match shape " + net::kserve::detail::shape_string(t.shape) +
                                                " of " + std::string(net::kserve::to_string(t.type)));
    }
    auto buf = std::make_shared<byte_buffer>(static_cast<std::size_t>(ref->byte_size));
    JITEMBED_TRY(region->read(ref->offset, std::span<std::byte>(buf->data(), buf->size()), w));
    t.data = bytes_view(buf->data(), buf->size());
    t.storage = std::move(buf);
    t.parameters.erase("shared_memory_region");
    t.parameters.erase("shared_memory_byte_size");
    t.parameters.erase("shared_memory_offset");
    if (t.parameters.empty()) t.parameters = net::kserve::json();
    if (t.type == net::kserve::datatype::bytes) {
      // The elements must be exactly the shape's, as the decoder checks a body's binary section.
      JITEMBED_ASSIGN_OR_RETURN(const auto numel, checked_numel(t.shape));
      const std::string ws = w + " (shared memory region '" + ref->region + "')";
      const auto shape = net::kserve::detail::shape_string(t.shape);
      auto n = net::kserve::for_each_bytes_element(
          t.data, [](std::string_view) {}, numel);
      if (!n && n.code() == errc::limit_exceeded)
        return fail(errc::invalid_argument,
                    ws + ": holds more than the " + std::to_string(numel) + " BYTES elements of shape " + shape);
      if (!n) return fail(n.code(), ws + ": " + n.error().message);
      if (*n != numel)
        return fail(errc::invalid_argument, ws + ": holds " + std::to_string(*n) + " BYTES elements, shape " + shape +
                                                " needs " + std::to_string(numel));
    }
  }
  return {};
}

// A requested output that goes to a region, the region held from the request's start to its answer.
struct shared_memory_output {
  std::string name;
  net::kserve::shared_memory_ref ref;
  shared_memory_registry::region_ptr region;
};

// The requested outputs that name a region, their regions looked up and held. Errors (invalid_argument,
// naming the output and the region): a region not registered; shared_memory_offset / _byte_size past
// the region's end.
inline result<std::vector<shared_memory_output>> hold_shared_memory_outputs(
    const shared_memory_registry& shm, const std::vector<net::kserve::requested_output>& outputs) {
  std::vector<shared_memory_output> held;
  for (const auto& o : outputs) {
    const std::string w = "output '" + o.name + "'";
    JITEMBED_ASSIGN_OR_RETURN(auto ref, net::kserve::shared_memory_parameters(o.parameters, w));
    if (!ref) continue;
    JITEMBED_ASSIGN_OR_RETURN(auto region, shm.find(ref->region, w));
    JITEMBED_TRY(region->check_bounds(ref->offset, ref->byte_size, w));
    held.push_back({o.name, std::move(*ref), std::move(region)});
  }
  return held;
}

// The response with each output of `outputs` written into its region and replaced by its shared_memory_*
// parameters (no data; net::kserve::shared_memory_output): what the HTTP and gRPC encoders then write.
// Every output is checked before any is written. Errors (invalid_argument, naming the output and the
// region): an output larger than its shared_memory_byte_size; the object truncated since registration.
inline result<std::shared_ptr<const net::kserve::infer_response>> write_shared_memory_outputs(
    std::shared_ptr<const net::kserve::infer_response> resp, const std::vector<shared_memory_output>& outputs) {
  if (outputs.empty()) return resp;
  auto find_output = [&](std::string_view name) -> const shared_memory_output* {
    for (const auto& o : outputs)
      if (o.name == name) return &o;
    return nullptr;
  };
  for (const auto& t : resp->outputs) {
    const auto* o = find_output(t.name);
    if (o && t.data.size() > o->ref.byte_size)
      return fail(errc::invalid_argument, "output '" + t.name + "': " + std::to_string(t.data.size()) +
                                              " bytes do not fit shared_memory_byte_size " +
                                              std::to_string(o->ref.byte_size) + " of shared memory region '" +
                                              o->ref.region + "'");
  }
  auto out = std::make_shared<net::kserve::infer_response>(*resp);
  for (auto& t : out->outputs) {
    const auto* o = find_output(t.name);
    if (!o) continue;
    JITEMBED_TRY(o->region->write(o->ref.offset, t.data, "output '" + t.name + "'"));
    t = net::kserve::shared_memory_output(t, o->ref, t.data.size());
  }
  return std::shared_ptr<const net::kserve::infer_response>(std::move(out));
}

// The same for a front end that did not hold the regions: looks them up in `shm` now.
inline result<std::shared_ptr<const net::kserve::infer_response>> write_shared_memory_outputs(
    const shared_memory_registry& shm, std::shared_ptr<const net::kserve::infer_response> resp,
    const std::vector<net::kserve::requested_output>& outputs) {
  JITEMBED_ASSIGN_OR_RETURN(auto held, hold_shared_memory_outputs(shm, outputs));
  return write_shared_memory_outputs(std::move(resp), held);
}

}  // namespace jitembed::server::detail
