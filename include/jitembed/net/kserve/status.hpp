// KServe error bodies ({"error": "...", "errc": "..."}) and the HTTP status mapping for failed requests.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "jitembed/core/error.hpp"
#include "jitembed/net/kserve/detail/json_writer.hpp"

namespace jitembed::net::kserve {

// What a server answers for a failed request: the HTTP status, the "error" message and the errc that a
// client decides on (retry or not) without reading the message.
struct protocol_error {
  int http_status = 500;
  std::string message;
  errc code = errc::internal;
};

// Triton's mapping for bad input 400, unknown model or version 404, internal 500; the service's own
// trouble: unavailable / resource_exhausted 503 (with Retry-After), timeout 504, cancelled 499.
constexpr int http_status(errc code) noexcept {
  switch (code) {
    case errc::ok: return 200;
    case errc::invalid_argument:
    case errc::truncated:
    case errc::bad_magic:
    case errc::unsupported_version:
    case errc::checksum_mismatch:
    case errc::corrupt_data:
    case errc::limit_exceeded:
    case errc::shape_overflow:
    case errc::unsupported_format:
    case errc::unsupported_codec:
    case errc::decode_failed:
    case errc::invalid_utf8:
    case errc::dtype_mismatch: return 400;
    case errc::not_found: return 404;
    case errc::buffer_too_small:
    case errc::encode_failed:
    case errc::io_error:
    case errc::internal:
    case errc::comm_failed: return 500;
    case errc::timeout: return 504;
    case errc::unavailable:
    case errc::resource_exhausted: return 503;
    case errc::cancelled: return 499;  // nginx's "client closed request": nobody waits for the answer
  }
  return 500;
}

// Whether an answer with this errc carries Retry-After (the service may serve it later or elsewhere).
constexpr bool wants_retry_after(errc code) noexcept {
  return code == errc::unavailable || code == errc::resource_exhausted;
}

inline protocol_error to_protocol_error(const error_info& e) { return {http_status(e.code), e.message, e.code}; }

// Why a request cannot be served now (Triton answers 503 UNAVAILABLE for both).
enum class unavailable_reason { queue_full, not_ready };

inline protocol_error unavailable(unavailable_reason why, std::string_view detail) {
  std::string msg = why == unavailable_reason::queue_full ? "queue full" : "not ready";
  if (!detail.empty()) {
    msg += ": ";
    msg += detail;
  }
  return {503, std::move(msg), errc::unavailable};
}

inline protocol_error model_not_found(std::string_view model, std::string_view version = {}) {
  std::string msg = "Request for unknown model: '" + std::string(model) + "'";
  if (!version.empty()) msg += " version " + std::string(version);
  msg += " is not found";
  return {404, std::move(msg), errc::not_found};
}

// {"error":"<message>"}, escaped the way Triton's and tritonclient's JSON writers do.
inline std::string error_body(std::string_view message) {
  std::string out = "{\"error\":";
  detail::write_json_string(out, message, /*replace_invalid=*/true);
  out += '}';
  return out;
}
// {"error":"<message>","errc":"<name>"}: "error" first, so clients that read only it (tritonclient) still
// parse the body.
inline std::string error_body(std::string_view message, errc code) {
  std::string out = error_body(message);
  out.pop_back();  // '}'
  return out + ",\"errc\":\"" + std::string(to_string(code)) + "\"}";
}
inline std::string error_body(const protocol_error& e) { return error_body(e.message); }

// The errc of an error body ({"errc": "<name>"}); nullopt when the body has none or an unknown name
// (e.g. from a server that is not jitembed: decide by the HTTP status then).
inline std::optional<errc> parse_error_code(std::string_view body) {
  auto j = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const auto it = j.find("errc");
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return errc_from_string(it->get_ref<const std::string&>());
}

// The message of an error body; fails when the body is not {"error": "<string>", ...}.
inline result<std::string> parse_error_body(std::string_view body) {
  auto j = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return fail(errc::corrupt_data, "error body is not a JSON object");
  const auto it = j.find("error");
  if (it == j.end() || !it->is_string()) return fail(errc::corrupt_data, "error body has no string \"error\"");
  return it->get<std::string>();
}

}  // namespace jitembed::net::kserve
