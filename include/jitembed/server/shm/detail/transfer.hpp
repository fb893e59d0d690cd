// Requests' bytes in shared memory, server side: inputs read from registered regions, outputs written into
// them. The pipeline calls these for every request, whichever front end decoded it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/net/kserve/bytes_elements.hpp"
#include "jitembed/net/kserve/datatype.hpp"
#include "jitembed/net/kserve/decode.hpp"
#include "jitembed/net/kserve/limits.hpp"
#include "jitembed/net/kserve/message.hpp"
#include "jitembed/net/kserve/shared_memory.hpp"
#include "jitembed/server/shm/detail/registry.hpp"

namespace jitembed::server::detail {

// Whether the request names a region on an input or a requested output.
inline bool uses_shared_memory(const net::kserve::infer_request& req) {
  for (const auto& t : req.inputs)
    if (net::kserve::has_shared_memory(t.parameters)) return true;
  for (const auto& o : req.outputs)
    if (net::kserve::has_shared_memory(o.parameters)) return true;
  return false;
}

// Gives every input of `req` that names a region a copy of its bytes (so that the region's owner cannot
// change them under the request). Errors (invalid_argument, naming the input and the region): an unknown
// region, bytes past its end, a byte_size or BYTES count that does not match the shape, a truncated object;
// limit_exceeded: the inputs together over lim.max_body_bytes, checked before anything is read.
inline result<void> read_shared_memory_inputs(const shared_memory_registry& shm, net::kserve::infer_request& req,
                                              const net::kserve::protocol_limits& lim) {
  std::uint64_t total = 0;
  for (const auto& t : req.inputs) {
    JITEMBED_ASSIGN_OR_RETURN(const auto ref,
                              net::kserve::shared_memory_parameters(t.parameters, "input '" + t.name + "'"));
    if (!ref) continue;
    total = ref->byte_size > ~std::uint64_t{0} - total ? ~std::uint64_t{0} : total + ref->byte_size;  // saturates
    if (total > lim.max_body_bytes)
      return fail(errc::limit_exceeded, "input '" + t.name + "': shared_memory_byte_size " +
                                            std::to_string(ref->byte_size) + " brings the inputs in shared memory to " +
                                            std::to_string(total) + " bytes > max_body_bytes " +
                                            std::to_string(lim.max_body_bytes));
  }
  for (auto& t : req.inputs) {
    const std::string w = "input '" + t.name + "'";
    JITEMBED_ASSIGN_OR_RETURN(const auto ref, net::kserve::shared_memory_parameters(t.parameters, w));
    if (!ref) continue;
    JITEMBED_ASSIGN_OR_RETURN(const auto region, shm.find(ref->region, w));
    JITEMBED_TRY(region->check_bounds(ref->offset, ref->byte_size, w));
    if (t.type != net::kserve::datatype::bytes) {
      JITEMBED_ASSIGN_OR_RETURN(const auto numel, checked_numel(t.shape));
      const std::uint64_t es = net::kserve::element_size(t.type);
      if (numel > ~std::uint64_t{0} / es || numel * es != ref->byte_size)
        return fail(errc::invalid_argument, w + ": shared_memory_byte_size " + std::to_string(ref->byte_size) +
                                                " does not match shape " + net::kserve::detail::shape_string(t.shape) +
                                                " of " + std::string(net::kserve::to_string(t.type)));
    }
    auto buf = std::make_shared<byte_buffer>(static_cast<std::size_t>(ref->byte_size));
    JITEMBED_TRY(region->read(ref->offset, std::span<std::byte>(buf->data(), buf->size()), w));
    t.data = bytes_view(buf->data(), buf->size());
    t.storage = std::move(buf);
    t.parameters.erase("shared_memory_region");
    t.parameters.erase("shared_memory_byte_size");
    t.parameters.erase("shared_memory_offset");
    if (t.parameters.empty()) t.parameters = net::kserve::json();
    if (t.type == net::kserve::datatype::bytes) {  // exactly the shape's elements, as in a body's binary section
      JITEMBED_ASSIGN_OR_RETURN(const auto numel, checked_numel(t.shape));
      JITEMBED_TRY(net::kserve::detail::check_bytes_count(t.data, numel, t.shape,
                                                          w + " (shared memory region '" + ref->region + "')", ""));
    }
  }
  return {};
}

// A requested output that goes to a region, the region held from the request's start to its answer.
struct shared_memory_output {
  std::string name;
  net::kserve::shared_memory_ref ref;
  shared_memory_registry::region_ptr region;
};

// The requested outputs that name a region, their regions looked up and held. Errors (invalid_argument,
// naming the output and the region): a region not registered; shared_memory_offset / _byte_size past
// the region's end.
inline result<std::vector<shared_memory_output>> hold_shared_memory_outputs(
    const shared_memory_registry& shm, const std::vector<net::kserve::requested_output>& outputs) {
  std::vector<shared_memory_output> held;
  for (const auto& o : outputs) {
    const std::string w = "output '" + o.name + "'";
    JITEMBED_ASSIGN_OR_RETURN(auto ref, net::kserve::shared_memory_parameters(o.parameters, w));
    if (!ref) continue;
    JITEMBED_ASSIGN_OR_RETURN(auto region, shm.find(ref->region, w));
    JITEMBED_TRY(region->check_bounds(ref->offset, ref->byte_size, w));
    held.push_back({o.name, std::move(*ref), std::move(region)});
  }
  return held;
}

// The response with each output of `outputs` written into its region and replaced by its shared_memory_*
// parameters; every output is checked before any is written. Errors (invalid_argument, naming the output
// and the region): an output larger than its shared_memory_byte_size; a truncated object.
inline result<std::shared_ptr<const net::kserve::infer_response>> write_shared_memory_outputs(
    std::shared_ptr<const net::kserve::infer_response> resp, const std::vector<shared_memory_output>& outputs) {
  if (outputs.empty()) return resp;
  auto find_output = [&](std::string_view name) -> const shared_memory_output* {
    for (const auto& o : outputs)
      if (o.name == name) return &o;
    return nullptr;
  };
  for (const auto& t : resp->outputs) {
    const auto* o = find_output(t.name);
    if (o && t.data.size() > o->ref.byte_size)
      return fail(errc::invalid_argument, "output '" + t.name + "': " + std::to_string(t.data.size()) +
                                              " bytes do not fit shared_memory_byte_size " +
                                              std::to_string(o->ref.byte_size) + " of shared memory region '" +
                                              o->ref.region + "'");
  }
  auto out = std::make_shared<net::kserve::infer_response>(*resp);
  for (auto& t : out->outputs) {
    const auto* o = find_output(t.name);
    if (!o) continue;
    JITEMBED_TRY(o->region->write(o->ref.offset, t.data, "output '" + t.name + "'"));
    t = net::kserve::shared_memory_output(t, o->ref, t.data.size());
  }
  return std::shared_ptr<const net::kserve::infer_response>(std::move(out));
}

// The same for a front end that did not hold the regions: looks them up in `shm` now.
inline result<std::shared_ptr<const net::kserve::infer_response>> write_shared_memory_outputs(
    const shared_memory_registry& shm, std::shared_ptr<const net::kserve::infer_response> resp,
    const std::vector<net::kserve::requested_output>& outputs) {
  JITEMBED_ASSIGN_OR_RETURN(auto held, hold_shared_memory_outputs(shm, outputs));
  return write_shared_memory_outputs(std::move(resp), held);
}

}  // namespace jitembed::server::detail
