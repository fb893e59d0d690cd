// The KServe v2 inference request/response model: tensors, requested outputs, and encoded messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"
#include "jitembed/net/kserve/bytes_elements.hpp"
#include "jitembed/net/kserve/datatype.hpp"

namespace jitembed::net::kserve {

// Key order is kept so that a decoded message re-encodes to the sender's bytes.
using json = nlohmann::ordered_json;

// One input or output tensor. `data` holds the elements in the binary extension's layout whatever way
// they travelled: little-endian, row-major; BYTES as uint32-LE length + bytes per element. It is a view
// into the message body (zero copy) or into `storage`.
struct infer_tensor {
  std::string name;
  datatype type = datatype::fp32;
  std::vector<std::int64_t> shape;
  json parameters;            // tensor parameters other than binary_data_size (the codec manages that)
  bytes_view data;            // the elements (see above)
  jitembed::keep_alive storage;  // owns `data` when it is not a view into a body
  bool binary = true;         // travels in the binary section (false: as JSON "data")

  // A tensor viewing caller-owned bytes; the caller keeps them alive while the tensor is used.
  static infer_tensor view(std::string name, datatype type, std::vector<std::int64_t> shape, bytes_view data,
                           bool binary = true) {
    infer_tensor t;
    t.name = std::move(name), t.type = type, t.shape = std::move(shape), t.data = data, t.binary = binary;
    return t;
  }
  // A tensor owning its bytes.
  static infer_tensor owned(std::string name, datatype type, std::vector<std::int64_t> shape, byte_buffer bytes,
                            bool binary = true) {
    auto buf = std::make_shared<const byte_buffer>(std::move(bytes));
    infer_tensor t = view(std::move(name), type, std::move(shape), bytes_view(buf->data(), buf->size()), binary);
    t.storage = std::move(buf);
    return t;
  }
  // A tensor owning a copy of `values` (fixed-size datatypes).
  template <class T>
  static infer_tensor from_values(std::string name, std::vector<std::int64_t> shape, std::span<const T> values,
                                  bool binary = true) {
    byte_buffer bytes(values.size_bytes());
    if (!values.empty()) std::memcpy(bytes.data(), values.data(), values.size_bytes());
    return owned(std::move(name), datatype_of_v<T>, std::move(shape), std::move(bytes), binary);
  }
  template <class T>
  static infer_tensor from_values(std::string name, std::vector<std::int64_t> shape, const std::vector<T>& values,
                                  bool binary = true) {
    if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> is packed: one byte 0/1 per element
      byte_buffer bytes(values.size());
      for (std::size_t i = 0; i < values.size(); ++i) bytes[i] = static_cast<std::byte>(values[i] ? 1 : 0);
      return owned(std::move(name), datatype::boolean, std::move(shape), std::move(bytes), binary);
    } else {
      return from_values<T>(std::move(name), std::move(shape), std::span<const T>(values), binary);
    }
  }
  // A BYTES tensor owning the serialized `elements`.
  static infer_tensor from_strings(std::string name, std::vector<std::int64_t> shape,
                                   const std::vector<std::string_view>& elements, bool binary = true) {
    auto bytes = encode_bytes_elements(elements);
    return owned(std::move(name), datatype::bytes, std::move(shape), std::move(bytes).value(), binary);
  }

  result<std::uint64_t> numel() const { return checked_numel(shape); }

  // A copy of the elements as T (T's datatype must be `type`); copies because a view into a body may be
  // unaligned.
  template <class T>
  result<std::vector<T>> values() const {
    if (datatype_of_v<T> != type) {
      return fail(errc::dtype_mismatch, "tensor '" + name + "' is " + std::string(to_string(type)) + ", not " +
                                            std::string(to_string(datatype_of_v<T>)));
    }
    if (data.size() % sizeof(T) != 0) return fail(errc::corrupt_data, "tensor '" + name + "': size not a multiple of the element size");
    std::vector<T> out(data.size() / sizeof(T));
    if constexpr (std::is_same_v<T, bool>) {
      for (std::size_t i = 0; i < data.size(); ++i) out[i] = data[i] != std::byte{0};
    } else {
      if (!out.empty()) std::memcpy(out.data(), data.data(), data.size());
    }
    return out;
  }

