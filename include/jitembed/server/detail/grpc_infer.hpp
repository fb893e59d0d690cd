// KServe gRPC ModelInferRequest / ModelInferResponse <-> net::kserve::infer_request / infer_response, on the
// dynamic messages of net/grpc/kserve_schema.hpp. Requests: tensors view into the parsed message's
// raw_input_contents (kept alive by the caller), typed `contents` are copied into the binary layout.
// Responses: the message is serialized without its raw_output_contents, which are then appended as
// length-delimited field-6 entries whose bytes are grpc::Slices over the response's own tensors (no copy;
// protobuf allows a repeated field's entries anywhere in the message).
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/message.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/net/grpc/infer_message.hpp"
#include "jitembed/net/grpc/kserve_schema.hpp"
#include "jitembed/net/kserve/bytes_elements.hpp"
#include "jitembed/net/kserve/compression.hpp"
#include "jitembed/net/kserve/datatype.hpp"
#include "jitembed/net/kserve/decode.hpp"
#include "jitembed/net/kserve/encode.hpp"
#include "jitembed/net/kserve/limits.hpp"
#include "jitembed/net/kserve/message.hpp"
#include "jitembed/net/kserve/shared_memory.hpp"

namespace jitembed::server::detail {

namespace pb = google::protobuf;

using net::grpc::grpc_infer_fields;
using net::grpc::grpc_parameters;
using net::grpc::set_grpc_parameter;

namespace grpc_detail {

// A typed `contents` list into the binary layout (little-endian elements of `type`).
template <class Elem, class Get>
byte_buffer pack_contents(int n, Get get) {
  byte_buffer out(static_cast<std::size_t>(n) * sizeof(Elem));
  for (int i = 0; i < n; ++i) {
    const Elem v = static_cast<Elem>(get(i));
    std::memcpy(out.data() + static_cast<std::size_t>(i) * sizeof(Elem), &v, sizeof(Elem));
  }
  return out;
}

// An input's elements from its InferTensorContents (when the request has no raw_input_contents).
inline result<byte_buffer> contents_bytes(const pb::Message& contents, net::kserve::datatype type,
                                          const std::string& w) {
  using net::kserve::datatype;
  const auto* d = contents.GetDescriptor();
  const auto* r = contents.GetReflection();
  const auto field = [&](const char* n) { return d->FindFieldByName(n); };
  const auto size = [&](const char* n) { return r->FieldSize(contents, field(n)); };
  switch (type) {
    case datatype::boolean:
      return pack_contents<std::uint8_t>(size("bool_contents"), [&](int i) {
        return r->GetRepeatedBool(contents, field("bool_contents"), i) ? 1 : 0;
      });
    case datatype::int8:
      return pack_contents<std::int8_t>(size("int_contents"),
                                        [&](int i) { return r->GetRepeatedInt32(contents, field("int_contents"), i); });
    case datatype::int16:
      return pack_contents<std::int16_t>(
          size("int_contents"), [&](int i) { return r->GetRepeatedInt32(contents, field("int_contents"), i); });
    case datatype::int32:
      return pack_contents<std::int32_t>(
          size("int_contents"), [&](int i) { return r->GetRepeatedInt32(contents, field("int_contents"), i); });
    case datatype::int64:
      return pack_contents<std::int64_t>(
          size("int64_contents"), [&](int i) { return r->GetRepeatedInt64(contents, field("int64_contents"), i); });
    case datatype::uint8:
      return pack_contents<std::uint8_t>(
          size("uint_contents"), [&](int i) { return r->GetRepeatedUInt32(contents, field("uint_contents"), i); });
    case datatype::uint16:
      return pack_contents<std::uint16_t>(
          size("uint_contents"), [&](int i) { return r->GetRepeatedUInt32(contents, field("uint_contents"), i); });
    case datatype::uint32:
      return pack_contents<std::uint32_t>(
          size("uint_contents"), [&](int i) { return r->GetRepeatedUInt32(contents, field("uint_contents"), i); });
    case datatype::uint64:
      return pack_contents<std::uint64_t>(
          size("uint64_contents"), [&](int i) { return r->GetRepeatedUInt64(contents, field("uint64_contents"), i); });
    case datatype::fp32:
      return pack_contents<float>(size("fp32_contents"),
                                  [&](int i) { return r->GetRepeatedFloat(contents, field("fp32_contents"), i); });
    case datatype::fp64:
      return pack_contents<double>(size("fp64_contents"),
                                   [&](int i) { return r->GetRepeatedDouble(contents, field("fp64_contents"), i); });
    case datatype::bytes: {
      const auto* f = field("bytes_contents");
      std::vector<std::string_view> elems;
      elems.reserve(static_cast<std::size_t>(r->FieldSize(contents, f)));
      for (int i = 0; i < r->FieldSize(contents, f); ++i) {
        const std::string& s = r->GetRepeatedStringReference(contents, f, i, nullptr);
        elems.emplace_back(s);
      }
      return net::kserve::encode_bytes_elements(elems);
    }
    default:
      return fail(errc::invalid_argument,
                  w + ": " + std::string(net::kserve::to_string(type)) + " travels only in raw_input_contents");
  }
}

}  // namespace grpc_detail

// A parsed ModelInferRequest as the pipeline's request: checked like the HTTP decoder checks a body
// (limits, shapes against data sizes, BYTES element counts). Tensors view into `m` (or own copies of
// typed contents): keep `m` alive while the request is used.
inline result<net::kserve::infer_request> grpc_infer_request(const pb::Message& m,
                                                             const net::kserve::protocol_limits& lim) {
  namespace ks = net::kserve;
  const auto& f = grpc_infer_fields::get();
  const auto* r = m.GetReflection();
  ks::infer_request req;
  req.model = r->GetString(m, f.model_name);
  req.version = r->GetString(m, f.model_version);
  req.id = r->GetString(m, f.id);
  req.parameters = grpc_parameters(m, f.parameters);
  if (req.parameters.is_object()) {
    for (const char* k : {"priority", "timeout"}) {
      const auto it = req.parameters.find(k);
      if (it != req.parameters.end() && !(it->is_number_integer() && it->get<std::int64_t>() >= 0) &&
          !it->is_number_unsigned())
        return fail(errc::invalid_argument, std::string("request parameter '") + k + "' is not a non-negative integer");
    }
  }
  const int n_inputs = r->FieldSize(m, f.inputs);
  const int n_raw = r->FieldSize(m, f.raw_input_contents);
  if (static_cast<std::size_t>(n_inputs) > lim.max_tensors)
    return fail(errc::limit_exceeded,
                std::to_string(n_inputs) + " inputs > max_tensors " + std::to_string(lim.max_tensors));
  int next_raw = 0;  // raw_input_contents: one per input not in shared memory, in order (or none: typed contents)
  std::unordered_set<std::string> names;
  for (int i = 0; i < n_inputs; ++i) {
    const auto& in = r->GetRepeatedMessage(m, f.inputs, i);
    const auto* ir = in.GetReflection();
    ks::infer_tensor t;
    t.name = ir->GetString(in, f.in_name);
    const std::string w = "input '" + t.name + "'";
    if (!names.insert(t.name).second) return fail(errc::invalid_argument, "duplicate input name '" + t.name + "'");
    const auto type = ks::datatype_from_string(ir->GetString(in, f.in_datatype));
    if (!type) return fail(errc::invalid_argument, w + ": unknown datatype '" + ir->GetString(in, f.in_datatype) + "'");
    t.type = *type;
    const int rank = ir->FieldSize(in, f.in_shape);
    if (static_cast<std::size_t>(rank) > lim.max_dims)
      return fail(errc::limit_exceeded,
                  w + ": shape rank " + std::to_string(rank) + " > max_dims " + std::to_string(lim.max_dims));
    for (int d = 0; d < rank; ++d) {
      const auto e = ir->GetRepeatedInt64(in, f.in_shape, d);
      if (e < 0)
        return fail(errc::invalid_argument,
                    w + ": negative extent " + std::to_string(e) + " at dim " + std::to_string(d));
      t.shape.push_back(e);
    }
    JITEMBED_ASSIGN_OR_RETURN(const auto numel, checked_numel(t.shape));
    if (t.type == ks::datatype::bytes && numel > lim.max_bytes_elements)
      return fail(errc::limit_exceeded, w + ": " + std::to_string(numel) + " BYTES elements > max_bytes_elements " +
                                            std::to_string(lim.max_bytes_elements));
    t.parameters = grpc_parameters(in, f.in_parameters);

    if (ks::has_shared_memory(t.parameters)) {  // its bytes are in a registered region: the pipeline reads them
      req.inputs.push_back(std::move(t));
      continue;
    }
    if (n_raw) {
      // Triton refuses both forms at once rather than silently dropping one of them.
      if (ir->HasField(in, f.in_contents))
        return fail(errc::invalid_argument, w + ": contents must not be set when the request uses raw_input_contents");
      if (next_raw >= n_raw)
        return fail(errc::invalid_argument, "raw_input_contents has " + std::to_string(n_raw) +
                                                " entries, fewer than the inputs not in shared memory");
      const std::string& raw = r->GetRepeatedStringReference(m, f.raw_input_contents, next_raw++, nullptr);
      t.data = bytes_view(reinterpret_cast<const std::byte*>(raw.data()), raw.size());
    } else {
      JITEMBED_ASSIGN_OR_RETURN(auto bytes, grpc_detail::contents_bytes(ir->GetMessage(in, f.in_contents), t.type, w));
      auto buf = std::make_shared<const byte_buffer>(std::move(bytes));
      t.data = bytes_view(buf->data(), buf->size());
      t.storage = std::move(buf);
    }
    JITEMBED_ASSIGN_OR_RETURN(const auto compressed, ks::compressed_tensor(t.parameters, w));
    if (!compressed) JITEMBED_TRY(ks::detail::check_tensor_data(t, w));  // a compressed one: once decompressed
    req.inputs.push_back(std::move(t));
  }
  const int n_outputs = r->FieldSize(m, f.outputs);
  if (static_cast<std::size_t>(n_outputs) > lim.max_tensors)
    return fail(errc::limit_exceeded,
                std::to_string(n_outputs) + " outputs > max_tensors " + std::to_string(lim.max_tensors));
  names.clear();
  for (int i = 0; i < n_outputs; ++i) {
    const auto& o = r->GetRepeatedMessage(m, f.outputs, i);
    ks::requested_output ro;
    ro.name = o.GetReflection()->GetString(o, f.out_name);
    if (!names.insert(ro.name).second)
      return fail(errc::invalid_argument, "duplicate requested output name '" + ro.name + "'");
    ro.parameters = grpc_parameters(o, f.out_parameters);
    // shared_memory_*: the pipeline writes the output into that region
    req.outputs.push_back(std::move(ro));
  }
  if (next_raw != n_raw)
    return fail(errc::invalid_argument, "raw_input_contents has " + std::to_string(n_raw) + " entries for " +
                                            std::to_string(next_raw) + " inputs not in shared memory");
  return req;
}

// A ModelInferResponse's bytes, or (with `stream`) a ModelStreamInferResponse wrapping it: the metadata
// through protobuf, each output's bytes as a slice over the response (which the slices keep alive).
inline ::grpc::ByteBuffer grpc_infer_response(std::shared_ptr<const net::kserve::infer_response> resp, bool stream) {
  const auto& f = grpc_infer_fields::get();
  const auto& schema = net::grpc::kserve_schema::get();
  auto msg = schema.make("ModelInferResponse");
  const auto* r = msg->GetReflection();
  r->SetString(msg.get(), f.r_model_name, resp->model_name);
  r->SetString(msg.get(), f.r_model_version, resp->model_version);
  if (!resp->id.empty()) r->SetString(msg.get(), f.r_id, resp->id);
  for (const auto& t : resp->outputs) {
    auto* o = r->AddMessage(msg.get(), f.r_outputs);
    const auto* orf = o->GetReflection();
    orf->SetString(o, f.ro_name, t.name);
    orf->SetString(o, f.ro_datatype, std::string(net::kserve::to_string(t.type)));
    for (auto d : t.shape) orf->AddInt64(o, f.ro_shape, d);
    if (t.parameters.is_object())  // an output written into shared memory: its region, no data
      for (auto it = t.parameters.begin(); it != t.parameters.end(); ++it)
        set_grpc_parameter(*o, f.ro_parameters, it.key(), *it);
  }
  std::string head = msg->SerializeAsString();
  // field 6 (raw_output_contents), wire type length-delimited: tag, varint length, bytes
  std::vector<std::string> prefixes;
  std::size_t inner = head.size();
  for (const auto& t : resp->outputs) {
    std::string p;
    {
      pb::io::StringOutputStream sos(&p);
      pb::io::CodedOutputStream cos(&sos);
      cos.WriteTag(pb::internal::WireFormatLite::MakeTag(f.raw_output_contents_number,
                                                         pb::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
      cos.WriteVarint64(t.data.size());
    }
    inner += p.size() + t.data.size();
    prefixes.push_back(std::move(p));
  }
  std::vector<::grpc::Slice> slices;
  slices.reserve(2 + 2 * resp->outputs.size());
  if (stream) {  // ModelStreamInferResponse { infer_response = 2 }: tag, length, then the inner message
    std::string p;
    {
      pb::io::StringOutputStream sos(&p);
      pb::io::CodedOutputStream cos(&sos);
      cos.WriteTag(pb::internal::WireFormatLite::MakeTag(f.s_infer_response->number(),
                                                         pb::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
      cos.WriteVarint64(inner);
    }
    slices.emplace_back(p.data(), p.size());
  }
  slices.emplace_back(head.data(), head.size());
  // One heap-held reference to the response per zero-copy slice, released when gRPC drops the slice.
  const auto release = [](void* p) { delete static_cast<std::shared_ptr<const net::kserve::infer_response>*>(p); };
  for (std::size_t i = 0; i < resp->outputs.size(); ++i) {
    slices.emplace_back(prefixes[i].data(), prefixes[i].size());
    const auto data = resp->outputs[i].data;
    if (data.empty()) continue;
    if (data.size() < 4096) {  // small: a copy is cheaper than a refcounted slice
      slices.emplace_back(data.data(), data.size());
    } else {
      auto* ref = new std::shared_ptr<const net::kserve::infer_response>(resp);
      slices.emplace_back(const_cast<std::byte*>(data.data()), data.size(), +release, ref);
    }
  }
  return ::grpc::ByteBuffer(slices.data(), slices.size());
}

// A ModelStreamInferResponse carrying only an error message (a failed request of a stream: the stream
// goes on, as Triton's does).
inline ::grpc::ByteBuffer grpc_stream_error(const error_info& e, std::string_view id) {
  const auto& f = grpc_infer_fields::get();
  auto msg = net::grpc::kserve_schema::get().make("ModelStreamInferResponse");
  msg->GetReflection()->SetString(msg.get(), f.s_error_message, e.message);
  if (!id.empty()) {
    auto* inner = msg->GetReflection()->MutableMessage(msg.get(), f.s_infer_response);
    inner->GetReflection()->SetString(inner, f.r_id, std::string(id));
  }
  const std::string bytes = msg->SerializeAsString();
  ::grpc::Slice s(bytes.data(), bytes.size());
  return ::grpc::ByteBuffer(&s, 1);
}

}  // namespace jitembed::server::detail
