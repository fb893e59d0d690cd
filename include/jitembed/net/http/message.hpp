// The HTTP message types the server hands to a service handler and the client returns, independent of
// Beast so that services (server/) and tests need not include Boost.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/buffer.hpp"

namespace jitembed::net::http {

using header_list = std::vector<std::pair<std::string, std::string>>;

namespace detail {
// ASCII case-insensitive equality (field names, codings).
inline bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto x = static_cast<unsigned char>(a[i]), y = static_cast<unsigned char>(b[i]);
    if (x >= 'A' && x <= 'Z') x = static_cast<unsigned char>(x + 32);
    if (y >= 'A' && y <= 'Z') y = static_cast<unsigned char>(y + 32);
    if (x != y) return false;
  }
  return true;
}
}  // namespace detail

// Case-insensitive header lookup (HTTP field names are case-insensitive); empty when absent.
inline std::string_view find_header(const header_list& headers, std::string_view name) noexcept {
  for (const auto& [k, v] : headers)
    if (detail::iequals(k, name)) return v;
  return {};
}

// A request as the server received it. `body` stays valid until the handler's respond() was called
// (the connection keeps it alive); views into it (e.g. binary tensors) must not outlive that.
struct request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path + query, as sent
  header_list headers;
  std::string body;
  std::string remote;  // peer address, for logs
};

// A response. The body is a list of pieces sent back to back (scatter/gather: a JSON header followed by
// binary tensors); `keep_alive` owns whatever the pieces point into until the response is written.
struct response {
  int status = 200;
  header_list headers;
  std::string body;                          // sent first
  std::vector<bytes_view> pieces;            // then these, in order
  jitembed::keep_alive keep_alive;           // owner of the pieces' bytes

  std::size_t content_length() const noexcept {
    std::size_t n = body.size();
    for (auto p : pieces) n += p.size();
    return n;
  }
};

// Completes a request; may be called from any thread, exactly once.
using responder = std::function<void(response)>;

// The service side: called on a server I/O thread for every request; it must not block (hand long work to
// a batcher or pool and call `respond` later).
using handler = std::function<void(request&& req, responder respond)>;

}  // namespace jitembed::net::http
