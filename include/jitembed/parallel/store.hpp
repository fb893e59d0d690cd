// Rendezvous key-value stores: ranks publish and wait for small values (addresses, NCCL unique ids).
// hash_store serves ranks that are threads of one process; file_store serves processes sharing a folder.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <unistd.h>

#include "jitembed/core/error.hpp"

namespace jitembed::parallel {

// A store: set() publishes a value; get() waits until the key exists or the timeout passes.
class store {
 public:
  virtual ~store() = default;
  virtual result<void> set(std::string_view key, std::span<const std::byte> value) = 0;
  virtual result<std::vector<std::byte>> get(std::string_view key, std::chrono::milliseconds timeout) = 0;
  // Non-blocking: whether the key exists now.
  virtual result<bool> check(std::string_view key) = 0;

  result<void> set(std::string_view key, std::string_view value) {
    return set(key, std::span<const std::byte>(reinterpret_cast<const std::byte*>(value.data()), value.size()));
  }
};

// In-process store (ranks as threads); shared through a shared_ptr. Movable (its table lives behind a
// pointer); a moved-from store may only be destroyed or assigned to.
class hash_store final : public store {
 public:
  using store::set;
  result<void> set(std::string_view key, std::span<const std::byte> value) override {
    {
      std::lock_guard lock(s_->mu);
      s_->map[std::string(key)] = std::vector<std::byte>(value.begin(), value.end());
    }
    s_->cv.notify_all();
    return {};
  }
  result<std::vector<std::byte>> get(std::string_view key, std::chrono::milliseconds timeout) override {
    std::unique_lock lock(s_->mu);
    const std::string k(key);
    if (!s_->cv.wait_for(lock, timeout, [&] { return s_->map.count(k) != 0; })) {
      return fail(errc::timeout, "store: key '" + k + "' not set within " + std::to_string(timeout.count()) + " ms");
    }
    return s_->map[k];
  }
  result<bool> check(std::string_view key) override {
    std::lock_guard lock(s_->mu);
    return s_->map.count(std::string(key)) != 0;
  }

 private:
  struct state {
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::string, std::vector<std::byte>, std::less<>> map;
  };
  std::unique_ptr<state> s_ = std::make_unique<state>();
};

// A folder shared by the ranks (a local or network file system). A value is written to a temporary file
// and renamed into place, so a reader never sees half a value. Keys may contain '/', which is escaped.
class file_store final : public store {
 public:
  using store::set;
  // Creates `dir` (and its parents) if missing; io_error when it cannot. get() polls every `poll`.
  static result<file_store> open(std::filesystem::path dir,
                                 std::chrono::milliseconds poll = std::chrono::milliseconds(2)) {
    if (dir.empty()) return fail(errc::invalid_argument, "file_store: empty folder path");
    if (poll.count() < 0) {
      return fail(errc::invalid_argument, "file_store: poll interval " + std::to_string(poll.count()) + " ms");
    }
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return fail(errc::io_error, "file_store: cannot create " + dir.string() + ": " + ec.message());
    if (!std::filesystem::is_directory(dir, ec)) {
      return fail(errc::io_error, "file_store: " + dir.string() + " is not a folder");
    }
    return file_store(std::move(dir), poll);
  }

  result<void> set(std::string_view key, std::span<const std::byte> value) override {
    const auto final_path = path_of(key);
    const auto tmp = final_path.string() + ".tmp." + std::to_string(::getpid()) + "." +
                     std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) return fail(errc::io_error, "file_store: cannot write " + tmp);
      out.write(reinterpret_cast<const char*>(value.data()), static_cast<std::streamsize>(value.size()));
      if (!out) return fail(errc::io_error, "file_store: short write to " + tmp);
    }
    std::error_code ec;
    std::filesystem::rename(tmp, final_path, ec);
    if (ec) return fail(errc::io_error, "file_store: rename to " + final_path.string() + ": " + ec.message());
    return {};
  }

  result<std::vector<std::byte>> get(std::string_view key, std::chrono::milliseconds timeout) override {
    const auto p = path_of(key);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::ifstream in(p, std::ios::binary);
      if (in) {
        std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::vector<std::byte> v(raw.size());
        if (!raw.empty()) std::memcpy(v.data(), raw.data(), raw.size());
        return v;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return fail(errc::timeout, "store: key '" + std::string(key) + "' not set within " +
                                       std::to_string(timeout.count()) + " ms (" + p.string() + ")");
      }
      std::this_thread::sleep_for(poll_);
    }
  }

  result<bool> check(std::string_view key) override {
    std::error_code ec;
    return std::filesystem::exists(path_of(key), ec);
  }

  const std::filesystem::path& dir() const noexcept { return dir_; }

 private:
  std::filesystem::path path_of(std::string_view key) const {
    std::string name;
    name.reserve(key.size());
    for (char c : key) {
      if (c == '/' || c == '%' || c == '\\') {
        static constexpr char kHex[] = "0123456789abcdef";
        name += '%';
        name += kHex[(static_cast<unsigned char>(c) >> 4) & 0xf];
        name += kHex[static_cast<unsigned char>(c) & 0xf];
      } else {
        name += c;
      }
    }
    return dir_ / name;
  }

  file_store(std::filesystem::path dir, std::chrono::milliseconds poll) : dir_(std::move(dir)), poll_(poll) {}

  std::filesystem::path dir_;
  std::chrono::milliseconds poll_;
};

// Prefixes every key ("split/3/" + key), so sub-groups and repeated rendezvous do not collide.
class prefix_store final : public store {
 public:
  using store::set;
  prefix_store(std::shared_ptr<store> base, std::string prefix) : base_(std::move(base)), prefix_(std::move(prefix)) {}
  result<void> set(std::string_view key, std::span<const std::byte> value) override {
    return base_->set(prefix_ + std::string(key), value);
  }
  result<std::vector<std::byte>> get(std::string_view key, std::chrono::milliseconds timeout) override {
    return base_->get(prefix_ + std::string(key), timeout);
  }
  result<bool> check(std::string_view key) override { return base_->check(prefix_ + std::string(key)); }

 private:
  std::shared_ptr<store> base_;
  std::string prefix_;
};

}  // namespace jitembed::parallel
