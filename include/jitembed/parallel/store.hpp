// Rendezvous key-value stores: ranks publish and wait for small values (addresses, NCCL unique ids).
// hash_store serves ranks that are threads of one process; file_store serves processes sharing a folder.
#pragma once

#include <chrono>
#include <concepts>
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
#include <type_traits>
#include <utility>
#include <vector>

#include <unistd.h>

#include "jitembed/core/error.hpp"

namespace jitembed::parallel {

// A rendezvous store: set() publishes a value; get() waits until the key exists or the timeout passes;
// check() says without waiting whether the key exists. hash_store, file_store, tcp_store, prefix_store and
// shared_store model it.
template <class S>
concept rendezvous_store = requires(S& s, std::string_view key, std::span<const std::byte> value,
                                    std::chrono::milliseconds timeout) {
  { s.set(key, value) } -> std::same_as<result<void>>;
  { s.get(key, timeout) } -> std::same_as<result<std::vector<std::byte>>>;
  { s.check(key) } -> std::same_as<result<bool>>;
};

// The interface the stores below implement (what shared_store erases a rendezvous_store into).
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

// In-process store (ranks as threads); the ranks share it through a shared_store. Movable (its table lives
// behind a pointer); a moved-from store may only be destroyed or assigned to.
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

// A copyable handle (rule 2.4) to one rendezvous store: copies refer to the same store, so the ranks of a
// process (and split(), which rendezvous again on the parent's store) share it by copying the handle. Made
// from a store moved in (`shared_store(hash_store())`, `shared_store(file_store::open(dir).value())`) or
// built in place (`shared_store(std::in_place_type<hash_store>)`). An empty handle (default) answers every
// call with invalid_argument.
class shared_store {
 public:
  shared_store() = default;
  template <rendezvous_store S>
    requires(!std::same_as<std::remove_cvref_t<S>, shared_store> && std::move_constructible<std::remove_cvref_t<S>>)
  explicit shared_store(S&& s) : s_(erase<std::remove_cvref_t<S>>(std::forward<S>(s))) {}
  // Constructs an S in place.
  template <rendezvous_store S, class... Args>
  explicit shared_store(std::in_place_type_t<S>, Args&&... args) : s_(erase<S>(std::forward<Args>(args)...)) {}

  explicit operator bool() const noexcept { return s_ != nullptr; }

  result<void> set(std::string_view key, std::span<const std::byte> value) {
    if (!s_) return empty();
    return s_->set(key, value);
  }
  result<void> set(std::string_view key, std::string_view value) {
    return set(key, std::span<const std::byte>(reinterpret_cast<const std::byte*>(value.data()), value.size()));
  }
  result<std::vector<std::byte>> get(std::string_view key, std::chrono::milliseconds timeout) {
    if (!s_) return empty();
    return s_->get(key, timeout);
  }
  result<bool> check(std::string_view key) {
    if (!s_) return empty();
    return s_->check(key);
  }

  // The store behind the handle if it is an S, else nullptr.
  template <class S>
  S* target() const noexcept {
    if constexpr (std::derived_from<S, store>) {
      return dynamic_cast<S*>(s_.get());
    } else {
      auto* m = dynamic_cast<model<S>*>(s_.get());
      return m ? &m->s : nullptr;
    }
  }

 private:
  // A rendezvous_store that does not derive from store, adapted to it.
  template <class S>
  struct model final : store {
    template <class... Args>
    explicit model(Args&&... args) : s(std::forward<Args>(args)...) {}
    using store::set;
    result<void> set(std::string_view key, std::span<const std::byte> value) override { return s.set(key, value); }
    result<std::vector<std::byte>> get(std::string_view key, std::chrono::milliseconds timeout) override {
      return s.get(key, timeout);
    }
    result<bool> check(std::string_view key) override { return s.check(key); }
    S s;
  };

  template <class S, class... Args>
  static std::shared_ptr<store> erase(Args&&... args) {
    if constexpr (std::derived_from<S, store>) {
      return std::make_shared<S>(std::forward<Args>(args)...);
    } else {
      return std::make_shared<model<S>>(std::forward<Args>(args)...);
    }
  }

  static error_info empty() { return fail(errc::invalid_argument, "store: empty shared_store"); }

  std::shared_ptr<store> s_;
};

static_assert(rendezvous_store<shared_store>);

// Prefixes every key ("split/3/" + key), so sub-groups and repeated rendezvous do not collide.
class prefix_store final : public store {
 public:
  using store::set;
  prefix_store(shared_store base, std::string prefix) : base_(std::move(base)), prefix_(std::move(prefix)) {}
  result<void> set(std::string_view key, std::span<const std::byte> value) override {
    return base_.set(prefix_ + std::string(key), value);
  }
  result<std::vector<std::byte>> get(std::string_view key, std::chrono::milliseconds timeout) override {
    return base_.get(prefix_ + std::string(key), timeout);
  }
  result<bool> check(std::string_view key) override { return base_.check(prefix_ + std::string(key)); }

 private:
  shared_store base_;
  std::string prefix_;
};

static_assert(rendezvous_store<hash_store> && rendezvous_store<file_store> && rendezvous_store<prefix_store>);

}  // namespace jitembed::parallel
