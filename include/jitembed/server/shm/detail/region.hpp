// The kind-neutral shared_memory_region that the pipeline reads inputs from and writes outputs to, bounds checked
// here for every kind (system_region.hpp, cuda_region.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::server::detail {

// Which extension registered a region: one namespace of names holds both, as in Triton.
enum class shared_memory_kind : std::uint8_t { system, cuda };

// A region's entry in its extension's status (Triton's fields, in order): key and offset for a system
// region, device_id for a CUDA one. A typed answer (server/detail/answers.hpp): both fronts render it.
struct shared_memory_status {
  std::string name;
  std::optional<std::string> key;
  std::optional<std::uint64_t> offset;
  std::optional<std::int64_t> device_id;
  std::uint64_t byte_size = 0;
  template <class V>
  void fields(V&& v) const {
    v("name", name), v("key", key), v("offset", offset), v("device_id", device_id), v("byte_size", byte_size);
  }
};

// A registered region of either kind: byte_size() bytes that requests read inputs from and write outputs
// to. Thread-safe (const). The region stays open while anyone holds it (a request in flight), even after
// it is unregistered; its destructor releases what it holds.
class shared_memory_region {
 public:
  shared_memory_region(const shared_memory_region&) = delete;
  shared_memory_region& operator=(const shared_memory_region&) = delete;
  virtual ~shared_memory_region() = default;

  shared_memory_kind kind() const noexcept { return kind_; }
  const std::string& name() const noexcept { return name_; }
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

  // Copies dst.size() bytes at `at` (into the region) into dst. Errors: as check_bounds; the kind's own
  // (each naming `what` and the region).
  virtual result<void> read(std::uint64_t at, std::span<std::byte> dst, std::string_view what) const = 0;
  // Writes src at `at` (into the region); nothing is written outside it. Errors: as read.
  virtual result<void> write(std::uint64_t at, bytes_view src, std::string_view what) const = 0;
  // The region's entry in its extension's status.
  virtual shared_memory_status status() const = 0;

 protected:
  shared_memory_region(shared_memory_kind kind, std::string name, std::uint64_t byte_size)
      : kind_(kind), name_(std::move(name)), byte_size_(byte_size) {}

 private:
  shared_memory_kind kind_;
  std::string name_;
  std::uint64_t byte_size_ = 0;
};

}  // namespace jitembed::server::detail
