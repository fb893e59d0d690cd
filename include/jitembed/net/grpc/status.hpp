// errc <-> gRPC status codes, in the classes of kserve::http_status. The exact errc also travels in the trailing
// metadata key `jitembed-errc`; a peer that sends none (Triton) is mapped back from the code.
#pragma once

#include <grpcpp/support/status.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "jitembed/core/error.hpp"
#include "jitembed/net/kserve/status.hpp"

namespace jitembed::net::grpc {

// Trailing metadata key carrying errc's name on every failed call.
inline constexpr std::string_view kErrcMetadataKey = "jitembed-errc";

// kserve::http_status's classes as gRPC codes.
constexpr ::grpc::StatusCode status_code(errc code) noexcept {
  using ::grpc::StatusCode;
  if (code == errc::resource_exhausted) return StatusCode::RESOURCE_EXHAUSTED;  // 503 like unavailable
  switch (kserve::http_status(code)) {
    case 200:
      return StatusCode::OK;
    case 404:
      return StatusCode::NOT_FOUND;
    case 499:
      return StatusCode::CANCELLED;
    case 500:
      return StatusCode::INTERNAL;
    case 503:
      return StatusCode::UNAVAILABLE;
    case 504:
      return StatusCode::DEADLINE_EXCEEDED;
    default:
      return StatusCode::INVALID_ARGUMENT;  // every "fix your input" code (400)
  }
}

// The errc a failed call means: the peer's `jitembed-errc` when it sent one, else from the status code.
inline errc errc_of(const ::grpc::Status& s, std::optional<std::string_view> errc_metadata = std::nullopt) {
  if (errc_metadata)
    if (const auto e = errc_from_string(*errc_metadata)) return *e;
  using ::grpc::StatusCode;
  constexpr std::pair<StatusCode, errc> known[] = {{StatusCode::OK, errc::ok},
                                                   {StatusCode::INVALID_ARGUMENT, errc::invalid_argument},
                                                   {StatusCode::OUT_OF_RANGE, errc::invalid_argument},
                                                   {StatusCode::FAILED_PRECONDITION, errc::invalid_argument},
                                                   {StatusCode::UNAUTHENTICATED, errc::invalid_argument},
                                                   {StatusCode::PERMISSION_DENIED, errc::invalid_argument},
                                                   {StatusCode::NOT_FOUND, errc::not_found},
                                                   {StatusCode::UNIMPLEMENTED, errc::not_found},
                                                   {StatusCode::DEADLINE_EXCEEDED, errc::timeout},
                                                   {StatusCode::UNAVAILABLE, errc::unavailable},
                                                   {StatusCode::ABORTED, errc::unavailable},
                                                   {StatusCode::RESOURCE_EXHAUSTED, errc::resource_exhausted},
                                                   {StatusCode::CANCELLED, errc::cancelled}};
  for (const auto& [status, e] : known)
    if (status == s.error_code()) return e;
  return errc::internal;
}

inline ::grpc::Status to_status(const error_info& e) { return {status_code(e.code), e.message}; }

}  // namespace jitembed::net::grpc
