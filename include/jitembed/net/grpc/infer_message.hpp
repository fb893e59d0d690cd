// Reflection helpers for the gRPC infer messages: field descriptors looked up once, and
// map<string, InferParameter> fields to and from net::kserve's JSON parameters.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "jitembed/net/grpc/kserve_schema.hpp"
#include "jitembed/net/kserve/message.hpp"

namespace jitembed::net::grpc {

namespace pb = google::protobuf;

// Field descriptors of the infer messages, looked up once.
struct grpc_infer_fields {
  const pb::FieldDescriptor *model_name, *model_version, *id, *parameters, *inputs, *outputs, *raw_input_contents;
  const pb::FieldDescriptor *in_name, *in_datatype, *in_shape, *in_parameters, *in_contents;
  const pb::FieldDescriptor *out_name, *out_parameters;
  // InferParameter's oneof; map entries' key / value
  const pb::FieldDescriptor *p_bool, *p_int64, *p_string, *p_double, *p_uint64;
  const pb::FieldDescriptor *r_model_name, *r_model_version, *r_id, *r_outputs;
  const pb::FieldDescriptor *ro_name, *ro_datatype, *ro_shape, *ro_parameters;
  int raw_output_contents_number;
  const pb::FieldDescriptor *s_error_message, *s_infer_response;

  static const grpc_infer_fields& get() {
    static const grpc_infer_fields f = make();
    return f;
  }

 private:
  static grpc_infer_fields make() {
    const auto& pool = net::grpc::kserve_schema::get().pool();
    const auto msg = [&](std::string_view n) { return pool.FindMessageTypeByName("inference." + std::string(n)); };
    grpc_infer_fields f{};
    const auto* rq = msg("ModelInferRequest");
    f.model_name = rq->FindFieldByName("model_name");
    f.model_version = rq->FindFieldByName("model_version");
    f.id = rq->FindFieldByName("id");
    f.parameters = rq->FindFieldByName("parameters");
    f.inputs = rq->FindFieldByName("inputs");
    f.outputs = rq->FindFieldByName("outputs");
    f.raw_input_contents = rq->FindFieldByName("raw_input_contents");
    const auto* in = msg("ModelInferRequest.InferInputTensor");
    f.in_name = in->FindFieldByName("name");
    f.in_datatype = in->FindFieldByName("datatype");
    f.in_shape = in->FindFieldByName("shape");
    f.in_parameters = in->FindFieldByName("parameters");
    f.in_contents = in->FindFieldByName("contents");
    const auto* out = msg("ModelInferRequest.InferRequestedOutputTensor");
    f.out_name = out->FindFieldByName("name");
    f.out_parameters = out->FindFieldByName("parameters");
    const auto* p = msg("InferParameter");
    f.p_bool = p->FindFieldByName("bool_param");
    f.p_int64 = p->FindFieldByName("int64_param");
    f.p_string = p->FindFieldByName("string_param");
    f.p_double = p->FindFieldByName("double_param");
    f.p_uint64 = p->FindFieldByName("uint64_param");
    const auto* rs = msg("ModelInferResponse");
    f.r_model_name = rs->FindFieldByName("model_name");
    f.r_model_version = rs->FindFieldByName("model_version");
    f.r_id = rs->FindFieldByName("id");
    f.r_outputs = rs->FindFieldByName("outputs");
    f.raw_output_contents_number = rs->FindFieldByName("raw_output_contents")->number();
    const auto* ro = msg("ModelInferResponse.InferOutputTensor");
    f.ro_name = ro->FindFieldByName("name");
    f.ro_datatype = ro->FindFieldByName("datatype");
    f.ro_shape = ro->FindFieldByName("shape");
    f.ro_parameters = ro->FindFieldByName("parameters");
    const auto* st = msg("ModelStreamInferResponse");
    f.s_error_message = st->FindFieldByName("error_message");
    f.s_infer_response = st->FindFieldByName("infer_response");
    return f;
  }
};

// A map<string, InferParameter> field as a JSON object (null when empty).
inline kserve::json grpc_parameters(const pb::Message& m, const pb::FieldDescriptor* field) {
  const auto& f = grpc_infer_fields::get();
  const auto* r = m.GetReflection();
  kserve::json out;
  const int n = r->FieldSize(m, field);
  for (int i = 0; i < n; ++i) {
    const auto& entry = r->GetRepeatedMessage(m, field, i);
    const auto* ed = entry.GetDescriptor();
    const auto* er = entry.GetReflection();
    const std::string key = er->GetString(entry, ed->map_key());
    const auto& v = er->GetMessage(entry, ed->map_value());
    const auto* vr = v.GetReflection();
    if (vr->HasField(v, f.p_bool))
      out[key] = vr->GetBool(v, f.p_bool);
    else if (const auto i = vr->GetInt64(v, f.p_int64); vr->HasField(v, f.p_int64))  // typed as the JSON decoder does
      out[key] = i >= 0 ? kserve::json(static_cast<std::uint64_t>(i)) : kserve::json(i);
    else if (vr->HasField(v, f.p_string))
      out[key] = vr->GetString(v, f.p_string);
    else if (vr->HasField(v, f.p_double))
      out[key] = vr->GetDouble(v, f.p_double);
    else if (vr->HasField(v, f.p_uint64))
      out[key] = vr->GetUInt64(v, f.p_uint64);
    else
      out[key] = nullptr;
  }
  return out;
}

// Adds each key = value of a JSON object (a string, boolean or number; another value as its JSON text) to a
// map<string, InferParameter> field, in order.
inline void set_grpc_parameters(pb::Message& m, const pb::FieldDescriptor* field, const kserve::json& params) {
  if (!params.is_object()) return;
  const auto& f = grpc_infer_fields::get();
  for (auto it = params.begin(); it != params.end(); ++it) {
    const auto& value = *it;
    auto* entry = m.GetReflection()->AddMessage(&m, field);
    const auto* ed = entry->GetDescriptor();
    entry->GetReflection()->SetString(entry, ed->map_key(), it.key());
    auto* v = entry->GetReflection()->MutableMessage(entry, ed->map_value());
    const auto* vr = v->GetReflection();
    if (value.is_string())
      vr->SetString(v, f.p_string, value.get<std::string>());
    else if (value.is_boolean())
      vr->SetBool(v, f.p_bool, value.get<bool>());
    else if (value.is_number_unsigned())
      vr->SetInt64(v, f.p_int64, static_cast<std::int64_t>(value.get<std::uint64_t>()));
    else if (value.is_number_integer())
      vr->SetInt64(v, f.p_int64, value.get<std::int64_t>());
    else if (value.is_number())
      vr->SetDouble(v, f.p_double, value.get<double>());
    else
      vr->SetString(v, f.p_string, value.dump());
  }
}

}  // namespace jitembed::net::grpc
