// The KServe gRPC infer codec, all four directions. Decoded tensors view into the message; encoded tensor
// bytes travel as grpc::Slices over their owner, appended as raw-contents entries (no copy).
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/message.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <cstring>
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

namespace jitembed::net::grpc {

namespace detail {

// A typed `contents` list (repeated `Field` named `name`) into the binary layout: little-endian `Elem`s.
template <class Elem, class Field>
byte_buffer pack_contents(const pb::Message& contents, const char* name) {
  const auto list =
      contents.GetReflection()->GetRepeatedFieldRef<Field>(contents, contents.GetDescriptor()->FindFieldByName(name));
  byte_buffer out(static_cast<std::size_t>(list.size()) * sizeof(Elem));
  for (int i = 0; i < list.size(); ++i) {
    const Elem v = static_cast<Elem>(list.Get(i));
    std::memcpy(out.data() + static_cast<std::size_t>(i) * sizeof(Elem), &v, sizeof(Elem));
  }
  return out;
}

// An input's elements from its InferTensorContents (when the request has no raw_input_contents).
inline result<byte_buffer> contents_bytes(const pb::Message& contents, kserve::datatype type, const std::string& w) {
  using kserve::datatype;
  const auto* r = contents.GetReflection();
  switch (type) {
    case datatype::boolean:
      return pack_contents<std::uint8_t, bool>(contents, "bool_contents");
    case datatype::int8:
      return pack_contents<std::int8_t, std::int32_t>(contents, "int_contents");
    case datatype::int16:
      return pack_contents<std::int16_t, std::int32_t>(contents, "int_contents");
    case datatype::int32:
      return pack_contents<std::int32_t, std::int32_t>(contents, "int_contents");
    case datatype::int64:
      return pack_contents<std::int64_t, std::int64_t>(contents, "int64_contents");
    case datatype::uint8:
      return pack_contents<std::uint8_t, std::uint32_t>(contents, "uint_contents");
    case datatype::uint16:
      return pack_contents<std::uint16_t, std::uint32_t>(contents, "uint_contents");
    case datatype::uint32:
      return pack_contents<std::uint32_t, std::uint32_t>(contents, "uint_contents");
    case datatype::uint64:
      return pack_contents<std::uint64_t, std::uint64_t>(contents, "uint64_contents");
    case datatype::fp32:
      return pack_contents<float, float>(contents, "fp32_contents");
    case datatype::fp64:
      return pack_contents<double, double>(contents, "fp64_contents");
    case datatype::bytes: {
      const auto* f = contents.GetDescriptor()->FindFieldByName("bytes_contents");
      std::vector<std::string_view> elems;
      elems.reserve(static_cast<std::size_t>(r->FieldSize(contents, f)));
      for (int i = 0; i < r->FieldSize(contents, f); ++i) {
        const std::string& s = r->GetRepeatedStringReference(contents, f, i, nullptr);
        elems.emplace_back(s);
      }
      return kserve::encode_bytes_elements(elems);
    }
    default:
      return fail(errc::invalid_argument,
                  w + ": " + std::string(kserve::to_string(type)) + " travels only in raw_input_contents");
  }
}

// The tag and length of a length-delimited field `number` of `length` bytes.
inline std::string field_prefix(int number, std::size_t length) {
  namespace wf = pb::internal;
  std::uint8_t p[16];  // a tag and a varint: at most 5 + 10 bytes
  auto* end = pb::io::CodedOutputStream::WriteTagToArray(
      wf::WireFormatLite::MakeTag(number, wf::WireFormatLite::WIRETYPE_LENGTH_DELIMITED), p);
  end = pb::io::CodedOutputStream::WriteVarint64ToArray(length, end);
  return std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(end - p));
}

// The bytes of such a field, its tag and length included.
inline std::size_t field_size(int number, std::size_t length) {
  namespace wf = pb::internal;
  return wf::WireFormatLite::TagSize(number, wf::WireFormatLite::TYPE_BYTES) +
         pb::io::CodedOutputStream::VarintSize64(length) + length;
}

// A message's bytes as slices: its serialized head (and the entries' keys, which join it) copied, each entry's
// bytes a slice over them that holds `owner` (zero copy), a small one copied (cheaper than a refcounted slice).
class slice_writer {
 public:
  explicit slice_writer(std::string head) : pending_(std::move(head)) {}
  // Entry `number` holding `data` (kept alive by `owner`; none: copied).
  void add_entry(int number, bytes_view data, const keep_alive& owner) {
    pending_ += field_prefix(number, data.size());
    if (data.empty()) return;
    flush();
    if (data.size() < 4096 || !owner) {
      slices_.emplace_back(data.data(), data.size());
    } else {
      const auto release = [](void* p) { delete static_cast<keep_alive*>(p); };
      slices_.emplace_back(const_cast<std::byte*>(data.data()), data.size(), +release, new keep_alive(owner));
    }
  }
  ::grpc::ByteBuffer finish() {
    if (!pending_.empty() || slices_.empty()) flush();
    return ::grpc::ByteBuffer(slices_.data(), slices_.size());
  }
  std::vector<::grpc::Slice>& slices() { return slices_; }

