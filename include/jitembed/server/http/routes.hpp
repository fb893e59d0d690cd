// A route table: (method, path pattern) -> handler, matched in the order added. A pattern segment is a literal,
// "{name}" (one segment, captured) or a final "**" (any rest, also none).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jitembed::server::detail {

// The path's segments: empty ones (a doubled or trailing '/') and the query are dropped.
inline std::vector<std::string_view> split_path(std::string_view target) {
  if (const auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
  std::vector<std::string_view> parts;
  while (!target.empty()) {
    const auto s = target.find('/');
    if (s != 0) parts.push_back(target.substr(0, s));
    if (s == std::string_view::npos) break;
    target = target.substr(s + 1);
  }
  return parts;
}

// Which request methods a route takes. HEAD is answered as GET.
enum class methods : std::uint8_t { get = 1, post = 2, any = 3 };

// The captures of a matched pattern; they view into the path (and the table's patterns).
struct route_match {
  std::vector<std::pair<std::string_view, std::string_view>> params;
  // The segment captured as {name}; empty when the pattern has no such capture.
  std::string_view operator[](std::string_view name) const {
    for (const auto& [k, v] : params)
      if (k == name) return v;
    return {};
  }
};

template <class Handler>
class route_table {
 public:
  // Adds a route, tried after every route added before it.
  void add(methods m, std::string_view pattern, Handler h) {
    route r{.accepts = m, .handler = std::move(h)};
    for (auto seg : split_path(pattern)) r.segments.emplace_back(seg);
    routes_.push_back(std::move(r));
  }

  // The first route that takes `method` and whose pattern matches `parts` (its captures go into `out`);
  // nullptr when none does.
  const Handler* find(std::string_view method, const std::vector<std::string_view>& parts, route_match& out) const {
    const auto m = method == "GET" || method == "HEAD" ? methods::get : method == "POST" ? methods::post : methods{0};
    for (const auto& r : routes_) {
      if ((static_cast<unsigned>(r.accepts) & static_cast<unsigned>(m)) == 0 && r.accepts != methods::any) continue;
      out.params.clear();
      if (matches(r, parts, out)) return &r.handler;
    }
    out.params.clear();
    return nullptr;
  }

 private:
  struct route {
    methods accepts;
    std::vector<std::string> segments;
    Handler handler;
  };

  static bool matches(const route& r, const std::vector<std::string_view>& parts, route_match& out) {
    const auto& segs = r.segments;
    for (std::size_t i = 0; i < segs.size(); ++i) {
      const std::string_view s = segs[i];
      if (s == "**" && i + 1 == segs.size()) return true;
      if (i >= parts.size()) return false;
      if (s.size() >= 2 && s.front() == '{' && s.back() == '}') {
        out.params.emplace_back(s.substr(1, s.size() - 2), parts[i]);
      } else if (s != parts[i]) {
        return false;
      }
    }
    return segs.size() == parts.size();
  }

  std::vector<route> routes_;
};

}  // namespace jitembed::server::detail
