// POSIX file helpers of the format: a read-only memory mapping (RAII, shared as a keep_alive) and
// writev of gathered pieces with partial-write and IOV_MAX handling.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::format::detail {

inline error_info io_fail(const std::string& what, const std::string& path) {
  return fail(errc::io_error, what + " '" + path + "': " + std::strerror(errno));
}

// A whole file mapped read-only. Empty files map to an empty span (no mmap).
class mapped_file {
 public:
  static result<std::shared_ptr<const mapped_file>> open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_fail("cannot open", path);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      auto e = io_fail("cannot stat", path);
      ::close(fd);
      return e;
    }
    const auto size = static_cast<std::size_t>(st.st_size);
    void* p = nullptr;
    if (size > 0) {
      p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        auto e = io_fail("cannot mmap", path);
        ::close(fd);
        return e;
      }
    }
    ::close(fd);
    return std::shared_ptr<const mapped_file>(new mapped_file(static_cast<const std::byte*>(p), size));
  }

  ~mapped_file() {
    if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  bytes_view bytes() const noexcept { return {data_, size_}; }

 private:
  mapped_file(const std::byte* d, std::size_t n) : data_(d), size_(n) {}
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Writes every piece, in order, retrying partial writes and EINTR.
inline result<void> write_all(int fd, const std::vector<bytes_view>& pieces, const std::string& path) {
  std::vector<iovec> iov;
  iov.reserve(std::min<std::size_t>(pieces.size(), IOV_MAX));
  std::size_t i = 0;
  std::size_t skip = 0;  // bytes of pieces[i] already written
  while (i < pieces.size()) {
    iov.clear();
    for (std::size_t k = i; k < pieces.size() && iov.size() < IOV_MAX; ++k) {
      const std::size_t off = k == i ? skip : 0;
      if (pieces[k].size() > off)
        iov.push_back({const_cast<std::byte*>(pieces[k].data()) + off, pieces[k].size() - off});
    }
    if (iov.empty()) break;
    const ssize_t n = ::writev(fd, iov.data(), static_cast<int>(iov.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_fail("cannot write", path);
    }
    auto left = static_cast<std::size_t>(n);
    while (i < pieces.size() && left >= pieces[i].size() - skip) {
      left -= pieces[i].size() - skip;
      skip = 0;
      ++i;
    }
    skip += left;
  }
  return {};
}

}  // namespace jitembed::format::detail
