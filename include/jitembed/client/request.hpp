// What one embed() call sends and gets back: the rows of one model's request, and the stacked outputs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/core/named_tensors.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::client {

// One request: N rows for one model. Rows are BYTES elements: a jitembed record (input "sample": the
// server feeds the model the record's first field of its kind) or raw field bytes (input "image", "video",
// "text", or a Triton model's input name). Typed rows (datatype other than BYTES: token ids as INT64 or
// INT32 to "input_ids", a tensor model's declared input) are each the raw little-endian bytes of one
// row_shape tensor, sent as one [N, row_shape...] tensor of that datatype; a row of another size is
// invalid_argument before anything is sent. embed() serializes the rows before it returns: the caller's
// bytes need not outlive the call.
struct embed_request {
  std::string model;
  std::string version;                      // empty: the server's newest
  std::string input = "sample";
  std::vector<bytes_view> rows;
  std::vector<std::string> outputs;         // empty: every output of the model
  std::optional<std::chrono::milliseconds> timeout;  // deadline from now; default client_options.request_timeout
  std::optional<hash128> coalesce_key;      // concurrent requests with the same key go out once
  std::string datatype = "BYTES";           // KServe datatype of the rows ("INT64", "INT32", "FP32", ...)
  std::vector<std::int64_t> row_shape;      // typed rows: the dims of one row (BYTES: empty)
};

// The outputs of one request, stacked over its rows: tensor [N, ...] per output, in the server's order.
struct embed_result {
  std::string model_name;
  std::string model_version;
  named_tensors outputs;
  // Empty when every row succeeded. Otherwise N entries: errc::ok for a row that succeeded, else why that
  // row failed on its own (a 4xx on a multi-row request is resent row by row); a failed row's outputs
  // are zeros.
  std::vector<error_info> row_errors;
  std::string endpoint;                      // the endpoint that answered ("local" in local mode)
  int attempts = 1;                          // attempts made, hedges included

  const tensor* find(std::string_view name) const noexcept { return find_tensor(outputs, name); }
  bool row_ok(std::size_t i) const noexcept { return row_errors.empty() || row_errors[i].code == errc::ok; }
};

// Called exactly once per request, on a client thread (keep it short: hand long work elsewhere).
using embed_callback = std::function<void(result<embed_result>)>;

}  // namespace jitembed::client
