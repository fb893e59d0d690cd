// errc <-> gRPC status codes, as kserve::http_status maps errc onto HTTP: bad input is INVALID_ARGUMENT,
// an unknown model NOT_FOUND, the service's own trouble UNAVAILABLE / RESOURCE_EXHAUSTED /
// DEADLINE_EXCEEDED. The exact errc also travels in the trailing metadata key `jitembed-errc`, so a
// jitembed client recovers it exactly; a peer that sends none (Triton) is mapped back from the code.
#pragma once

#include <grpcpp/support/status.h>

#include <optional>
#include <string>
#include <string_view>

#include "jitembed/core/error.hpp"

namespace jitembed::net::grpc {

// Trailing metadata key carrying errc's name on every failed call.
inline constexpr std::string_view kErrcMetadataKey = "jitembed-errc";

constexpr ::grpc::StatusCode status_code(errc code) noexcept {
  using ::grpc::StatusCode;
  switch (code) {
    case errc::ok:
      return StatusCode::OK;
    case errc::not_found:
      return StatusCode::NOT_FOUND;
    case errc::timeout:
      return StatusCode::DEADLINE_EXCEEDED;
    case errc::unavailable:
      return StatusCode::UNAVAILABLE;
    case errc::resource_exhausted:
      return StatusCode::RESOURCE_EXHAUSTED;
    case errc::cancelled:
      return StatusCode::CANCELLED;
    case errc::buffer_too_small:
    case errc::encode_failed:
    case errc::io_error:
    case errc::internal:
    case errc::comm_failed:
      return StatusCode::INTERNAL;
    default:
      return StatusCode::INVALID_ARGUMENT;  // every "fix your input" code (kserve::http_status 400)
  }
}

// The errc a failed call means: the peer's `jitembed-errc` when it sent one, else from the status code.
inline errc errc_of(const ::grpc::Status& s, std::optional<std::string_view> errc_metadata = std::nullopt) {
  if (errc_metadata)
    if (const auto e = errc_from_string(*errc_metadata)) return *e;
  using ::grpc::StatusCode;
  switch (s.error_code()) {
    case StatusCode::OK:
      return errc::ok;
    case StatusCode::INVALID_ARGUMENT:
    case StatusCode::OUT_OF_RANGE:
    case StatusCode::FAILED_PRECONDITION:
    case StatusCode::UNAUTHENTICATED:
    case StatusCode::PERMISSION_DENIED:
      return errc::invalid_argument;
    case StatusCode::NOT_FOUND:
      return errc::not_found;
    case StatusCode::DEADLINE_EXCEEDED:
      return errc::timeout;
    case StatusCode::UNAVAILABLE:
    case StatusCode::ABORTED:
      return errc::unavailable;
    case StatusCode::RESOURCE_EXHAUSTED:
      return errc::resource_exhausted;
    case StatusCode::CANCELLED:
      return errc::cancelled;
    case StatusCode::UNIMPLEMENTED:
      return errc::not_found;
    default:
      return errc::internal;
  }
}

inline ::grpc::Status to_status(const error_info& e) { return {status_code(e.code), e.message}; }

}  // namespace jitembed::net::grpc
