// The HTTP front's responses: JSON and text bodies, error answers, and infer bodies decoded / encoded with
// Triton's binary extension (Inference-Header-Content-Length lives here only), deflated on request.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "jitembed/core/error.hpp"
#include "jitembed/net/http/message.hpp"
#include "jitembed/net/kserve/decode.hpp"
#include "jitembed/net/kserve/encode.hpp"
#include "jitembed/net/kserve/status.hpp"
#include "jitembed/server/detail/content_encoding.hpp"
#include "jitembed/server/detail/pipeline.hpp"

namespace jitembed::server {

// Retry-After (seconds) on 503 answers (unavailable, resource_exhausted).
inline constexpr int kRetryAfterSeconds = 1;

namespace detail {

namespace http = net::http;
using ojson = nlohmann::ordered_json;

inline http::response text_response(int status, std::string body, std::string_view type) {
  http::response r;
  r.status = status;
  r.body = std::move(body);
  r.headers.emplace_back("Content-Type", std::string(type));
  return r;
}
inline http::response json_response(int status, const ojson& j) {
  return text_response(status, j.dump(), "application/json");
}

// Every error answer: {"error": message, "errc": name}, and Retry-After where the errc says "later".
inline http::response error_response(int status, std::string_view message, errc code) {
  auto r = text_response(status, net::kserve::error_body(message, code), "application/json");
  if (net::kserve::wants_retry_after(code)) r.headers.emplace_back("Retry-After", std::to_string(kRetryAfterSeconds));
  return r;
}
inline http::response error_response(const net::kserve::protocol_error& e) {
  return error_response(e.http_status, e.message, e.code);
}
// A failed request: the status follows the errc alone (kserve::http_status).
inline http::response error_response(const error_info& e) {
  return error_response(net::kserve::http_status(e.code), e.message, e.code);
}
inline http::response not_found_route() { return error_response(404, "Not Found", errc::not_found); }
inline http::response method_not_allowed() { return error_response(405, "method not allowed", errc::invalid_argument); }
inline http::response bad_request(std::string message) { return error_response(400, message, errc::invalid_argument); }

// An Inference-Header-Content-Length value; empty: none (the body is all JSON).
inline result<std::optional<std::size_t>> parse_header_length(std::string_view h) {
  if (h.empty()) return std::optional<std::size_t>{};
  std::size_t v = 0;
  for (char ch : h) {
    if (ch < '0' || ch > '9' || v > (std::size_t{1} << 40))
      return fail(errc::invalid_argument, "Inference-Header-Content-Length '" + std::string(h) + "' is not a valid length");
    v = v * 10 + static_cast<std::size_t>(ch - '0');
  }
  return std::optional<std::size_t>{v};
}

// An infer request's body (KServe JSON + Triton's binary extension), decoded when the pipeline admits it:
// the tensors view into the body, which the decoded request keeps.
inline request_decoder body_decoder(http::request&& req, const net::kserve::protocol_limits& limits) {
  return [body = std::make_shared<const std::string>(std::move(req.body)),
          length = std::string(http::find_header(req.headers, "inference-header-content-length")),
          &limits]() -> result<decoded_request> {
    JITEMBED_ASSIGN_OR_RETURN(const auto header_length, parse_header_length(length));
    JITEMBED_ASSIGN_OR_RETURN(auto r, net::kserve::decode_request(*body, header_length, limits));
    return decoded_request{std::move(r), body};
  };
}

// The pipeline's answer as an HTTP response: KServe JSON + Triton's binary extension, the binary pieces
// viewing the response's tensors (no copy; the response is kept alive until written).
inline http::response to_response(result<infer_output> r) {
  if (!r) return error_response(r.error());
  auto msg = net::kserve::encode_response(**r);
  if (!msg) return error_response(msg.error());
  const auto length = msg->header_length;
  auto out = text_response(200, std::move(msg->header), length ? "application/octet-stream" : "application/json");
  out.pieces = std::move(msg->binary);
  out.keep_alive = std::move(*r);
  if (length) out.headers.emplace_back("Inference-Header-Content-Length", std::to_string(*length));
  return out;
}

// A response's body (header + binary pieces) deflated with `coding`, Content-Encoding set.
inline http::response encode_body(http::response r, content_coding coding) {
  std::string flat = std::move(r.body);
  for (auto p : r.pieces) flat.append(reinterpret_cast<const char*>(p.data()), p.size());
  auto packed = deflate_body(flat, coding);
  if (!packed) return error_response(packed.error());
  r.body = std::move(*packed);
  r.pieces.clear();
  r.keep_alive.reset();
  r.headers.emplace_back("Content-Encoding", std::string(detail::to_string(coding)));
  return r;
}

}  // namespace detail

}  // namespace jitembed::server