 private:
  void flush() {
    if (!pending_.empty()) slices_.emplace_back(pending_.data(), pending_.size());
    pending_.clear();
  }
  std::string pending_;
  std::vector<::grpc::Slice> slices_;
};

}  // namespace detail

// The client's side: a ModelInferRequest's bytes, each input not in shared memory (in order) as a
// raw_input_contents entry over its bytes, held by the input's storage.
inline ::grpc::ByteBuffer encode_infer_request(const kserve::infer_request& req) {
  const auto& f = grpc_infer_fields::get();
  auto m = kserve_schema::get().make("ModelInferRequest");
  const auto* r = m->GetReflection();
  r->SetString(m.get(), f.model_name, req.model);
  if (!req.version.empty()) r->SetString(m.get(), f.model_version, req.version);
  if (!req.id.empty()) r->SetString(m.get(), f.id, req.id);
  set_grpc_parameters(*m, f.parameters, req.parameters);
  for (const auto& t : req.inputs) {
    auto* in = r->AddMessage(m.get(), f.inputs);
    const auto* ir = in->GetReflection();
    ir->SetString(in, f.in_name, t.name);
    ir->SetString(in, f.in_datatype, std::string(kserve::to_string(t.type)));
    for (const auto d : t.shape) ir->AddInt64(in, f.in_shape, d);
    set_grpc_parameters(*in, f.in_parameters, t.parameters);
  }
  for (const auto& o : req.outputs) {
    auto* out = r->AddMessage(m.get(), f.outputs);
    out->GetReflection()->SetString(out, f.out_name, o.name);
    set_grpc_parameters(*out, f.out_parameters, o.parameters);
  }
  detail::slice_writer w(m->SerializeAsString());
  for (const auto& t : req.inputs)
    if (!kserve::has_shared_memory(t.parameters)) w.add_entry(f.raw_input_contents->number(), t.data, t.storage);
  return w.finish();
}

