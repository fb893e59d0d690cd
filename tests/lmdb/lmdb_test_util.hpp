// Helpers shared by the LMDB store tests: temp dirs, deterministic keys and values, map-range lookup.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/cache/lmdb_cache.hpp"

namespace lmdb_test {

namespace fs = std::filesystem;
using jitembed::bytes_view;
using jitembed::cache::cache_key;

// A fresh directory under the system temp dir, removed with everything in it.
struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& name) {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("jitembed_lmdb_" + name + "_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

inline std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline cache_key key_of(std::uint64_t i) {
  std::uint64_t s = i * 7919 + 17;
  return cache_key{jitembed::hash128{splitmix(s), splitmix(s)}};
}

// Deterministic bytes for value i (size n): every byte depends on i and its position.
inline std::vector<std::byte> value_of(std::uint64_t i, std::size_t n) {
  std::vector<std::byte> v(n);
  std::uint64_t s = i ^ 0xC0FFEEull;
  for (std::size_t j = 0; j < n; j += 8) {
    const std::uint64_t r = splitmix(s);
    for (std::size_t b = 0; b < 8 && j + b < n; ++b) v[j + b] = static_cast<std::byte>(r >> (8 * b));
  }
  return v;
}

// A size that varies with i: small (inline in a leaf page) and large (overflow pages) values both occur.
inline std::size_t size_of(std::uint64_t i) {
  static constexpr std::size_t sizes[] = {0, 17, 300, 1500, 2100, 4096, 9000, 33000};
  return sizes[i % (sizeof sizes / sizeof sizes[0])];
}

inline bool equal(bytes_view a, const std::vector<std::byte>& b) {
  return a.size() == b.size() && (b.empty() || std::memcmp(a.data(), b.data(), b.size()) == 0);
}

inline bytes_view view(const std::vector<std::byte>& v) { return {v.data(), v.size()}; }

inline jitembed::cache::lmdb_options options_for(const fs::path& dir) {
  jitembed::cache::lmdb_options o;
  o.path = dir.string();
  o.sync = false;
  o.initial_map_bytes = std::size_t{16} << 20;
  return o;
}

// [begin, end) of this process's mapping of `file` (the LMDB map), or {0, 0}.
inline std::pair<std::uintptr_t, std::uintptr_t> mapping_of(const fs::path& file) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const std::string want = fs::canonical(file).string();
  while (std::getline(maps, line)) {
    if (line.size() < want.size() || line.compare(line.size() - want.size(), want.size(), want) != 0) continue;
    std::istringstream is(line);
    std::string range;
    is >> range;
    const auto dash = range.find('-');
    return {std::stoull(range.substr(0, dash), nullptr, 16), std::stoull(range.substr(dash + 1), nullptr, 16)};
  }
  return {0, 0};
}

// Runs fn in a forked child; returns its exit status (fn's return value), or -signal.
template <class F>
pid_t spawn(F&& fn) {
  std::fflush(nullptr);  // or the child may write the parent's buffered output again
  const pid_t pid = fork();
  if (pid == 0) {
    int rc = 99;
    try {
      rc = fn();
    } catch (...) {
      rc = 98;
    }
    _exit(rc);
  }
  return pid;
}

inline int wait_status(pid_t pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1000;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return -WTERMSIG(st);
  return -1001;
}

}  // namespace lmdb_test
