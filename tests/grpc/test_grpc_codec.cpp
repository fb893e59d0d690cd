// The gRPC infer codec (net/grpc/infer_codec.hpp) in all four directions without a network: client encode ->
// server decode -> server encode -> client decode, with raw, typed and BYTES contents, parameters, shared
// memory, the zero-copy slices and the refusal of a request carrying both contents forms.
#include <doctest/doctest.h>

#include <grpcpp/support/proto_buffer_reader.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jitembed/net/grpc/infer_codec.hpp"

namespace {

using namespace jitembed;
namespace ks = jitembed::net::kserve;
namespace ng = jitembed::net::grpc;
namespace pb = google::protobuf;

std::unique_ptr<pb::Message> codec_parse(std::string_view type, ::grpc::ByteBuffer& b) {
  auto m = ng::kserve_schema::get().make(type);
  ::grpc::ProtoBufferReader reader(&b);
  REQUIRE(m->ParseFromZeroCopyStream(&reader));
  return m;
}

std::string codec_bytes(const ks::infer_tensor& t) {
  return {reinterpret_cast<const char*>(t.data.data()), t.data.size()};
}

ks::infer_tensor codec_shm_tensor(std::string name) {
  ks::infer_tensor t = ks::infer_tensor::view(std::move(name), ks::datatype::fp32, {2, 4}, bytes_view{});
  t.parameters = {{"shared_memory_region", "r0"}, {"shared_memory_byte_size", 32}, {"shared_memory_offset", 64}};
  return t;
}

const pb::FieldDescriptor* codec_field(const pb::Message& m, const char* name) {
  return m.GetDescriptor()->FindFieldByName(name);
}

}  // namespace

TEST_CASE("gRPC infer codec: a request round trip keeps tensors, parameters and shared memory, big inputs zero copy") {
  std::vector<float> big(2048);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f;
  ks::infer_request req;
  req.model = "m";
  req.version = "3";
  req.id = "req-1";
  req.parameters = {{"binary_data_output", true}, {"timeout", 1500}, {"ratio", 0.25}, {"tag", "x"}};
  req.inputs.push_back(ks::infer_tensor::from_values<float>("BIG", {1, 2048}, big));
  req.inputs.push_back(ks::infer_tensor::from_strings("TEXT", {2, 1}, {"ab", "xyz"}));
  req.inputs.push_back(
      ks::infer_tensor::from_values<std::int64_t>("IDS", {2, 2}, std::vector<std::int64_t>{1, -2, 3, 4}));
  req.inputs.push_back(codec_shm_tensor("IN_SHM"));
  req.outputs.push_back({"EMB", std::nullopt, {}});
  req.outputs.push_back({"OUT_SHM", std::nullopt, codec_shm_tensor("x").parameters});
  const long owners = req.inputs[0].storage.use_count();

  auto wire = ng::encode_infer_request(req);
  CHECK(req.inputs[0].storage.use_count() == owners + 1);  // the 8 KiB input travels as a slice over its storage
  CHECK(req.inputs[1].storage.use_count() == 1);           // a small one is copied
  CHECK(wire.Length() > big.size() * sizeof(float));
  auto msg = codec_parse("ModelInferRequest", wire);
  CHECK(msg->GetReflection()->FieldSize(*msg, codec_field(*msg, "raw_input_contents")) == 3);  // none for IN_SHM
  auto got = ng::decode_infer_request(*msg, ks::protocol_limits{});
  REQUIRE(got);
  CHECK(got->model == "m");
  CHECK(got->version == "3");
  CHECK(got->id == "req-1");
  CHECK(got->parameters == req.parameters);
  REQUIRE(got->inputs.size() == 4);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(got->inputs[i].name == req.inputs[i].name);
    CHECK(got->inputs[i].type == req.inputs[i].type);
    CHECK(got->inputs[i].shape == req.inputs[i].shape);
    CHECK(codec_bytes(got->inputs[i]) == codec_bytes(req.inputs[i]));
  }
  CHECK(got->inputs[3].data.empty());
  CHECK(got->inputs[3].parameters == req.inputs[3].parameters);
  REQUIRE(got->outputs.size() == 2);
  CHECK(got->outputs[0].name == "EMB");
  CHECK(got->outputs[1].parameters == req.outputs[1].parameters);
}

