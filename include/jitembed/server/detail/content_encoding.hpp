// HTTP Content-Encoding gzip / deflate of whole bodies (zlib), as Triton's HTTP endpoint accepts them
// (tritonclient's request/response_compression_algorithm). Inflating past `max_bytes` is limit_exceeded.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "jitembed/core/error.hpp"
#include "jitembed/net/http/message.hpp"

namespace jitembed::server::detail {

enum class content_coding : std::uint8_t { identity, gzip, deflate };

// The coding a Content-Encoding value names (case-insensitive; blanks around it ignored); nullopt: one
// this side does not know (415 for a request body).
inline std::optional<content_coding> parse_content_encoding(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  using net::http::detail::iequals;
  if (v.empty() || iequals(v, "identity")) return content_coding::identity;
  if (iequals(v, "gzip") || iequals(v, "x-gzip")) return content_coding::gzip;
  if (iequals(v, "deflate")) return content_coding::deflate;
  return std::nullopt;
}

// The coding to answer with for an Accept-Encoding value: gzip, then deflate, when listed without q=0
// (Triton's rule is the same preference); identity otherwise.
inline content_coding pick_accept_encoding(std::string_view v) {
  std::optional<content_coding> best;
  while (!v.empty()) {
    const auto comma = v.find(',');
    std::string_view item = v.substr(0, comma);
    v = comma == std::string_view::npos ? std::string_view{} : v.substr(comma + 1);
    std::string_view name = item.substr(0, item.find(';'));
    const bool refused = item.find("q=0") != std::string_view::npos && item.find("q=0.") == std::string_view::npos;
    const auto c = parse_content_encoding(name);
    if (!c || refused || *c == content_coding::identity) continue;
    if (!best || *c == content_coding::gzip) best = c;
  }
  return best.value_or(content_coding::identity);
}

inline std::string_view to_string(content_coding c) {
  return c == content_coding::gzip ? "gzip" : c == content_coding::deflate ? "deflate" : "identity";
}

// The body decoded. Errors: limit_exceeded (more than max_bytes would come out), decode_failed (not a
// gzip / zlib stream, damaged, or trailing garbage).
inline result<std::string> inflate_body(std::string_view in, content_coding coding, std::size_t max_bytes) {
  if (coding == content_coding::identity) return std::string(in);
  z_stream zs{};
  // 15 + 32: zlib or gzip header, detected; gzip alone for gzip (a zlib stream there is an error)
  if (inflateInit2(&zs, coding == content_coding::gzip ? 15 + 16 : 15) != Z_OK)
    return fail(errc::internal, "zlib: inflateInit2 failed");
  const std::unique_ptr<z_stream, int (*)(z_stream*)> end(&zs, inflateEnd);
  const auto failed = [&](errc code, const std::string& what) {
    return fail(code, "Content-Encoding " + std::string(to_string(coding)) + ": " + what);
  };
  std::string out;
  out.resize(std::min<std::size_t>(std::max<std::size_t>(in.size() * 4, 4096), max_bytes));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  std::size_t produced = 0;
  while (true) {
    if (produced == out.size()) {
      if (out.size() >= max_bytes)
        return failed(errc::limit_exceeded, "the body inflates past " + std::to_string(max_bytes) + " bytes");
      out.resize(std::min(out.size() * 2, max_bytes));
    }
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(std::min<std::size_t>(out.size() - produced, UINT32_MAX));
    const auto before = zs.avail_out;
    const int rc = inflate(&zs, Z_NO_FLUSH);
    produced += before - zs.avail_out;
    if (rc == Z_STREAM_END) break;
    if (rc != Z_OK && !(rc == Z_BUF_ERROR && zs.avail_out == 0))
      return failed(errc::decode_failed, zs.msg ? zs.msg : "not a complete stream");
    if (zs.avail_in == 0 && zs.avail_out != 0) return failed(errc::decode_failed, "truncated stream");  // input ended
  }
  if (zs.avail_in != 0) return failed(errc::decode_failed, "bytes after the stream");
  out.resize(produced);
  return out;
}

// The body encoded (level 1: the link is what it saves). Errors: internal (zlib refused).
inline result<std::string> deflate_body(std::string_view in, content_coding coding, int level = 1) {
  if (coding == content_coding::identity) return std::string(in);
  z_stream zs{};
  if (deflateInit2(&zs, level, Z_DEFLATED, coding == content_coding::gzip ? 15 + 16 : 15, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK)
    return fail(errc::internal, "zlib: deflateInit2 failed");
  std::string out(deflateBound(&zs, static_cast<uLong>(in.size())), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  const auto n = zs.total_out;
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) return fail(errc::internal, "zlib: deflate did not finish");
  out.resize(n);
  return out;
}

}  // namespace jitembed::server::detail
