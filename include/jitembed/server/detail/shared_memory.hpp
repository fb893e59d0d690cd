// Triton's system shared-memory extension, server side: the registry of regions that clients register
// (POSIX shared-memory objects), inputs read from them and outputs written into them. Protocol-neutral:
// the HTTP routes (service_core.hpp) and a gRPC front end call the same registry, and the pipeline
// (pipeline.hpp) resolves every request's regions whichever front end decoded it.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
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
#include "jitembed/core/error.hpp"
#include "jitembed/net/kserve/bytes_elements.hpp"
#include "jitembed/net/kserve/datatype.hpp"
#include "jitembed/net/kserve/decode.hpp"
#include "jitembed/net/kserve/limits.hpp"
#include "jitembed/net/kserve/message.hpp"
#include "jitembed/net/kserve/shared_memory.hpp"

namespace jitembed::server::detail {

// At most this many regions are registered at once (each holds a descriptor).
inline constexpr std::size_t kMaxSharedMemoryRegions = 1024;

// One registered region: `byte_size` bytes at `offset` into the POSIX shared-memory object `key`, held
// open by descriptor. Reads and writes go through pread/pwrite on that descriptor, not through a
// mapping: an object its owner truncates after registration then reads short (a clear error) where a
// mapping would raise SIGBUS in the server. Before each access the object's size is checked again
// (fstat) so that the error says what happened. The region stays open while anyone holds it (a request
// in flight), even after it is unregistered.
class shared_memory_region {
 public:
  shared_memory_region(const shared_memory_region&) = delete;
  shared_memory_region& operator=(const shared_memory_region&) = delete;
  ~shared_memory_region() {
    if (fd_ >= 0) ::close(fd_);
  }

