// The system kind of shared-memory region, server side: a POSIX shared-memory object, read and written
// through its descriptor (region.hpp says what every kind does).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/server/shm/detail/region.hpp"

namespace jitembed::server::detail {

// A system region: `byte_size` bytes at `offset` into the POSIX shared-memory object `key`, held open by
// descriptor and accessed with pread/pwrite, not a mapping: an object truncated after registration then
// reads short (a clear error) where a mapping would raise SIGBUS in the server.
class system_shared_memory_region final : public shared_memory_region {
 public:
  ~system_shared_memory_region() override {
    if (fd_ >= 0) ::close(fd_);
  }

  // Opens `key` read-write and checks that the object covers offset + byte_size. Errors (invalid_argument,
  // naming the region and the key): not a '/name', no such object (or a symbolic link), byte_size 0, too small.
  static result<std::shared_ptr<const system_shared_memory_region>> open(std::string name, std::string key,
                                                                         std::uint64_t offset,
                                                                         std::uint64_t byte_size) {
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
    std::shared_ptr<system_shared_memory_region> r(
        new system_shared_memory_region(fd, std::move(name), std::move(key), offset, byte_size));
    struct stat st {};
    if (::fstat(fd, &st) != 0) return fail(errc::io_error, w + ": fstat failed: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return fail(errc::invalid_argument, w + ": '" + r->key_ + "' is not a regular object");
    if (static_cast<std::uint64_t>(st.st_size) < offset + byte_size)
      return fail(errc::invalid_argument, w + ": offset " + std::to_string(offset) + " + byte_size " +
                                              std::to_string(byte_size) + " is past the end of the " +
                                              std::to_string(st.st_size) + "-byte object '" + r->key_ + "'");
    return std::shared_ptr<const system_shared_memory_region>(std::move(r));
  }

  const std::string& key() const noexcept { return key_; }
  std::uint64_t offset() const noexcept { return offset_; }

  // Copies dst.size() bytes at `at` (into the region) into dst. Errors: as check_bounds; the object was
  // truncated below them since registration (invalid_argument); a read error (io_error).
  result<void> read(std::uint64_t at, std::span<std::byte> dst, std::string_view what) const override {
    JITEMBED_TRY(check_object(at, dst.size(), what));
    std::size_t done = 0;
    while (done < dst.size()) {
      const auto n = ::pread(fd_, dst.data() + done, dst.size() - done, static_cast<off_t>(offset_ + at + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        return fail(errc::io_error, std::string(what) + ": reading shared memory region '" + name() +
                                        "' failed: " + std::strerror(errno));
      if (n == 0) return truncated(at + done, dst.size() - done, what);
      done += static_cast<std::size_t>(n);
    }
    return {};
  }

  // Writes src at `at` (into the region). Errors: as read. Nothing is written outside the region.
  result<void> write(std::uint64_t at, bytes_view src, std::string_view what) const override {
    JITEMBED_TRY(check_object(at, src.size(), what));
    std::size_t done = 0;
    while (done < src.size()) {
      const auto n = ::pwrite(fd_, src.data() + done, src.size() - done, static_cast<off_t>(offset_ + at + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return fail(errc::io_error, std::string(what) + ": writing shared memory region '" + name() +
                                        "' failed: " + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
    return {};
  }

  // Triton's {"name", "key", "offset", "byte_size"}.
  shared_memory_status status() const override { return {name(), key_, offset_, {}, byte_size()}; }

 private:
  system_shared_memory_region(int fd, std::string name, std::string key, std::uint64_t offset, std::uint64_t byte_size)
      : shared_memory_region(shared_memory_kind::system, std::move(name), byte_size),
        fd_(fd),
        key_(std::move(key)),
        offset_(offset) {}

  // The bounds, then the object's current size: a region whose object shrank is an error, not SIGBUS.
  result<void> check_object(std::uint64_t at, std::uint64_t size, std::string_view what) const {
    JITEMBED_TRY(check_bounds(at, size, what));
    struct stat st {};
    if (::fstat(fd_, &st) != 0)
      return fail(errc::io_error, std::string(what) + ": fstat of shared memory region '" + name() +
                                      "' failed: " + std::strerror(errno));
    if (static_cast<std::uint64_t>(st.st_size) < offset_ + at + size) return truncated(at, size, what);
    return {};
  }
  result<void> truncated(std::uint64_t at, std::uint64_t size, std::string_view what) const {
    struct stat st {};
    const auto now = ::fstat(fd_, &st) == 0 ? std::to_string(st.st_size) : std::string("?");
    return fail(errc::invalid_argument, std::string(what) + ": shared memory region '" + name() + "': its object '" +
                                            key_ + "' is now " + now + " bytes, short of the " + std::to_string(size) +
                                            " bytes at " + std::to_string(offset_ + at) +
                                            " (truncated by its owner after registration)");
  }

  int fd_ = -1;
  std::string key_;
  std::uint64_t offset_ = 0;
};

}  // namespace jitembed::server::detail