// The server's side: a parsed ModelInferRequest as the pipeline's request: checked like the HTTP decoder checks a body
// (limits, shapes against data sizes, BYTES element counts). Tensors view into `m` (or own copies of
// typed contents): keep `m` alive while the request is used.
inline result<kserve::infer_request> decode_infer_request(const pb::Message& m, const kserve::protocol_limits& lim) {
  namespace ks = kserve;
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
      JITEMBED_ASSIGN_OR_RETURN(auto bytes, detail::contents_bytes(ir->GetMessage(in, f.in_contents), t.type, w));
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

// The server's side: a ModelInferResponse's bytes, or (with `stream`) a ModelStreamInferResponse wrapping it,
// each output's bytes a raw_output_contents entry over the response, which `owner` keeps alive (the slices hold it).
inline ::grpc::ByteBuffer encode_infer_response(const kserve::infer_response& resp, const keep_alive& owner,
                                                bool stream) {
  const auto& f = grpc_infer_fields::get();
  auto msg = kserve_schema::get().make("ModelInferResponse");
  const auto* r = msg->GetReflection();
  r->SetString(msg.get(), f.r_model_name, resp.model_name);
  r->SetString(msg.get(), f.r_model_version, resp.model_version);
  if (!resp.id.empty()) r->SetString(msg.get(), f.r_id, resp.id);
  for (const auto& t : resp.outputs) {
    auto* o = r->AddMessage(msg.get(), f.r_outputs);
    const auto* orf = o->GetReflection();
    orf->SetString(o, f.ro_name, t.name);
    orf->SetString(o, f.ro_datatype, std::string(kserve::to_string(t.type)));
    for (auto d : t.shape) orf->AddInt64(o, f.ro_shape, d);
    set_grpc_parameters(*o, f.ro_parameters, t.parameters);  // an output written into shared memory: its region
  }
  std::string head = msg->SerializeAsString();
  std::size_t inner = head.size();
  for (const auto& t : resp.outputs) inner += detail::field_size(f.raw_output_contents_number, t.data.size());
  detail::slice_writer w(std::move(head));
  if (stream)  // ModelStreamInferResponse { infer_response = 2 }: tag, length, then the inner message
    w.slices().emplace_back(detail::field_prefix(f.s_infer_response->number(), inner));
  for (const auto& t : resp.outputs) w.add_entry(f.raw_output_contents_number, t.data, owner);
  return w.finish();
}

// The client's side: a parsed ModelInferResponse; outputs view into `m`'s raw_output_contents (keep `m` alive
// while the response is used). An output in shared memory has an empty entry (jitembed) or none (Triton: only
// the others have one). corrupt_data: an unknown datatype, an entry count that fits neither.
inline result<kserve::infer_response> decode_infer_response(const pb::Message& m) {
  const auto& f = grpc_infer_fields::get();
  const auto* r = m.GetReflection();
  kserve::infer_response out;
  out.model_name = r->GetString(m, f.r_model_name);
  out.model_version = r->GetString(m, f.r_model_version);
  out.id = r->GetString(m, f.r_id);
  const auto* raw = m.GetDescriptor()->FindFieldByNumber(f.raw_output_contents_number);
  const int n = r->FieldSize(m, f.r_outputs), n_raw = r->FieldSize(m, raw);
  out.outputs.resize(static_cast<std::size_t>(n));
  int in_shm = 0;
  for (int i = 0; i < n; ++i) {
    const auto& o = r->GetRepeatedMessage(m, f.r_outputs, i);
    const auto* orf = o.GetReflection();
    auto& t = out.outputs[static_cast<std::size_t>(i)];
    t.name = orf->GetString(o, f.ro_name);
    const auto dt = kserve::datatype_from_string(orf->GetString(o, f.ro_datatype));
    if (!dt) return fail(errc::corrupt_data, "output '" + t.name + "' has an unknown datatype");
    t.type = *dt;
    for (int k = 0; k < orf->FieldSize(o, f.ro_shape); ++k) t.shape.push_back(orf->GetRepeatedInt64(o, f.ro_shape, k));
    t.parameters = grpc_parameters(o, f.ro_parameters);
    in_shm += kserve::has_shared_memory(t.parameters) ? 1 : 0;
  }
  const bool every = n_raw == n;
  if (!every && n_raw != n - in_shm)
    return fail(errc::corrupt_data,
                std::to_string(n_raw) + " raw_output_contents for " + std::to_string(n) + " outputs");
  int next_raw = 0;
  for (auto& t : out.outputs) {
    if (!every && kserve::has_shared_memory(t.parameters)) continue;
    const std::string& bytes = r->GetRepeatedStringReference(m, raw, next_raw++, nullptr);
    t.data = bytes_view(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
  }
  return out;
}

// A ModelStreamInferResponse carrying only an error message (a failed request of a stream: the stream
// goes on, as Triton's does).
inline ::grpc::ByteBuffer encode_stream_error(const error_info& e, std::string_view id) {
  const auto& f = grpc_infer_fields::get();
  auto msg = kserve_schema::get().make("ModelStreamInferResponse");
  msg->GetReflection()->SetString(msg.get(), f.s_error_message, e.message);
  if (!id.empty()) {
    auto* inner = msg->GetReflection()->MutableMessage(msg.get(), f.s_infer_response);
    inner->GetReflection()->SetString(inner, f.r_id, std::string(id));
  }
  return detail::slice_writer(msg->SerializeAsString()).finish();
}

}  // namespace jitembed::net::grpc
