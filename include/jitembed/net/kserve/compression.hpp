// The names of jitembed's compressed-tensor extension of KServe v2 (`jitembed_compression: "zstd_shuffle"`,
// `jitembed_raw_byte_size`; docs/server.md); the codec is codec/zstd_wire.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "jitembed/core/error.hpp"
#include "jitembed/net/kserve/message.hpp"

namespace jitembed::net::kserve {

inline constexpr std::string_view kCompressionParameter = "jitembed_compression";
inline constexpr std::string_view kRawByteSizeParameter = "jitembed_raw_byte_size";
inline constexpr std::string_view kZstdShuffle = "zstd_shuffle";  // byte-plane split by element size, then zstd

// Whether the request offers compressed outputs (its jitembed_compression parameter names a codec this
// side knows).
inline bool accepts_compression(const json& request_parameters) {
  if (!request_parameters.is_object()) return false;
  const auto it = request_parameters.find(kCompressionParameter);
  return it != request_parameters.end() && it->is_string() && it->get_ref<const std::string&>() == kZstdShuffle;
}

// The raw byte size of a compressed tensor (nullopt: the tensor is not compressed). Errors
// (invalid_argument naming `what`): an unknown codec, a raw size missing or not a non-negative integer.
inline result<std::optional<std::uint64_t>> compressed_tensor(const json& tensor_parameters, std::string_view what) {
  if (!tensor_parameters.is_object()) return std::optional<std::uint64_t>{};
  const auto c = tensor_parameters.find(kCompressionParameter);
  if (c == tensor_parameters.end()) return std::optional<std::uint64_t>{};
  if (!c->is_string() || c->get_ref<const std::string&>() != kZstdShuffle)
    return fail(errc::invalid_argument, std::string(what) + ": unknown " + std::string(kCompressionParameter) + " " +
                                            c->dump() + " (known: \"" + std::string(kZstdShuffle) + "\")");
  const auto n = tensor_parameters.find(kRawByteSizeParameter);
  if (n == tensor_parameters.end() || !n->is_number_unsigned())
    return fail(errc::invalid_argument, std::string(what) + ": compressed, but " + std::string(kRawByteSizeParameter) +
                                            " is missing or not a non-negative integer");
  return std::optional<std::uint64_t>{n->get<std::uint64_t>()};
}

// Marks `t` as compressed (its data must then be the compressed bytes).
inline void mark_compressed(infer_tensor& t, std::uint64_t raw_byte_size) {
  if (!t.parameters.is_object()) t.parameters = json::object();
  t.parameters[std::string(kCompressionParameter)] = kZstdShuffle;
  t.parameters[std::string(kRawByteSizeParameter)] = raw_byte_size;
}

// Drops the compression marks (after decompressing in place).
inline void clear_compressed(infer_tensor& t) {
  if (!t.parameters.is_object()) return;
  t.parameters.erase(std::string(kCompressionParameter));
  t.parameters.erase(std::string(kRawByteSizeParameter));
  if (t.parameters.empty()) t.parameters = json();
}

}  // namespace jitembed::net::kserve
