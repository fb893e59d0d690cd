// HTTP/1.1 wire helpers shared by the server and the clients: field validation, head serialization,
// the scatter/gather buffer list of a message, and the small JSON error body of the HTTP layer.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/status.hpp>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/json_string.hpp"
#include "jitembed/net/http/message.hpp"

namespace jitembed::net::http::detail {

// Beast's string_view (boost::string_view in Boost 1.74) does not convert to std::string_view: rewrap pointer and size.
template <class StringView>
std::string_view to_std(const StringView& s) noexcept {
  return {s.data(), s.size()};
}

// RFC 9110 token (field names, methods).
inline bool is_token(std::string_view s) noexcept {
  if (s.empty()) return false;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!alnum && std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) == std::string_view::npos)
      return false;
  }
  return true;
}

// A field value or request target must not carry CR, LF or NUL (header injection).
inline bool is_safe_value(std::string_view s) noexcept {
  for (char c : s)
    if (c == '\r' || c == '\n' || c == '\0') return false;
  return true;
}

inline bool is_safe_target(std::string_view s) noexcept {
  if (s.empty()) return false;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7f) return false;
  }
  return true;
}

// Fields the transport sets itself; a service's or caller's copy is ignored (server) or rejected (client).
inline bool is_framing_field(std::string_view name) noexcept {
  return iequals(name, "content-length") || iequals(name, "transfer-encoding") || iequals(name, "connection");
}

inline void append_field(std::string& out, std::string_view name, std::string_view value) {
  out.append(name).append(": ").append(value).append("\r\n");
}

// Appends "<method> <target> HTTP/1.1\r\n[Host: <host>\r\n]<fields>[Content-Length: n\r\n]\r\n", the request head
// of both HTTP clients; `fields` (name, value pairs) as given (checked by the caller), no Host for an empty `host`.
template <class Fields>
void append_request_head(std::string& out, std::string_view method, std::string_view target, std::string_view host,
                         const Fields& fields, std::optional<std::size_t> content_length) {
  out.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
  if (!host.empty()) append_field(out, "Host", host);
  for (const auto& [k, v] : fields) append_field(out, k, v);
  if (content_length) append_field(out, "Content-Length", std::to_string(*content_length));
  out.append("\r\n");
}

// "HTTP/1.1 <code> <reason>\r\n<fields>Content-Length: n\r\n[Connection: ...]\r\n" for a response.
// Fields that are not valid tokens/values or that frame the message are dropped.
inline std::string serialize_response_head(const response& r, std::size_t content_length, bool close,
                                           bool http10_keep_alive) {
  int status = r.status;
  if (status < 100 || status > 999) status = 500;
  const auto reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
  std::string out;
  out.reserve(128 + r.headers.size() * 48);
  out.append("HTTP/1.1 ").append(std::to_string(status)).append(" ");
  out.append(reason.data(), reason.size()).append("\r\n");
  for (const auto& [k, v] : r.headers) {
    if (!is_token(k) || !is_safe_value(v) || is_framing_field(k)) continue;
    append_field(out, k, v);
  }
  append_field(out, "Content-Length", std::to_string(content_length));
  if (close)
    append_field(out, "Connection", "close");
  else if (http10_keep_alive)
    append_field(out, "Connection", "keep-alive");
  out.append("\r\n");
  return out;
}

// The gather list: head, body, then each piece (no copies; empty parts skipped).
inline void gather(std::vector<boost::asio::const_buffer>& out, std::string_view head, std::string_view body,
                   std::span<const bytes_view> pieces) {
  out.clear();
  out.reserve(2 + pieces.size());
  out.emplace_back(head.data(), head.size());
  if (!body.empty()) out.emplace_back(body.data(), body.size());
  for (auto p : pieces)
    if (!p.empty()) out.emplace_back(p.data(), p.size());
}

// The HTTP layer's own error responses use the KServe/Triton error shape {"error": "..."}; the message is
// escaped by the one JSON string writer (non-ASCII as \uXXXX of its code point, invalid bytes as U+FFFD).
inline response error_response(int status, std::string_view message) {
  response r;
  r.status = status;
  r.headers.emplace_back("Content-Type", "application/json");
  r.body = "{\"error\":" + json_string(message) + "}";
  return r;
}

}  // namespace jitembed::net::http::detail
