// The service's bearer-token check (server_config::auth_token): what a front end asks before it routes a
// request. It sees only the Authorization value, so an HTTP and a gRPC front end share it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace jitembed::server::detail {

// Compares in time that depends on the lengths only, not on where the strings first differ.
inline bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

class bearer_auth {
 public:
  // An empty token: every request is allowed.
  explicit bearer_auth(std::string token) : token_(std::move(token)) {}

  bool enabled() const noexcept { return !token_.empty(); }

  // Whether `authorization` (the header's value, empty when absent) is "Bearer <token>".
  bool allows(std::string_view authorization) const {
    if (token_.empty()) return true;
    constexpr std::string_view bearer = "Bearer ";
    return authorization.starts_with(bearer) && constant_time_equal(authorization.substr(bearer.size()), token_);
  }

  static constexpr std::string_view denied_message = "unauthorized: a valid bearer token is required";

 private:
  std::string token_;
};

}  // namespace jitembed::server::detail