  // Opens `key` (shm_open O_RDWR, not following a symbolic link) and checks that the object covers
  // offset + byte_size. Errors (invalid_argument, naming the region and the key): a key that is not a
  // shared-memory object name ('/name': no other '/', no NUL), an object that does not exist, is a symbolic
  // link or cannot be opened read-write, byte_size 0, an object too small.
  static result<std::shared_ptr<const shared_memory_region>> open(std::string name, std::string key,
                                                                  std::uint64_t offset, std::uint64_t byte_size) {
    const std::string w = "shared memory region '" + name + "'";
    std::string_view stem = key;
    while (stem.starts_with('/')) stem.remove_prefix(1);
    if (stem.empty() || stem == "." || stem == ".." ||
        stem.find_first_of(std::string_view("/\0", 2)) != std::string_view::npos || stem.size() > 255)
      return fail(errc::invalid_argument, w + ": key '" + key + "' is not a shared memory object name ('/name')");
    if (byte_size == 0) return fail(errc::invalid_argument, w + ": byte_size is 0");
    if (offset > ~std::uint64_t{0} - byte_size)
      return fail(errc::invalid_argument, w + ": offset + byte_size overflows");
    // O_NOFOLLOW: a symbolic link planted in the shared-memory folder must not lead the server's writes to
    // another file (glibc adds it too; said here so it does not depend on that).
    const int fd = ::shm_open(key.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
    if (fd < 0) {
      const int e = errno;
      return fail(errc::invalid_argument, w + ": cannot open shared memory object '" + key + "': " + std::strerror(e));
    }
    std::shared_ptr<shared_memory_region> r(
        new shared_memory_region(fd, std::move(name), std::move(key), offset, byte_size));
    struct stat st {};
    if (::fstat(fd, &st) != 0) return fail(errc::io_error, w + ": fstat failed: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return fail(errc::invalid_argument, w + ": '" + r->key_ + "' is not a regular object");
    if (static_cast<std::uint64_t>(st.st_size) < offset + byte_size)
      return fail(errc::invalid_argument, w + ": offset " + std::to_string(offset) + " + byte_size " +
                                              std::to_string(byte_size) + " is past the end of the " +
                                              std::to_string(st.st_size) + "-byte object '" + r->key_ + "'");
    return std::shared_ptr<const shared_memory_region>(std::move(r));
  }

  const std::string& name() const noexcept { return name_; }
  const std::string& key() const noexcept { return key_; }
  std::uint64_t offset() const noexcept { return offset_; }
  std::uint64_t byte_size() const noexcept { return byte_size_; }

  // Whether `size` bytes at `at` (into the region) lie inside it. Errors (invalid_argument, naming
  // `what` and the region): `at` past the end, the bytes running past the end.
  result<void> check_bounds(std::uint64_t at, std::uint64_t size, std::string_view what) const {
    if (at > byte_size_)
      return fail(errc::invalid_argument, std::string(what) + ": shared_memory_offset " + std::to_string(at) +
                                              " is past the end of the " + std::to_string(byte_size_) +
                                              "-byte shared memory region '" + name_ + "'");
    if (size > byte_size_ - at)
      return fail(errc::invalid_argument, std::string(what) + ": " + std::to_string(size) +
                                              " bytes at shared_memory_offset " + std::to_string(at) +
                                              " run past the end of the " + std::to_string(byte_size_) +
                                              "-byte shared memory region '" + name_ + "'");
    return {};
  }

  // Copies dst.size() bytes at `at` (into the region) into dst. Errors: as check_bounds; the object was
  // truncated below them since registration (invalid_argument); a read error (io_error).
  result<void> read(std::uint64_t at, std::span<std::byte> dst, std::string_view what) const {
    JITEMBED_TRY(check_object(at, dst.size(), what));
    std::size_t done = 0;
    while (done < dst.size()) {
      const auto n = ::pread(fd_, dst.data() + done, dst.size() - done, static_cast<off_t>(offset_ + at + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        return fail(errc::io_error, std::string(what) + ": reading shared memory region '" + name_ +
                                        "' failed: " + std::strerror(errno));
      if (n == 0) return truncated(at + done, dst.size() - done, what);
      done += static_cast<std::size_t>(n);
    }
    return {};
  }

  // Writes src at `at` (into the region). Errors: as read. Nothing is written outside the region.
  result<void> write(std::uint64_t at, bytes_view src, std::string_view what) const {
    JITEMBED_TRY(check_object(at, src.size(), what));
    std::size_t done = 0;
    while (done < src.size()) {
      const auto n = ::pwrite(fd_, src.data() + done, src.size() - done, static_cast<off_t>(offset_ + at + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return fail(errc::io_error, std::string(what) + ": writing shared memory region '" + name_ +
                                        "' failed: " + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
    return {};
  }

 private:
  shared_memory_region(int fd, std::string name, std::string key, std::uint64_t offset, std::uint64_t byte_size)
      : fd_(fd), name_(std::move(name)), key_(std::move(key)), offset_(offset), byte_size_(byte_size) {}

  // The bounds, then the object's current size: a region whose object shrank is an error, not SIGBUS.
  result<void> check_object(std::uint64_t at, std::uint64_t size, std::string_view what) const {
    JITEMBED_TRY(check_bounds(at, size, what));
    struct stat st {};
    if (::fstat(fd_, &st) != 0)
      return fail(errc::io_error, std::string(what) + ": fstat of shared memory region '" + name_ +
                                      "' failed: " + std::strerror(errno));
    if (static_cast<std::uint64_t>(st.st_size) < offset_ + at + size) return truncated(at, size, what);
    return {};
  }
  result<void> truncated(std::uint64_t at, std::uint64_t size, std::string_view what) const {
    struct stat st {};
    const auto now = ::fstat(fd_, &st) == 0 ? std::to_string(st.st_size) : std::string("?");
    return fail(errc::invalid_argument, std::string(what) + ": shared memory region '" + name_ + "': its object '" +
                                            key_ + "' is now " + now + " bytes, short of the " + std::to_string(size) +
                                            " bytes at " + std::to_string(offset_ + at) +
                                            " (truncated by its owner after registration)");
  }

  int fd_ = -1;
  std::string name_;
  std::string key_;
  std::uint64_t offset_ = 0;
  std::uint64_t byte_size_ = 0;
};

// The registered regions by name. Thread-safe.
class shared_memory_registry {
 public:
  using region_ptr = std::shared_ptr<const shared_memory_region>;

  // Registers `name` (shared_memory_region::open). Errors: invalid_argument (Triton's "shared memory
  // region 'x' already in manager"; those of open), limit_exceeded (kMaxSharedMemoryRegions).
  result<void> register_region(std::string name, std::string key, std::uint64_t offset, std::uint64_t byte_size) {
    if (name.empty()) return fail(errc::invalid_argument, "shared memory region name is empty");
    std::lock_guard lock(mu_);
    if (regions_.contains(name))
      return fail(errc::invalid_argument, "shared memory region '" + name + "' already in manager");
    if (regions_.size() >= kMaxSharedMemoryRegions)
      return fail(errc::limit_exceeded, "shared memory region '" + name +
                                            "': " + std::to_string(kMaxSharedMemoryRegions) +
                                            " regions are registered already");
    JITEMBED_ASSIGN_OR_RETURN(auto r, shared_memory_region::open(name, std::move(key), offset, byte_size));
    regions_.emplace(std::move(name), std::move(r));
    return {};
  }

  // Unregisters `name` (a name not registered is no error, as in Triton). A request that holds the region
  // keeps it open until it finishes.
  void unregister_region(std::string_view name) {
    region_ptr dropped;  // closed outside the lock
    std::lock_guard lock(mu_);
    if (auto it = regions_.find(name); it != regions_.end()) {
      dropped = std::move(it->second);
      regions_.erase(it);
    }
  }
  void unregister_all() {
    std::map<std::string, region_ptr, std::less<>> dropped;
    std::lock_guard lock(mu_);
    dropped.swap(regions_);
  }

  // The region `name`. Errors: invalid_argument "<what>: shared memory region 'x' is not registered".
  result<region_ptr> find(std::string_view name, std::string_view what) const {
    std::lock_guard lock(mu_);
    if (auto it = regions_.find(name); it != regions_.end()) return it->second;
    return fail(errc::invalid_argument,
                std::string(what) + ": shared memory region '" + std::string(name) + "' is not registered");
  }

  // Triton's status JSON: [{"name", "key", "offset", "byte_size"}] of `name`, or of every region when
  // `name` is empty. Errors: not_found (404) for a name not registered.
  result<nlohmann::ordered_json> status(std::string_view name = {}) const {
    auto entry = [](const shared_memory_region& r) {
      return nlohmann::ordered_json{
          {"name", r.name()}, {"key", r.key()}, {"offset", r.offset()}, {"byte_size", r.byte_size()}};
    };
    auto arr = nlohmann::ordered_json::array();
    std::lock_guard lock(mu_);
    if (name.empty()) {
      for (const auto& [n, r] : regions_) arr.push_back(entry(*r));
      return arr;
    }
    auto it = regions_.find(name);
    if (it == regions_.end())
      return fail(errc::not_found, "Unable to find system shared memory region: '" + std::string(name) + "'");
    arr.push_back(entry(*it->second));
    return arr;
  }

  std::size_t size() const {
    std::lock_guard lock(mu_);
    return regions_.size();
  }

 private:
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
