// Encoding KServe v2 requests and responses: the JSON header written byte for byte as tritonclient
// (requests) and Triton (responses) write it, plus the binary pieces for scatter/gather (no payload copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/net/kserve/bytes_elements.hpp"
#include "jitembed/net/kserve/datatype.hpp"
#include "jitembed/net/kserve/detail/json_writer.hpp"
#include "jitembed/net/kserve/json_data.hpp"
#include "jitembed/net/kserve/compression.hpp"
#include "jitembed/net/kserve/message.hpp"
#include "jitembed/net/kserve/shared_memory.hpp"

namespace jitembed::net::kserve {

namespace detail {

enum class tensor_form { keep, all_binary, all_json };

inline bool travels_binary(const infer_tensor& t, tensor_form form) {
  switch (form) {
    case tensor_form::keep: return t.binary;
    case tensor_form::all_binary: return true;
    case tensor_form::all_json: return binary_only(t.type);  // JSON cannot carry FP16/BF16
  }
  return true;
}

// The tensor's bytes must be exactly what its shape and datatype say.
inline result<void> check_tensor_data(const infer_tensor& t, const std::string& w) {
  auto numel = checked_numel(t.shape);
  if (!numel) return fail(numel.code(), w + ": " + numel.error().message);
  if (t.type == datatype::bytes) {
    auto n = for_each_bytes_element(t.data, [](std::string_view) {}, *numel);
    if (!n) return fail(n.code() == errc::limit_exceeded ? errc::invalid_argument : n.code(), w + ": BYTES data: " + n.error().message);
    if (*n != *numel) {
      return fail(errc::invalid_argument, w + ": " + std::to_string(*n) + " BYTES elements, shape needs " + std::to_string(*numel));
    }
    return {};
  }
  const std::uint64_t es = element_size(t.type);
  if (*numel > ~std::uint64_t{0} / es || *numel * es != t.data.size()) {
    return fail(errc::invalid_argument, w + ": " + std::to_string(t.data.size()) + " bytes of data do not match shape of " +
                                            std::to_string(*numel) + " " + std::string(to_string(t.type)) + " elements");
  }
  return {};
}

inline void write_key(std::string& out, std::string_view key) {
  out += '"';
  out += key;
  out += "\":";
}

// Writes "parameters":{...} from the tensor's own parameters plus binary_data_size; nothing when empty.
inline result<void> write_parameters(std::string& out, const json& params, std::string_view extra_key, const json* extra_value,
                                     std::string_view skip_key) {
  if (!params.is_null() && !params.is_object()) return fail(errc::invalid_argument, "parameters is not a JSON object");
  std::string body;
  bool first = true;
  if (params.is_object()) {
    for (auto it = params.begin(); it != params.end(); ++it) {
      if (it.key() == skip_key || it.key() == extra_key) continue;
      if (!first) body += ',';
      first = false;
      if (!write_json_string(body, it.key())) return fail(errc::invalid_utf8, "parameter name is not valid UTF-8");
      body += ':';
      JITEMBED_TRY(write_json_value(body, it.value()));
    }
  }
  if (extra_value) {
    if (!first) body += ',';
    first = false;
    write_key(body, extra_key);
    JITEMBED_TRY(write_json_value(body, *extra_value));
  }
  if (first) return {};
  out += ",\"parameters\":{";
  out += body;
  out += '}';
  return {};
}

// One tensor object. Requests (tritonclient) write name, shape, datatype; responses (Triton) write name,
// datatype, shape; both then parameters and data.
inline result<void> write_tensor(std::string& out, encoded_message& msg, const infer_tensor& t, tensor_form form,
                                 bool response_order, std::string_view kind) {
  const std::string w = std::string(kind) + " '" + t.name + "'";
  // A tensor in a shared-memory region: a request's input travels as its shared_memory_* parameters alone;
  // a response's output as name, datatype and shape alone, as Triton's HTTP endpoint writes it (tritonclient's
  // C++ client, perf_analyzer's, reads any "parameters" of an output as binary_data_size).
  const bool in_shared_memory = has_shared_memory(t.parameters);
  // A compressed tensor (net/kserve/compression.hpp) carries a zstd frame: binary, and not its shape's size.
  JITEMBED_ASSIGN_OR_RETURN(const auto compressed, compressed_tensor(t.parameters, w));
  if (compressed && !travels_binary(t, form)) return fail(errc::invalid_argument, w + ": a compressed tensor travels binary");
  if (!in_shared_memory && !compressed) JITEMBED_TRY(check_tensor_data(t, w));
  out += "{\"name\":";
  if (!write_json_string(out, t.name)) return fail(errc::invalid_utf8, w + ": name is not valid UTF-8");
  auto shape = [&] {
    out += ",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(t.shape[i]);
    }
    out += ']';
  };
  auto type = [&] {
    out += ",\"datatype\":\"";
    out += to_string(t.type);
    out += '"';
  };
  if (response_order) {
    type();
    shape();
  } else {
    shape();
    type();
  }
  const bool binary = travels_binary(t, form);
  if (in_shared_memory) {
    if (!response_order) JITEMBED_TRY(write_parameters(out, t.parameters, {}, nullptr, "binary_data_size"));
  } else if (binary) {
    const json size(static_cast<std::uint64_t>(t.data.size()));
    JITEMBED_TRY(write_parameters(out, t.parameters, "binary_data_size", &size, {}));
    if (!t.data.empty()) msg.binary.push_back(t.data);
    msg.header_length = 0;  // the real length is set when the header is complete
  } else {
    JITEMBED_TRY(write_parameters(out, t.parameters, {}, nullptr, "binary_data_size"));
    out += ",\"data\":";
    JITEMBED_TRY(write_json_data(out, t, w));
  }
  out += '}';
  return {};
}

// ,"parameters":{...} of a request or response; nothing when null or empty.
inline result<void> write_message_parameters(std::string& out, const json& p, std::string_view what) {
  if (p.is_null() || (p.is_object() && p.empty())) return {};
  if (!p.is_object()) return fail(errc::invalid_argument, std::string(what) + " parameters is not a JSON object");
  out += ",\"parameters\":";
  return write_json_value(out, p);
}

inline void finish(encoded_message& msg) {
  if (msg.header_length) msg.header_length = msg.header.size();
}

inline result<encoded_message> encode_request(const infer_request& r, tensor_form form) {
  encoded_message msg;
  std::string& out = msg.header;
  out += '{';
  if (!r.id.empty()) {
    out += "\"id\":";
    if (!write_json_string(out, r.id)) return fail(errc::invalid_utf8, "request id is not valid UTF-8");
    out += ',';
  }
  out += "\"inputs\":[";
  for (std::size_t i = 0; i < r.inputs.size(); ++i) {
    if (i) out += ',';
    JITEMBED_TRY(write_tensor(out, msg, r.inputs[i], form, false, "input"));
  }
  out += ']';
  if (!r.outputs.empty()) {
    out += ",\"outputs\":[";
    for (std::size_t i = 0; i < r.outputs.size(); ++i) {
      const auto& o = r.outputs[i];
      if (i) out += ',';
      out += "{\"name\":";
      if (!write_json_string(out, o.name)) return fail(errc::invalid_utf8, "requested output name is not valid UTF-8");
      const json flag(o.binary_data.value_or(false));
      JITEMBED_TRY(write_parameters(out, o.parameters, "binary_data", o.binary_data ? &flag : nullptr, {}));
      out += '}';
    }
    out += ']';
  }
  JITEMBED_TRY(write_message_parameters(out, r.parameters, "request"));
  out += '}';
  finish(msg);
  return msg;
}

inline result<encoded_message> encode_response(const infer_response& r, tensor_form form) {
  encoded_message msg;
  std::string& out = msg.header;
  out += '{';
  if (!r.id.empty()) {
    out += "\"id\":";
    if (!write_json_string(out, r.id)) return fail(errc::invalid_utf8, "response id is not valid UTF-8");
    out += ',';
  }
  out += "\"model_name\":";
  if (!write_json_string(out, r.model_name)) return fail(errc::invalid_utf8, "model name is not valid UTF-8");
  out += ",\"model_version\":";
  if (!write_json_string(out, r.model_version)) return fail(errc::invalid_utf8, "model version is not valid UTF-8");
  JITEMBED_TRY(write_message_parameters(out, r.parameters, "response"));
  out += ",\"outputs\":[";
  for (std::size_t i = 0; i < r.outputs.size(); ++i) {
    if (i) out += ',';
    JITEMBED_TRY(write_tensor(out, msg, r.outputs[i], form, true, "output"));
  }
  out += "]}";
  finish(msg);
  return msg;
}

}  // namespace detail

// Each tensor travels as its `binary` flag says.
inline result<encoded_message> encode_request(const infer_request& r) { return detail::encode_request(r, detail::tensor_form::keep); }
// binary: every input in the binary section; otherwise every input as JSON except FP16/BF16, which JSON
// cannot carry and so stay binary.
inline result<encoded_message> encode_request(const infer_request& r, bool binary) {
  return detail::encode_request(r, binary ? detail::tensor_form::all_binary : detail::tensor_form::all_json);
}

inline result<encoded_message> encode_response(const infer_response& r) { return detail::encode_response(r, detail::tensor_form::keep); }
inline result<encoded_message> encode_response(const infer_response& r, bool binary) {
  return detail::encode_response(r, binary ? detail::tensor_form::all_binary : detail::tensor_form::all_json);
}

}  // namespace jitembed::net::kserve
