// An attempt's KServe request and the call's result from its answer, shared by the HTTP and gRPC transports:
// the "timeout", the compression offer and marks and Triton's shared-memory parameters are spelled here once.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "jitembed/client/detail/transport.hpp"  // remote_attempt, output_tensor, net::kserve

namespace jitembed::client::detail {

// What is left of the call's deadline, in microseconds (at least 1).
inline std::int64_t remaining_us(const remote_call& c) {
  return std::max<std::int64_t>(
      1, std::chrono::duration_cast<std::chrono::microseconds>(c.deadline - clock::now()).count());
}

// The attempt's request: one input, BYTES [n, 1] or typed [n, row_shape...], viewing the call's rows (raw, or
// compressed once and marked so) which its storage keeps alive; with `a.shm` the rows and each output in the
// attempt's span of shared memory instead (Triton's parameters, no data). The deadline travels as the
// "timeout" parameter (remaining_us), the compression offer as the compression parameter.
// `binary_data_output` (HTTP): that parameter, first, and each output's binary_data; gRPC has neither.
inline net::kserve::infer_request attempt_request(remote_attempt& a, const client_options& opts,
                                                  std::optional<bool> binary_data_output) {
  namespace kserve = net::kserve;
  remote_call& c = *a.call;
  kserve::infer_request r;
  r.model = c.model;
  r.version = c.version;
  r.parameters = kserve::json::object();
  if (binary_data_output) r.parameters["binary_data_output"] = *binary_data_output;
  r.parameters["timeout"] = remaining_us(c);
  const auto shm_parameters = [&](std::size_t offset, std::size_t bytes) {
    // integers: over gRPC int64_param, as tritonclient sends them (Triton refuses another type)
    return kserve::json{{"shared_memory_region", a.shm->arena->region},
                        {"shared_memory_byte_size", bytes},
                        {"shared_memory_offset", offset}};
  };
  if (a.shm) {  // rows and outputs in the endpoint's shared memory: the message carries neither
    r.inputs.push_back(kserve::infer_tensor::view(c.input, c.type, c.input_shape(), bytes_view{}, true));
    r.inputs.back().parameters = shm_parameters(a.shm->offset, a.shm->input_bytes);
    for (const auto& [name, span] : a.shm->outputs)
      r.outputs.push_back({name, std::nullopt, shm_parameters(span.first, span.second)});
    return r;
  }
  if (offers_compression(opts, a.ep->addr))
    r.parameters[std::string(kserve::kCompressionParameter)] = kserve::kZstdShuffle;
  const auto* packed = packed_rows(opts, c);
  std::shared_ptr<const byte_buffer> rows = packed ? *c.packed_rows : std::shared_ptr<const byte_buffer>(c.rows);
  r.inputs.push_back(
      kserve::infer_tensor::view(c.input, c.type, c.input_shape(), bytes_view(rows->data(), rows->size()), true));
  r.inputs.back().storage = std::move(rows);
  if (packed) kserve::mark_compressed(r.inputs.back(), c.rows->size());
  for (const auto& o : c.outputs) r.outputs.push_back({o, binary_data_output, {}});
  return r;
}

// The call's result from the attempt's decoded answer (its error: "response of <url>: ..."): each output
// [n_rows, ...], decompressed or read from the attempt's shared memory (output_tensor), at most max_bytes each.
// Without the engine's lock: it reads what stays fixed once sent (finish() sets the attempt count).
inline result<embed_result> attempt_result(result<net::kserve::infer_response> resp, const remote_attempt& a,
                                           std::size_t max_bytes) {
  const auto& c = *a.call;
  const auto& url = a.ep->addr.url;
  if (!resp) return fail(resp.code(), "response of " + url + ": " + resp.error().message);
  embed_result r;
  r.model_name = std::move(resp->model_name);
  r.model_version = std::move(resp->model_version);
  r.endpoint = url;
  for (auto& o : resp->outputs) {
    JITEMBED_ASSIGN_OR_RETURN(auto t, output_tensor(o, c.n_rows, max_bytes, url, a.shm ? &*a.shm : nullptr));
    r.outputs.emplace_back(o.name, std::move(t));
  }
  return r;
}

}  // namespace jitembed::client::detail
