// The client's shared-memory objects (one per same-host endpoint) and their spans, one per attempt. No mapping:
// pread/pwrite, so a full /dev/shm is an error (ENOSPC: the socket instead) rather than a SIGBUS.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/net/kserve/datatype.hpp"

namespace jitembed::client::detail {

// First-fit allocator of aligned spans of [0, capacity), with a quarantine: a span whose attempt was
// abandoned (the server may still write into it) is reused only after a given time.
class shm_spans {
 public:
  static constexpr std::size_t kAlign = 64;

  explicit shm_spans(std::size_t capacity) : capacity_(capacity) {
    if (capacity_) free_.emplace(0, capacity_);
  }

  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t in_use() const noexcept { return used_; }
  std::size_t quarantined() const noexcept { return quarantine_.size(); }
  static std::size_t round(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

  // The offset of a free span of `size` bytes (rounded up to kAlign), or nullopt when none is free (spans
  // whose quarantine ended by `now` are free again first).
  std::optional<std::size_t> allocate(std::size_t size, std::chrono::steady_clock::time_point now) {
    reclaim(now);
    size = round(size);
    if (size == 0 || size > capacity_) return std::nullopt;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < size) continue;
      const std::size_t off = it->first, left = it->second - size;
      free_.erase(it);
      if (left) free_.emplace(off + size, left);
      used_ += size;
      return off;
    }
    return std::nullopt;
  }

  // Gives the span back now (the server answered: it writes nothing more into it).
  void release(std::size_t off, std::size_t size) {
    size = round(size);
    used_ -= std::min(used_, size);
    auto it = free_.emplace(off, size).first;
    if (auto next = std::next(it); next != free_.end() && it->first + it->second == next->first) {  // merge right
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {  // merge left
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }

  // Gives the span back at `until` (an abandoned attempt: the server may still write into it until then).
  void quarantine(std::size_t off, std::size_t size, std::chrono::steady_clock::time_point until) {
    quarantine_.push_back({off, size, until});
  }

  void reclaim(std::chrono::steady_clock::time_point now) {
    for (const auto& h : quarantine_)
      if (h.until <= now) release(h.off, h.size);
    std::erase_if(quarantine_, [&](const held& h) { return h.until <= now; });
  }

 private:
  struct held {
    std::size_t off, size;
    std::chrono::steady_clock::time_point until;
  };
  std::size_t capacity_;
  std::size_t used_ = 0;
  std::map<std::size_t, std::size_t> free_;  // offset -> size, adjacent spans merged
  std::vector<held> quarantine_;
};

// A POSIX shared-memory object the client created (mode 0600), held open by descriptor. The name is
// unlinked once the server registered it (the server holds its own descriptor or mapping), so a client that
// dies leaves nothing behind in /dev/shm.
class shm_object {
 public:
  shm_object(const shm_object&) = delete;
  shm_object& operator=(const shm_object&) = delete;
  ~shm_object() {
    unlink();
    if (fd_ >= 0) ::close(fd_);
  }

  // A new object of `bytes` bytes (sparse: pages are taken when written), named
  // /jitembed-<pid>-<sequence>-<random>. io_error when shm_open or ftruncate fails.
  static result<std::unique_ptr<shm_object>> create(std::size_t bytes) {
    static std::atomic<std::uint64_t> seq{0};
    std::random_device rd;
    char tag[16];
    std::snprintf(tag, sizeof tag, "%08x", static_cast<unsigned>(rd()));
    std::string key = "/jitembed-" + std::to_string(::getpid()) + "-" + std::to_string(seq.fetch_add(1)) + "-" + tag;
    const int fd = ::shm_open(key.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      const int e = errno;
      return fail(errc::io_error, "shared memory: cannot create '" + key + "': " + std::strerror(e));
    }
    std::unique_ptr<shm_object> o(new shm_object(fd, std::move(key), bytes));
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int e = errno;
      return fail(errc::io_error, "shared memory: cannot size '" + o->key_ + "' to " + std::to_string(bytes) +
                                      " bytes: " + std::strerror(e));
    }
    return o;
  }

  const std::string& key() const noexcept { return key_; }
  std::size_t size() const noexcept { return size_; }

  // Removes the name (the object lives on while a descriptor or mapping holds it). Idempotent.
  void unlink() {
    if (linked_) ::shm_unlink(key_.c_str());
    linked_ = false;
  }

  // Writes `data` at `off`. io_error on a short write (ENOSPC: /dev/shm is full).
  result<void> write(std::size_t off, std::span<const std::byte> data) const {
    return transfer(off, data.size(), "write", ENOSPC, [&](std::size_t done) {
      return ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(off + done));
    });
  }

