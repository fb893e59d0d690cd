// Decoding KServe v2 request and response bodies (JSON header + Triton binary extension), checking every
// size, shape and offset against protocol_limits. Binary tensors view into the body: keep it alive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/net/kserve/bytes_elements.hpp"
#include "jitembed/net/kserve/datatype.hpp"
#include "jitembed/net/kserve/detail/json_parse.hpp"
#include "jitembed/net/kserve/json_data.hpp"
#include "jitembed/net/kserve/compression.hpp"
#include "jitembed/net/kserve/limits.hpp"
#include "jitembed/net/kserve/message.hpp"
#include "jitembed/net/kserve/shared_memory.hpp"

namespace jitembed::net::kserve {

namespace detail {

inline std::string shape_string(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(s[i]);
  }
  return out + "]";
}

// BYTES data must hold exactly the shape's `numel` elements; messages start "<w>: <what>holds".
inline result<void> check_bytes_count(bytes_view data, std::uint64_t numel, const std::vector<std::int64_t>& shape,
                                      const std::string& w, std::string_view what) {
  auto n = for_each_bytes_element(
      data, [](std::string_view) {}, numel);
  if (!n && n.code() == errc::limit_exceeded)
    return fail(errc::invalid_argument, w + ": " + std::string(what) + "holds more than the " + std::to_string(numel) +
                                            " BYTES elements of shape " + shape_string(shape));
  if (!n) return fail(n.code(), w + ": " + n.error().message);
  if (*n != numel)
    return fail(errc::invalid_argument, w + ": " + std::string(what) + "holds " + std::to_string(*n) +
                                            " BYTES elements, shape " + shape_string(shape) + " needs " +
                                            std::to_string(numel));
  return {};
}

// The JSON header and the binary section of a body.
struct split_body {
  json header;
  bytes_view binary;
};

inline result<split_body> split(std::string_view body, std::optional<std::size_t> header_length, const protocol_limits& lim) {
  if (body.size() > lim.max_body_bytes) {
    return fail(errc::limit_exceeded, "body of " + std::to_string(body.size()) + " bytes > max_body_bytes " + std::to_string(lim.max_body_bytes));
  }
  const std::size_t hlen = header_length.value_or(body.size());
  if (hlen > body.size()) {
    return fail(errc::corrupt_data, "Inference-Header-Content-Length " + std::to_string(hlen) + " is past the end of the " +
                                        std::to_string(body.size()) + "-byte body");
  }
  if (hlen > lim.max_header_bytes) {
    return fail(errc::limit_exceeded, "inference header of " + std::to_string(hlen) + " bytes > max_header_bytes " +
                                          std::to_string(lim.max_header_bytes));
  }
  JITEMBED_ASSIGN_OR_RETURN(auto j, parse_json_header(body.substr(0, hlen), lim.max_json_depth, lim.max_object_keys));
  if (!j.is_object()) return fail(errc::corrupt_data, "inference header is not a JSON object");
  const auto rest = body.substr(hlen);
  return split_body{std::move(j), bytes_view(reinterpret_cast<const std::byte*>(rest.data()), rest.size())};
}

inline const json* find(const json& obj, std::string_view key) {
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

inline result<std::string> optional_string(const json& obj, std::string_view key, std::string_view where) {
  const json* v = find(obj, key);
  if (!v) return std::string();
  if (!v->is_string()) return fail(errc::invalid_argument, std::string(where) + ": \"" + std::string(key) + "\" is not a string");
  return v->get<std::string>();
}

inline result<json> optional_parameters(const json& obj, std::string_view where) {
  const json* v = find(obj, "parameters");
  if (!v) return json();
  if (!v->is_object()) return fail(errc::invalid_argument, std::string(where) + ": \"parameters\" is not an object");
  return *v;
}

// Reads one tensor ("inputs" or response "outputs" entry) and takes its binary bytes from `binary` at
// `cursor`, advancing it.
inline result<infer_tensor> decode_tensor(const json& tj, std::string_view kind, std::size_t index, bytes_view binary,
                                          std::size_t& cursor, const protocol_limits& lim) {
  std::string w = std::string(kind) + " " + std::to_string(index);
  if (!tj.is_object()) return fail(errc::invalid_argument, w + " is not a JSON object");
  infer_tensor t;
  const json* name = find(tj, "name");
  if (!name || !name->is_string()) return fail(errc::invalid_argument, w + ": missing string \"name\"");
  t.name = name->get<std::string>();
  w = std::string(kind) + " '" + t.name + "'";

  const json* dt = find(tj, "datatype");
  if (!dt || !dt->is_string()) return fail(errc::invalid_argument, w + ": missing string \"datatype\"");
  const auto type = datatype_from_string(dt->get_ref<const std::string&>());
  if (!type) return fail(errc::invalid_argument, w + ": unknown datatype '" + dt->get<std::string>() + "'");
  t.type = *type;

  const json* sh = find(tj, "shape");
  if (!sh || !sh->is_array()) return fail(errc::invalid_argument, w + ": missing array \"shape\"");
  if (sh->size() > lim.max_dims) {
    return fail(errc::limit_exceeded, w + ": shape rank " + std::to_string(sh->size()) + " > max_dims " + std::to_string(lim.max_dims));
  }
  t.shape.reserve(sh->size());
  for (std::size_t d = 0; d < sh->size(); ++d) {
    const json& e = (*sh)[d];
    if (e.is_number_unsigned() && e.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX)) {
      t.shape.push_back(static_cast<std::int64_t>(e.get<std::uint64_t>()));
    } else if (e.is_number_integer() && !e.is_number_unsigned()) {
      return fail(errc::invalid_argument, w + ": negative extent " + std::to_string(e.get<std::int64_t>()) + " at dim " + std::to_string(d));
    } else {
      return fail(errc::invalid_argument, w + ": shape dim " + std::to_string(d) + " is not a non-negative integer");
    }
  }
  auto numel = checked_numel(t.shape);
  if (!numel) return fail(numel.code(), w + ": " + numel.error().message);
  if (t.type == datatype::bytes && *numel > lim.max_bytes_elements) {
    return fail(errc::limit_exceeded, w + ": " + std::to_string(*numel) + " BYTES elements > max_bytes_elements " +
                                          std::to_string(lim.max_bytes_elements));
  }

  JITEMBED_ASSIGN_OR_RETURN(t.parameters, optional_parameters(tj, w));
  std::optional<std::uint64_t> binary_size;
  if (t.parameters.is_object()) {
    // Triton's shared-memory extension: the message carries no data for a tensor in a region.
    JITEMBED_ASSIGN_OR_RETURN(const auto shm, shared_memory_parameters(t.parameters, w));
    if (shm) {
      if (t.parameters.contains("binary_data_size") || find(tj, "data"))
        return fail(errc::invalid_argument, w + ": has shared_memory_region '" + shm->region + "' and also data in the message");
      t.binary = true;
      return t;
    }
    if (const auto it = t.parameters.find("binary_data_size"); it != t.parameters.end()) {
      if (!it->is_number_unsigned()) return fail(errc::invalid_argument, w + ": binary_data_size is not a non-negative integer");
      binary_size = it->get<std::uint64_t>();
      t.parameters.erase(it);
    }
    if (t.parameters.empty()) t.parameters = json();
  }

  const json* data = find(tj, "data");
  // A compressed tensor (net/kserve/compression.hpp): its binary data is a zstd frame, checked against the
  // shape once decompressed (by the receiver that asked for it), not here.
  JITEMBED_ASSIGN_OR_RETURN(const auto compressed, compressed_tensor(t.parameters, w));
  if (compressed && !binary_size) return fail(errc::invalid_argument, w + ": compressed, but not in the binary section");
  if (binary_size) {
    if (data) return fail(errc::invalid_argument, w + ": has both \"data\" and binary_data_size");
    t.binary = true;
    if (t.type != datatype::bytes && !compressed) {
      const std::uint64_t es = element_size(t.type);
      if (*numel > ~std::uint64_t{0} / es) return fail(errc::shape_overflow, w + ": byte size of shape " + shape_string(t.shape) + " overflows");
      const std::uint64_t expect = *numel * es;
      if (expect != *binary_size) {
        return fail(errc::invalid_argument, w + ": binary_data_size " + std::to_string(*binary_size) + " does not match shape " +
                                                shape_string(t.shape) + " of " + std::string(to_string(t.type)) + " = " +
                                                std::to_string(expect) + " bytes");
      }
    }
    if (*binary_size > binary.size() - cursor) {
      return fail(errc::truncated, w + ": binary_data_size " + std::to_string(*binary_size) + " at offset " + std::to_string(cursor) +
                                       " runs past the end of the " + std::to_string(binary.size()) + "-byte binary section");
    }
    t.data = binary.subspan(cursor, static_cast<std::size_t>(*binary_size));
    cursor += static_cast<std::size_t>(*binary_size);
    if (t.type == datatype::bytes && !compressed)
      JITEMBED_TRY(check_bytes_count(t.data, *numel, t.shape, w, "binary data "));
    return t;
  }
  if (!data && kind == "output" && !compressed) {
    // Triton's HTTP answer for an output it wrote into the shared-memory region its request named.
    t.binary = true;
    return t;
  }
  if (!data) return fail(errc::invalid_argument, w + ": no data (neither \"data\" nor binary_data_size)");
  t.binary = false;
  JITEMBED_ASSIGN_OR_RETURN(auto bytes, json_data_to_bytes(*data, t.type, *numel, w, lim.max_json_depth));
  auto buf = std::make_shared<const byte_buffer>(std::move(bytes));
  t.data = bytes_view(buf->data(), buf->size());
  t.storage = std::move(buf);
  return t;
}

inline result<std::vector<infer_tensor>> decode_tensors(const json& header, std::string_view key, std::string_view kind,
                                                        bytes_view binary, const protocol_limits& lim) {
  const json* arr = find(header, key);
  if (!arr) return fail(errc::invalid_argument, "inference header has no \"" + std::string(key) + "\"");
  if (!arr->is_array()) return fail(errc::invalid_argument, "\"" + std::string(key) + "\" is not an array");
  if (arr->size() > lim.max_tensors) {
    return fail(errc::limit_exceeded, std::to_string(arr->size()) + " " + std::string(key) + " > max_tensors " + std::to_string(lim.max_tensors));
  }
  std::vector<infer_tensor> out;
  out.reserve(arr->size());
  std::unordered_set<std::string_view> names;
  std::size_t cursor = 0;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    JITEMBED_ASSIGN_OR_RETURN(auto t, decode_tensor((*arr)[i], kind, i, binary, cursor, lim));
    out.push_back(std::move(t));
  }
  for (const auto& t : out) {
    if (!names.insert(t.name).second) return fail(errc::invalid_argument, "duplicate " + std::string(kind) + " name '" + t.name + "'");
  }
  if (cursor != binary.size()) {
    return fail(errc::corrupt_data, "binary section has " + std::to_string(binary.size()) + " bytes but the " + std::string(key) +
                                        " declare " + std::to_string(cursor));
  }
  return out;
}

}  // namespace detail

