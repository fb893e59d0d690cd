// Helpers shared by the format tests: deterministic data, byte patching of records (with the header
// checksum recomputed, so structural checks are reached), temp dirs.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "jitembed/format.hpp"

namespace fmt_test {

// Writes `content` to `p`, creating its folders.
inline void put(const std::filesystem::path& p, jitembed::bytes_view content) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(content.data()), static_cast<std::streamsize>(content.size()));
}
inline void put(const std::filesystem::path& p, std::string_view content) { put(p, jitembed::as_bytes_view(content)); }

using namespace jitembed;
using namespace jitembed::format;

inline byte_buffer random_bytes(std::size_t n, std::uint32_t seed) {
  byte_buffer b(n);
  std::mt19937 rng(seed);
  for (auto& x : b) x = static_cast<std::byte>(rng() & 0xff);
  return b;
}

template <class T>
inline T rd(const byte_buffer& b, std::size_t off) {
  return detail::load_le<T>(b.data() + off);
}
template <class T>
inline void wr(byte_buffer& b, std::size_t off, T v) {
  detail::store_le<T>(b.data() + off, v);
}

// Recomputes the record header checksum after a test patched the header/table.
inline void reseal(byte_buffer& rec) { detail::store_checksum(rec.data(), rd<std::uint32_t>(rec, detail::kHMetaSize)); }

inline std::size_t entry_at(std::size_t i) { return detail::kRecordHeaderSize + i * detail::kEntrySize; }

struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("jitembed_format_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace fmt_test
