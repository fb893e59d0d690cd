// Triton's shared-memory tensor parameters (shared_memory_region / _byte_size / _offset) on an input or a
// requested output: a tensor whose bytes are in a registered region instead of the message.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "jitembed/core/error.hpp"
#include "jitembed/net/kserve/message.hpp"

namespace jitembed::net::kserve {

// Where a tensor's bytes are: `byte_size` bytes at `offset` into the registered region `region`.
struct shared_memory_ref {
  std::string region;
  std::uint64_t byte_size = 0;
  std::uint64_t offset = 0;
};

// Whether `params` name a shared-memory region (any of the three parameters present).
inline bool has_shared_memory(const json& params) {
  if (!params.is_object()) return false;
  for (const char* k : {"shared_memory_region", "shared_memory_byte_size", "shared_memory_offset"})
    if (params.contains(k)) return true;
  return false;
}

// The shared-memory reference in `params` (nullopt: none). Errors (invalid_argument, naming `what`):
// shared_memory_region missing or not a non-empty string, shared_memory_byte_size missing or not a
// non-negative integer, shared_memory_offset not a non-negative integer.
inline result<std::optional<shared_memory_ref>> shared_memory_parameters(const json& params, std::string_view what) {
  if (!has_shared_memory(params)) return std::optional<shared_memory_ref>{};
  const std::string w(what);
  shared_memory_ref ref;
  const auto region = params.find("shared_memory_region");
  if (region == params.end() || !region->is_string() || region->get_ref<const std::string&>().empty())
    return fail(errc::invalid_argument, w + ": shared_memory_region is missing or not a non-empty string");
  ref.region = region->get<std::string>();
  const auto size = params.find("shared_memory_byte_size");
  if (size == params.end() || !size->is_number_unsigned())
    return fail(errc::invalid_argument,
                w + ": shared_memory_byte_size is missing or not a non-negative integer (region '" + ref.region + "')");
  ref.byte_size = size->get<std::uint64_t>();
  if (const auto off = params.find("shared_memory_offset"); off != params.end()) {
    if (!off->is_number_unsigned())
      return fail(errc::invalid_argument,
                  w + ": shared_memory_offset is not a non-negative integer (region '" + ref.region + "')");
    ref.offset = off->get<std::uint64_t>();
  }
  return std::optional<shared_memory_ref>{std::move(ref)};
}

// An output tensor (of a response) whose bytes went to a region: no data in the message, only its
// shared_memory_region / shared_memory_byte_size (/ shared_memory_offset when not 0) parameters.
inline infer_tensor shared_memory_output(const infer_tensor& t, const shared_memory_ref& ref, std::uint64_t written) {
  auto out = infer_tensor::view(t.name, t.type, t.shape, {});
  out.parameters = t.parameters.is_object() ? t.parameters : json::object();
  out.parameters["shared_memory_region"] = ref.region;
  out.parameters["shared_memory_byte_size"] = written;
  if (ref.offset) out.parameters["shared_memory_offset"] = ref.offset;
  return out;
}

}  // namespace jitembed::net::kserve
