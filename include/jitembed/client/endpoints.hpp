// Endpoint lists: the text format (one `http://host:port`, `https://host:port` or `grpc://host:port` per
// line, `#` comments) shared by endpoint files, endpoint URLs and the Ray registry, and the parsed address
// of one endpoint.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/core/error.hpp"

namespace jitembed::client {

struct endpoint_address {
  std::string url;  // canonical "http://host:port", "https://host:port", "grpc://host:port" or "grpcs://host:port"
  std::string host;
  std::uint16_t port = 0;
  std::string path;  // what follows host:port ("" or "/..."), for endpoint-list URLs
  bool tls = false;  // https, grpcs: TLS, the server's certificate verified (client_options.tls_ca_file)

  friend bool operator==(const endpoint_address& a, const endpoint_address& b) {
    return a.url == b.url && a.path == b.path;
  }
};

// Whether the endpoint is this host's loopback ("localhost", 127.0.0.0/8, ::1): a link that is not short of
// bandwidth (the client does not offer compression there).
inline bool is_loopback(const endpoint_address& a) {
  return a.host == "localhost" || a.host.starts_with("127.") || a.host == "::1";
}

// Whether the endpoint speaks KServe gRPC (grpc://host:port, grpcs:// with TLS) rather than HTTP.
inline bool is_grpc(const endpoint_address& a) { return a.url.starts_with("grpc://") || a.url.starts_with("grpcs://"); }

// Parses "http://host:port[/path]", "https://host:port[/path]", "grpc://host:port" or "grpcs://host:port"
// (IPv6 as [addr]).
inline result<endpoint_address> parse_endpoint_url(std::string_view s) {
  const bool tls = s.starts_with("https://") || s.starts_with("grpcs://");
  const std::string_view scheme = s.starts_with("https://")   ? "https://"
                                  : s.starts_with("grpcs://") ? "grpcs://"
                                  : s.starts_with("grpc://")  ? "grpc://"
                                                              : "http://";
  const auto bad = [&](const char* why) {
    return fail(errc::invalid_argument, "endpoint '" + std::string(s) + "': " + why);
  };
  if (!s.starts_with(scheme))
    return bad("only http://host:port, https://host:port, grpc://host:port and grpcs://host:port URLs are supported");
  std::string_view rest = s.substr(scheme.size());
  std::string_view authority = rest, path;
  if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
    authority = rest.substr(0, slash);
    path = rest.substr(slash);
  }
  std::string_view host, port_text;
  if (authority.starts_with('[')) {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return bad("unterminated [IPv6] host");
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.starts_with(':')) return bad("a port is required");
    port_text = after.substr(1);
  } else {
    const auto colon = authority.rfind(':');
    if (colon == std::string_view::npos) return bad("a port is required");
    host = authority.substr(0, colon);
    port_text = authority.substr(colon + 1);
  }
  unsigned port = 0;
  const auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (host.empty() || ec != std::errc{} || p != port_text.data() + port_text.size() || port == 0 || port > 65535)
    return bad("bad host or port");
  if (scheme.starts_with("grpc") && !path.empty() && path != "/") return bad("a gRPC endpoint has no path");
  return endpoint_address{std::string(scheme) + std::string(authority), std::string(host),
                          static_cast<std::uint16_t>(port), std::string(path), tls};
}

// Parses the endpoint-list text: one URL per line; leading/trailing blanks, empty lines and `#` comments
// (whole line or after the URL) are ignored; duplicates collapse. A bad line fails the whole list
// (invalid_argument naming the line), so a half-written file is never half-applied.
inline result<std::vector<endpoint_address>> parse_endpoint_list(std::string_view text) {
  std::vector<endpoint_address> out;
  std::size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.remove_suffix(1);
    if (line.empty()) continue;
    auto a = parse_endpoint_url(line);
    if (!a)
      return fail(errc::invalid_argument, "endpoint list line " + std::to_string(line_no) + ": " + a.error().message);
    if (!a->path.empty() && a->path != "/") {
      return fail(errc::invalid_argument,
                  "endpoint list line " + std::to_string(line_no) + ": an endpoint has no path");
    }
    a->path.clear();
    bool dup = false;
    for (const auto& e : out) dup = dup || e.url == a->url;
    if (!dup) out.push_back(std::move(*a));
  }
  return out;
}

}  // namespace jitembed::client