  // Views of the elements of a BYTES tensor; exactly numel() of them.
  result<std::vector<std::string_view>> strings() const {
    if (type != datatype::bytes) return fail(errc::dtype_mismatch, "tensor '" + name + "' is " + std::string(to_string(type)) + ", not BYTES");
    JITEMBED_ASSIGN_OR_RETURN(auto n, numel());
    return split_bytes_elements(data, n);
  }

  // A jitembed::tensor_view over the bytes (datatypes that map to jitembed::dtype only).
  result<tensor_view> as_tensor_view() const {
    const auto dt = to_dtype(type);
    if (!dt) return fail(errc::dtype_mismatch, "tensor '" + name + "': " + std::string(to_string(type)) + " has no jitembed dtype");
    if (shape.size() > kMaxDims) return fail(errc::limit_exceeded, "tensor '" + name + "': rank > 8");
    JITEMBED_ASSIGN_OR_RETURN(auto nb, checked_nbytes(shape, *dt));
    if (nb != data.size()) return fail(errc::corrupt_data, "tensor '" + name + "': data size disagrees with its shape");
    return tensor_view(static_cast<const void*>(data.data()), *dt, jitembed::shape(std::span<const std::int64_t>(shape)));
  }
};

// An output the client asks for; binary_data unset means "as the request's binary_data_output says".
struct requested_output {
  std::string name;
  std::optional<bool> binary_data;
  json parameters;  // parameters other than binary_data (e.g. "classification")
};

// An inference request. model and version come from the URL, not the body; parameters keeps every request
// parameter in order (see the accessors below).
struct infer_request {
  std::string model;
  std::string version;
  std::string id;
  json parameters;
  std::vector<infer_tensor> inputs;
  std::vector<requested_output> outputs;
};

struct infer_response {
  std::string model_name;
  std::string model_version;
  std::string id;
  json parameters;
  std::vector<infer_tensor> outputs;

  const infer_tensor* find_output(std::string_view n) const {
    for (const auto& t : outputs)
      if (t.name == n) return &t;
    return nullptr;
  }
};

namespace detail {
inline std::optional<std::uint64_t> unsigned_parameter(const json& params, std::string_view key) {
  if (!params.is_object()) return std::nullopt;
  const auto it = params.find(key);
  if (it == params.end()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  if (it->is_number_integer() && it->get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(it->get<std::int64_t>());
  return std::nullopt;
}
}  // namespace detail

// Request parameters Triton reserves (decode_request checks their types). 0: the model's default.
inline std::uint64_t priority(const infer_request& r) { return detail::unsigned_parameter(r.parameters, "priority").value_or(0); }
// Microseconds; nullopt when the request leaves it to the model's default.
inline std::optional<std::uint64_t> timeout_us(const infer_request& r) { return detail::unsigned_parameter(r.parameters, "timeout"); }
inline bool binary_data_output(const infer_request& r) {
  if (r.parameters.is_object()) {
    const auto it = r.parameters.find("binary_data_output");
    if (it != r.parameters.end() && it->is_boolean()) return it->get<bool>();
  }
  return false;
}

// Whether the server returns output `name` in the binary section: the requested output's binary_data,
// else the request's binary_data_output, else JSON; FP16/BF16 always binary (JSON cannot carry them).
inline bool wants_binary(const infer_request& r, std::string_view name, datatype type) {
  if (binary_only(type)) return true;
  for (const auto& o : r.outputs)
    if (o.name == name && o.binary_data) return *o.binary_data;
  return binary_data_output(r);
}

// An encoded message for scatter/gather writing: the JSON header, then the binary pieces in order. The
// pieces view the tensors' bytes (no copy): keep the request/response alive until the message is sent.
struct encoded_message {
  std::string header;
  std::vector<bytes_view> binary;
  // Inference-Header-Content-Length; set whenever a tensor travels binary (as tritonclient does).
  std::optional<std::size_t> header_length;

  std::size_t body_size() const noexcept {
    std::size_t n = header.size();
    for (auto b : binary) n += b.size();
    return n;
  }
  // The whole body in one string (tests, small messages).
  std::string flatten() const {
    std::string out;
    out.reserve(body_size());
    out += header;
    for (auto b : binary) out.append(reinterpret_cast<const char*>(b.data()), b.size());
    return out;
  }
};

}  // namespace jitembed::net::kserve