  // Reads `out.size()` bytes at `off`.
  result<void> read(std::size_t off, std::span<std::byte> out) const {
    return transfer(off, out.size(), "read", EIO, [&](std::size_t done) {
      return ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(off + done));
    });
  }

 private:
  // op(done) until `n` bytes moved (EINTR: again); one that moves nothing fails with `stop_errno`.
  template <class Op>
  result<void> transfer(std::size_t off, std::size_t n, const char* what, int stop_errno, Op op) const {
    if (off > size_ || n > size_ - off)
      return fail(errc::invalid_argument, std::string("shared memory: ") + what + " past the end");
    for (std::size_t done = 0; done < n;) {
      const auto k = op(done);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        const int e = k < 0 ? errno : stop_errno;
        return fail(errc::io_error, "shared memory '" + key_ + "': " + what + " failed: " + std::strerror(e));
      }
      done += static_cast<std::size_t>(k);
    }
    return {};
  }

  shm_object(int fd, std::string key, std::size_t size) : fd_(fd), key_(std::move(key)), size_(size) {}
  int fd_ = -1;
  std::string key_;
  std::size_t size_ = 0;
  bool linked_ = true;
};

// The outcome of a region's register or unregister call: done, refused by the server (it answered: not
// again on this endpoint), or not answered (a transport error: tried again later).
struct shm_call_result {
  bool ok = false;
  bool answered = false;
  std::string message;
};

// One endpoint's registered object: the region name the server knows it by, and its spans.
struct shm_arena {
  std::unique_ptr<shm_object> object;
  std::string region;
  shm_spans spans;
  shm_arena(std::unique_ptr<shm_object> o, std::string r)
      : object(std::move(o)), region(std::move(r)), spans(object->size()) {}
};

// An endpoint's shared-memory state.
enum class shm_status {
  off,          // not the same host, or disabled
  pending,      // same host: the watcher registers a region (requests use the socket meanwhile)
  ready,        // registered: requests whose outputs are known use it
  unavailable,  // the server could not take it (another host or container, no extension): the socket only
};

// One output of a model as its answers showed it: fixed bytes per row.
struct shm_output_layout {
  std::string name;
  std::size_t row_bytes = 0;
};

// What a model's answers showed about its outputs (in answer order).
struct shm_model_layout {
  std::vector<shm_output_layout> outputs;
  bool variable = false;  // an output of variable size (BYTES, or larger than a previous answer): no shm
};

// An attempt's span: the input rows at `offset`, then each output's room.
struct shm_use {
  std::shared_ptr<shm_arena> arena;
  std::size_t offset = 0, size = 0;
  std::size_t input_bytes = 0;
  std::vector<std::pair<std::string, std::pair<std::size_t, std::size_t>>> outputs;  // name -> (offset, bytes)
  bool answered = false;  // the server answered the attempt: the span is free at once

  const std::pair<std::size_t, std::size_t>* output(std::string_view name) const {
    for (const auto& [n, span] : outputs)
      if (n == name) return &span;
    return nullptr;
  }
};

}  // namespace jitembed::client::detail