// Decodes a request body. header_length is the Inference-Header-Content-Length HTTP header (nullopt: the
// whole body is JSON). Binary tensors view into `body`. model/version are left empty (they are in the URL).
inline result<infer_request> decode_request(std::string_view body, std::optional<std::size_t> header_length,
                                            const protocol_limits& lim = {}) {
  JITEMBED_ASSIGN_OR_RETURN(auto parts, detail::split(body, header_length, lim));
  const json& h = parts.header;
  infer_request r;
  JITEMBED_ASSIGN_OR_RETURN(r.id, detail::optional_string(h, "id", "request"));
  JITEMBED_ASSIGN_OR_RETURN(r.parameters, detail::optional_parameters(h, "request"));
  if (r.parameters.is_object()) {
    for (const char* k : {"priority", "timeout", "sequence_start", "sequence_end", "binary_data_output"}) {
      const auto it = r.parameters.find(k);
      if (it == r.parameters.end()) continue;
      const bool is_bool_param = std::string_view(k).starts_with("sequence_") || std::string_view(k) == "binary_data_output";
      if (is_bool_param ? !it->is_boolean() : !it->is_number_unsigned()) {
        return fail(errc::invalid_argument, std::string("request parameter '") + k + "' is not " +
                                                (is_bool_param ? "a boolean" : "a non-negative integer"));
      }
    }
  }
  JITEMBED_ASSIGN_OR_RETURN(r.inputs, detail::decode_tensors(h, "inputs", "input", parts.binary, lim));

  if (const json* outs = detail::find(h, "outputs")) {
    if (!outs->is_array()) return fail(errc::invalid_argument, "\"outputs\" is not an array");
    if (outs->size() > lim.max_tensors) {
      return fail(errc::limit_exceeded, std::to_string(outs->size()) + " outputs > max_tensors " + std::to_string(lim.max_tensors));
    }
    std::unordered_set<std::string> names;
    for (std::size_t i = 0; i < outs->size(); ++i) {
      const json& o = (*outs)[i];
      const std::string w = "requested output " + std::to_string(i);
      if (!o.is_object()) return fail(errc::invalid_argument, w + " is not a JSON object");
      const json* name = detail::find(o, "name");
      if (!name || !name->is_string()) return fail(errc::invalid_argument, w + ": missing string \"name\"");
      requested_output ro;
      ro.name = name->get<std::string>();
      if (!names.insert(ro.name).second) return fail(errc::invalid_argument, "duplicate requested output name '" + ro.name + "'");
      JITEMBED_ASSIGN_OR_RETURN(ro.parameters, detail::optional_parameters(o, "requested output '" + ro.name + "'"));
      if (ro.parameters.is_object()) {
        JITEMBED_TRY(shared_memory_parameters(ro.parameters, "requested output '" + ro.name + "'"));
        if (const auto it = ro.parameters.find("binary_data"); it != ro.parameters.end()) {
          if (!it->is_boolean()) return fail(errc::invalid_argument, "requested output '" + ro.name + "': binary_data is not a boolean");
          ro.binary_data = it->get<bool>();
          ro.parameters.erase(it);
        }
        if (ro.parameters.empty()) ro.parameters = json();
      }
      r.outputs.push_back(std::move(ro));
    }
  }
  return r;
}

// Decodes a response body (what a client receives with HTTP 200).
inline result<infer_response> decode_response(std::string_view body, std::optional<std::size_t> header_length,
                                              const protocol_limits& lim = {}) {
  JITEMBED_ASSIGN_OR_RETURN(auto parts, detail::split(body, header_length, lim));
  const json& h = parts.header;
  infer_response r;
  JITEMBED_ASSIGN_OR_RETURN(r.id, detail::optional_string(h, "id", "response"));
  JITEMBED_ASSIGN_OR_RETURN(r.model_name, detail::optional_string(h, "model_name", "response"));
  JITEMBED_ASSIGN_OR_RETURN(r.model_version, detail::optional_string(h, "model_version", "response"));
  JITEMBED_ASSIGN_OR_RETURN(r.parameters, detail::optional_parameters(h, "response"));
  JITEMBED_ASSIGN_OR_RETURN(r.outputs, detail::decode_tensors(h, "outputs", "output", parts.binary, lim));
  return r;
}

}  // namespace jitembed::net::kserve