TEST_CASE("gRPC infer codec: typed contents are packed like raw bytes, both forms at once are refused") {
  auto m = ng::kserve_schema::get().make("ModelInferRequest");
  const auto* r = m->GetReflection();
  r->SetString(m.get(), codec_field(*m, "model_name"), "m");
  const auto add_input = [&](const char* name, const char* dt, std::int64_t n) {
    auto* in = r->AddMessage(m.get(), codec_field(*m, "inputs"));
    in->GetReflection()->SetString(in, codec_field(*in, "name"), name);
    in->GetReflection()->SetString(in, codec_field(*in, "datatype"), dt);
    in->GetReflection()->AddInt64(in, codec_field(*in, "shape"), n);
    auto* c = in->GetReflection()->MutableMessage(in, codec_field(*in, "contents"));
    return std::pair{c, c->GetReflection()};
  };
  auto [i16, i16r] = add_input("I16", "INT16", 3);
  for (int v : {1, -2, 300}) i16r->AddInt32(i16, codec_field(*i16, "int_contents"), v);
  auto [f64, f64r] = add_input("F64", "FP64", 2);
  for (double v : {0.5, -1.25}) f64r->AddDouble(f64, codec_field(*f64, "fp64_contents"), v);
  auto [b, br] = add_input("B", "BOOL", 2);
  for (bool v : {true, false}) br->AddBool(b, codec_field(*b, "bool_contents"), v);
  auto [s, sr] = add_input("S", "BYTES", 2);
  for (const char* v : {"ab", ""}) sr->AddString(s, codec_field(*s, "bytes_contents"), v);

  auto got = ng::decode_infer_request(*m, ks::protocol_limits{});
  REQUIRE(got);
  REQUIRE(got->inputs.size() == 4);
  CHECK(got->inputs[0].values<std::int16_t>().value() == std::vector<std::int16_t>{1, -2, 300});
  CHECK(got->inputs[1].values<double>().value() == std::vector<double>{0.5, -1.25});
  CHECK(codec_bytes(got->inputs[2]) == std::string("\x01\x00", 2));
  CHECK(codec_bytes(got->inputs[3]) == codec_bytes(ks::infer_tensor::from_strings("S", {2}, {"ab", ""})));
  add_input("F", "FP16", 1);  // FP16 has no contents field
  auto bad = ng::decode_infer_request(*m, ks::protocol_limits{});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "input 'F': FP16 travels only in raw_input_contents");
  r->ClearField(m.get(), codec_field(*m, "inputs"));
  auto [one, oner] = add_input("I16", "INT16", 1);
  oner->AddInt32(one, codec_field(*one, "int_contents"), 7);
  r->AddString(m.get(), codec_field(*m, "raw_input_contents"), std::string("\x07\x00", 2));
  auto both = ng::decode_infer_request(*m, ks::protocol_limits{});
  REQUIRE_FALSE(both);
  CHECK(both.code() == errc::invalid_argument);
  CHECK(both.error().message == "input 'I16': contents must not be set when the request uses raw_input_contents");
}

TEST_CASE("gRPC infer codec: a response round trip, plain and streamed, outputs in shared memory and zero copy") {
  std::vector<float> big(4096);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i);
  auto resp = std::make_shared<ks::infer_response>();
  resp->model_name = "m";
  resp->model_version = "1";
  resp->id = "req-7";
  resp->outputs.push_back(ks::infer_tensor::from_values<float>("EMB", {2, 2048}, big));
  resp->outputs.push_back(codec_shm_tensor("IN_REGION"));
  resp->outputs.push_back(ks::infer_tensor::from_strings("TEXT", {2}, {"hello", "w"}));
  const std::shared_ptr<const ks::infer_response> sent = resp;
  const long owners = sent.use_count();
  for (const bool stream : {false, true}) {
    CAPTURE(stream);
    auto wire = ng::encode_infer_response(*sent, sent, stream);
    CHECK(sent.use_count() == owners + 1);  // the big output's slice holds the response
    std::unique_ptr<pb::Message> outer = codec_parse(stream ? "ModelStreamInferResponse" : "ModelInferResponse", wire);
    const pb::Message* inner = outer.get();
    if (stream) {
      CHECK(outer->GetReflection()->GetString(*outer, codec_field(*outer, "error_message")).empty());
      inner = &outer->GetReflection()->GetMessage(*outer, codec_field(*outer, "infer_response"));
    }
    auto got = ng::decode_infer_response(*inner);
    REQUIRE(got);
    CHECK(got->model_name == "m");
    CHECK(got->model_version == "1");
    CHECK(got->id == "req-7");
    REQUIRE(got->outputs.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      CHECK(got->outputs[i].name == resp->outputs[i].name);
      CHECK(got->outputs[i].type == resp->outputs[i].type);
      CHECK(got->outputs[i].shape == resp->outputs[i].shape);
      CHECK(got->outputs[i].parameters == resp->outputs[i].parameters);
      CHECK(codec_bytes(got->outputs[i]) == codec_bytes(resp->outputs[i]));
    }
    wire.Clear();
    CHECK(sent.use_count() == owners);
  }
}

TEST_CASE("gRPC infer codec: a Triton response without entries for shared-memory outputs, a bad one, a stream error") {
  auto m = ng::kserve_schema::get().make("ModelInferResponse");
  const auto* r = m->GetReflection();
  const auto add_output = [&](const char* name, bool in_shm) {
    auto* o = r->AddMessage(m.get(), codec_field(*m, "outputs"));
    o->GetReflection()->SetString(o, codec_field(*o, "name"), name);
    o->GetReflection()->SetString(o, codec_field(*o, "datatype"), "UINT8");
    o->GetReflection()->AddInt64(o, codec_field(*o, "shape"), 2);
    if (in_shm) ng::set_grpc_parameters(*o, codec_field(*o, "parameters"), codec_shm_tensor("x").parameters);
  };
  add_output("A", true);
  add_output("B", false);
  r->AddString(m.get(), codec_field(*m, "raw_output_contents"), "\x05\x06");
  auto got = ng::decode_infer_response(*m);
  REQUIRE(got);
  CHECK(got->outputs[0].data.empty());
  CHECK(codec_bytes(got->outputs[1]) == "\x05\x06");
  r->ClearField(m.get(), codec_field(*m, "raw_output_contents"));
  auto bad = ng::decode_infer_response(*m);
  REQUIRE_FALSE(bad);
  CHECK(bad.code() == errc::corrupt_data);
  CHECK(bad.error().message == "0 raw_output_contents for 2 outputs");

  auto wire = ng::encode_stream_error(fail(errc::not_found, "no model 'x'"), "id-9");
  auto e = codec_parse("ModelStreamInferResponse", wire);
  CHECK(e->GetReflection()->GetString(*e, codec_field(*e, "error_message")) == "no model 'x'");
  const auto& inner = e->GetReflection()->GetMessage(*e, codec_field(*e, "infer_response"));
  CHECK(inner.GetReflection()->GetString(inner, codec_field(inner, "id")) == "id-9");
}
