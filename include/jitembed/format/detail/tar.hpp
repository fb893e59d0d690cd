// A strict POSIX ustar / GNU tar member parser over bytes: header checksums, octal (and GNU base-256)
// sizes, ustar prefixes, GNU long names ('L'), pax 'x' path/size records; errors on truncation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/limits.hpp"

namespace jitembed::format::detail {

inline constexpr std::size_t kTarBlock = 512;
inline constexpr std::size_t kTarMaxLongName = 64 << 10;  // a GNU long name or a pax header, at most
inline constexpr std::size_t kTarMaxPax = 1 << 20;

struct tar_member {
  std::string path;
  std::uint64_t header_offset = 0;  // of its (last) header block
  bytes_view data;                  // into the archive
};

inline std::string tar_at(std::uint64_t off) { return " (header at offset " + std::to_string(off) + ")"; }

// Parses a numeric header field: octal digits with leading spaces/NULs and a NUL or space terminator, or
// GNU base-256 (top bit of the first byte set; negative values are rejected).
inline result<std::uint64_t> tar_number(const std::byte* f, std::size_t n, const char* what, std::uint64_t at) {
  const auto* u = reinterpret_cast<const unsigned char*>(f);
  if (u[0] & 0x80) {
    if (u[0] == 0xff) return fail(errc::corrupt_data, std::string("tar: negative base-256 ") + what + tar_at(at));
    std::uint64_t v = u[0] & 0x7f;
    for (std::size_t i = 1; i < n; ++i) {
      if (v >> 56) return fail(errc::corrupt_data, std::string("tar: base-256 ") + what + " overflows 64 bits" + tar_at(at));
      v = (v << 8) | u[i];
    }
    return v;
  }
  std::size_t i = 0;
  while (i < n && (u[i] == ' ' || u[i] == 0)) ++i;
  if (i == n) return std::uint64_t{0};  // an all-blank field is 0 (some writers leave mtime etc. empty)
  std::uint64_t v = 0;
  std::size_t digits = 0;
  for (; i < n && u[i] >= '0' && u[i] <= '7'; ++i, ++digits) {
    if (v >> 61) return fail(errc::corrupt_data, std::string("tar: octal ") + what + " overflows 64 bits" + tar_at(at));
    v = v * 8 + (u[i] - '0');
  }
  for (; i < n; ++i)
    if (u[i] != ' ' && u[i] != 0)
      return fail(errc::corrupt_data, std::string("tar: ") + what + " field has non-octal byte " + std::to_string(u[i]) + tar_at(at));
  if (digits == 0) return fail(errc::corrupt_data, std::string("tar: empty ") + what + tar_at(at));
  return v;
}

inline std::string_view tar_cstr(const std::byte* f, std::size_t n) {
  const auto* c = reinterpret_cast<const char*>(f);
  const void* z = std::memchr(c, 0, n);
  return {c, z ? static_cast<std::size_t>(static_cast<const char*>(z) - c) : n};
}

// Parses pax extended header records "<len> <key>=<value>\n"; picks path and size.
inline result<void> tar_pax(bytes_view d, std::uint64_t at, std::string& path, std::uint64_t& size, bool& has_size) {
  std::string_view s(reinterpret_cast<const char*>(d.data()), d.size());
  while (!s.empty()) {
    if (s.front() == '\0') break;  // trailing NULs
    std::size_t len = 0, i = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9' && i < 12) len = len * 10 + static_cast<std::size_t>(s[i++] - '0');
    if (i == 0 || i >= s.size() || s[i] != ' ' || len <= i + 1 || len > s.size() || s[len - 1] != '\n')
      return fail(errc::corrupt_data, "tar: malformed pax record" + tar_at(at));
    std::string_view rec = s.substr(i + 1, len - i - 2);
    const auto eq = rec.find('=');
    if (eq == std::string_view::npos) return fail(errc::corrupt_data, "tar: pax record without '='" + tar_at(at));
    const auto key = rec.substr(0, eq), value = rec.substr(eq + 1);
    if (key == "path") {
      path.assign(value);
    } else if (key == "size") {
      std::uint64_t v = 0;
      if (value.empty() || value.size() > 19) return fail(errc::corrupt_data, "tar: bad pax size" + tar_at(at));
      for (char c : value) {
        if (c < '0' || c > '9') return fail(errc::corrupt_data, "tar: bad pax size" + tar_at(at));
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
      }
      size = v;
      has_size = true;
    }
    s.remove_prefix(len);
  }
  return {};
}

// Every regular-file member of a ustar / GNU archive, in order. Directories, links and devices are
// skipped; global pax headers are ignored; other entry types are rejected.
inline result<std::vector<tar_member>> parse_tar(bytes_view tar, const decode_limits& lim) {
  std::vector<tar_member> out;
  const std::byte* b = tar.data();
  const std::uint64_t n = tar.size();
  std::uint64_t pos = 0;
  std::string long_name, pax_path;
  std::uint64_t pax_size = 0;
  bool has_pax_size = false, has_long = false;
  for (;;) {
    if (pos == n) return fail(errc::truncated, "tar: archive ends at offset " + std::to_string(pos) + " without an end-of-archive block");
    if (n - pos < kTarBlock) return fail(errc::truncated, "tar: header at offset " + std::to_string(pos) + " is cut off");
    const std::byte* h = b + pos;
    bool zero = true;
    for (std::size_t i = 0; i < kTarBlock && zero; ++i) zero = h[i] == std::byte{0};
    if (zero) {
      if (has_long || !pax_path.empty() || has_pax_size)
        return fail(errc::corrupt_data, "tar: extended header without a following member" + tar_at(pos));
      return out;  // end of archive (what follows is padding)
    }
    const std::string_view magic(reinterpret_cast<const char*>(h + 257), 8);
    const bool posix = magic == std::string_view("ustar\0" "00", 8);
    const bool gnu = magic == std::string_view("ustar  \0", 8);
    if (!posix && !gnu) return fail(errc::unsupported_format, "tar: not a ustar/GNU header" + tar_at(pos));
    // Checksum: the sum of the header bytes with the checksum field read as spaces (unsigned; signed too,
    // as some old writers did).
    auto stored = tar_number(h + 148, 8, "checksum", pos);
    if (!stored) return stored.error();
    std::uint64_t usum = 0;
    std::int64_t ssum = 0;
    for (std::size_t i = 0; i < kTarBlock; ++i) {
      const auto c = (i >= 148 && i < 156) ? static_cast<unsigned char>(' ') : static_cast<unsigned char>(h[i]);
      usum += c;
      ssum += static_cast<signed char>(c);
    }
    if (*stored != usum && static_cast<std::int64_t>(*stored) != ssum)
      return fail(errc::checksum_mismatch, "tar: header checksum " + std::to_string(*stored) + " != " + std::to_string(usum) + tar_at(pos));
    auto sz = tar_number(h + 124, 12, "size", pos);
    if (!sz) return sz.error();
    const char type = static_cast<char>(h[156]);
    std::uint64_t size = *sz;
    if (has_pax_size && (type == '0' || type == '\0' || type == '7')) size = pax_size;
    const std::uint64_t data_at = pos + kTarBlock;
    if (size > n - data_at)
      return fail(errc::truncated, "tar: member data of " + std::to_string(size) + " bytes runs past the archive end" + tar_at(pos));
    const std::uint64_t padded = (size + kTarBlock - 1) / kTarBlock * kTarBlock;
    if (padded > n - data_at) return fail(errc::truncated, "tar: member padding runs past the archive end" + tar_at(pos));
    const bytes_view data(b + data_at, static_cast<std::size_t>(size));
    switch (type) {
      case 'L':
        if (size > kTarMaxLongName)
          return fail(errc::limit_exceeded, "tar: GNU long name of " + std::to_string(size) + " bytes" + tar_at(pos));
        long_name.assign(tar_cstr(data.data(), data.size()));
        has_long = true;
        break;
      case 'x': {
        if (size > kTarMaxPax) return fail(errc::limit_exceeded, "tar: pax header of " + std::to_string(size) + " bytes" + tar_at(pos));
        JITEMBED_TRY(tar_pax(data, pos, pax_path, pax_size, has_pax_size));
        break;
      }
      case 'g':
      case 'K':
        break;  // global pax header / long link name: not needed
      case '0':
      case '\0':
      case '7': {
        if (size > lim.max_record_bytes)
          return fail(errc::limit_exceeded, "tar: member of " + std::to_string(size) + " bytes > max_record_bytes " +
                                                std::to_string(lim.max_record_bytes) + tar_at(pos));
        tar_member m;
        if (!pax_path.empty()) {
          m.path = pax_path;
        } else if (has_long) {
          m.path = long_name;
        } else {
          const auto name = tar_cstr(h, 100);
          const auto prefix = posix ? tar_cstr(h + 345, 155) : std::string_view{};
          m.path = prefix.empty() ? std::string(name) : std::string(prefix) + "/" + std::string(name);
        }
        if (m.path.empty()) return fail(errc::corrupt_data, "tar: member with an empty name" + tar_at(pos));
        m.header_offset = pos;
        m.data = data;
        out.push_back(std::move(m));
        [[fallthrough]];
      }
      case '1':
      case '2':
      case '3':
      case '4':
      case '5':
      case '6':
        long_name.clear();
        pax_path.clear();
        has_long = has_pax_size = false;
        break;
      default:
        return fail(errc::unsupported_format, std::string("tar: entry type '") + type + "'" + tar_at(pos));
    }
    pos = data_at + padded;
  }
}

}  // namespace jitembed::format::detail
