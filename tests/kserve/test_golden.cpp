// Golden bytes: requests made by tritonclient (tests/python/make_kserve_golden.py) decode to the exact
// values and re-encode to the same bytes; responses our encoder writes (parsed back by tritonclient in the
// python-labelled test) stay byte-stable.
#include <doctest/doctest.h>

#include <cstdlib>
#include <vector>

#include "kserve/kserve_test_util.hpp"

using namespace jitembed;
using namespace jitembed::net::kserve;
using kserve_test::as_string;
using kserve_test::load_request_golden;

namespace {

std::vector<std::uint16_t> bf16_bits(std::initializer_list<float> v) {
  std::vector<std::uint16_t> out;
  for (float f : v) out.push_back(bfloat16(f).bits);
  return out;
}

template <class T>
std::vector<T> values_of(const infer_tensor& t) {
  auto v = t.values<T>();
  REQUIRE(v);
  return *v;
}

// The request tritonclient builds in make_kserve_golden.py, built here from scratch.
infer_request golden_request(bool json_form) {
  infer_request r;
  const bool bin = !json_form;
  r.inputs.push_back(infer_tensor::from_values<float>("pixels", {2, 3}, std::vector<float>{0.5f, -1.25f, 3.0f, 1e-7f, 0.1f, 65504.0f}, bin));
  r.inputs.push_back(infer_tensor::from_values<std::int64_t>("ids", {3}, std::vector<std::int64_t>{1, -2, 9007199254740993LL}, bin));
  if (json_form) {
    r.inputs.push_back(infer_tensor::from_strings("samples", {2, 1}, {"h\xc3\xa9llo \xe2\x98\x83 \"q\"", "line\nnext"}, false));
  } else {
    r.inputs.push_back(infer_tensor::from_strings("samples", {2, 1}, {"hello", std::string_view("\x00\xff" "bin", 5)}, true));
  }
  std::vector<bfloat16> latent{bfloat16(1.0f), bfloat16(-2.5f), bfloat16(0.1f), bfloat16(3.140625f)};
  r.inputs.push_back(infer_tensor::from_values<bfloat16>("latent", {2, 2}, latent, true));
  r.inputs.push_back(infer_tensor::from_values<bool>("mask", {4}, std::vector<bool>{true, false, true, true}, bin));
  if (json_form) {
    r.id = "req-2";
    r.outputs.push_back({"embedding", false, {}});
  } else {
    r.id = "req-1";
    r.outputs.push_back({"embedding", true, {}});
    r.outputs.push_back({"scores", false, {}});
    r.parameters = json::object();
    r.parameters["priority"] = 2;
    r.parameters["timeout"] = 5000;
    r.parameters["jitembed_cache"] = "lmdb";
    r.parameters["width"] = 512;
  }
  return r;
}

void check_golden_request_values(const infer_request& r, bool json_form) {
  REQUIRE(r.inputs.size() == 5);
  CHECK(r.id == (json_form ? "req-2" : "req-1"));
  const auto& px = r.inputs[0];
  CHECK(px.name == "pixels");
  CHECK(px.type == datatype::fp32);
  CHECK(px.shape == std::vector<std::int64_t>{2, 3});
  CHECK(px.binary == !json_form);
  CHECK(values_of<float>(px) == std::vector<float>{0.5f, -1.25f, 3.0f, 1e-7f, 0.1f, 65504.0f});
  const auto& ids = r.inputs[1];
  CHECK(ids.type == datatype::int64);
  CHECK(values_of<std::int64_t>(ids) == std::vector<std::int64_t>{1, -2, 9007199254740993LL});
  const auto& s = r.inputs[2];
  CHECK(s.type == datatype::bytes);
  CHECK(s.shape == std::vector<std::int64_t>{2, 1});
  auto strs = s.strings();
  REQUIRE(strs);
  REQUIRE(strs->size() == 2);
  if (json_form) {
    CHECK((*strs)[0] == "h\xc3\xa9llo \xe2\x98\x83 \"q\"");
    CHECK((*strs)[1] == "line\nnext");
  } else {
    CHECK((*strs)[0] == "hello");
    CHECK((*strs)[1] == std::string_view("\x00\xff" "bin", 5));
  }
  const auto& lat = r.inputs[3];
  CHECK(lat.type == datatype::bf16);
  CHECK(lat.binary);  // BF16 is binary in both forms
  std::vector<std::uint16_t> bits;
  for (auto b : values_of<bfloat16>(lat)) bits.push_back(b.bits);
  CHECK(bits == bf16_bits({1.0f, -2.5f, 0.1f, 3.140625f}));
  const auto& mask = r.inputs[4];
  CHECK(mask.type == datatype::boolean);
  CHECK(values_of<bool>(mask) == std::vector<bool>{true, false, true, true});
  for (const auto& t : r.inputs) CHECK(t.parameters.is_null());  // binary_data_size is taken out
}

void check_reencodes(const infer_request& r, const kserve_test::golden& g) {
  auto enc = encode_request(r);
  REQUIRE(enc);
  CHECK(enc->header_length == g.header_length);
  CHECK(enc->body_size() == g.body.size());
  CHECK(enc->flatten() == g.body);
}

}  // namespace

TEST_CASE("golden req_binary: tritonclient binary request decodes to every value and re-encodes byte-exactly") {
  const auto g = load_request_golden("req_binary");
  REQUIRE(g.header_length.has_value());
  auto r = decode_request(g.body, g.header_length);
  REQUIRE_MESSAGE(r, (r ? "" : r.error().message));
  check_golden_request_values(*r, false);
  // Binary tensors are views into the body, not copies.
  const auto* body_begin = reinterpret_cast<const std::byte*>(g.body.data());
  CHECK(r->inputs[0].data.data() == body_begin + *g.header_length);
  CHECK(r->inputs[0].storage == nullptr);
  REQUIRE(r->outputs.size() == 2);
  CHECK(r->outputs[0].name == "embedding");
  CHECK(r->outputs[0].binary_data == true);
  CHECK(r->outputs[1].name == "scores");
  CHECK(r->outputs[1].binary_data == false);
  CHECK(priority(*r) == 2);
  CHECK(timeout_us(*r) == 5000u);
  CHECK_FALSE(binary_data_output(*r));
  CHECK(r->parameters["jitembed_cache"] == "lmdb");
  CHECK(r->parameters["width"] == 512);
  CHECK(wants_binary(*r, "embedding", datatype::fp32));
  CHECK_FALSE(wants_binary(*r, "scores", datatype::fp32));
  CHECK(wants_binary(*r, "scores", datatype::fp16));
  check_reencodes(*r, g);
  check_reencodes(golden_request(false), g);
}

TEST_CASE("golden req_json: JSON data (with BF16 binary) decodes and re-encodes byte-exactly") {
  const auto g = load_request_golden("req_json");
  auto r = decode_request(g.body, g.header_length);
  REQUIRE_MESSAGE(r, (r ? "" : r.error().message));
  check_golden_request_values(*r, true);
  REQUIRE(r->outputs.size() == 1);
  CHECK(r->outputs[0].binary_data == false);
  CHECK(r->parameters.is_null());
  check_reencodes(*r, g);
  check_reencodes(golden_request(true), g);
  // The all-JSON overload keeps BF16 binary, which is exactly this golden.
  auto all_binary = golden_request(true);
  for (auto& t : all_binary.inputs) t.binary = true;
  auto forced = encode_request(all_binary, /*binary=*/false);
  REQUIRE(forced);
  CHECK(forced->binary.size() == 1);
  CHECK(forced->flatten() == g.body);
  // Binary BYTES that are not UTF-8 cannot be forced into JSON (tritonclient refuses them too).
  auto bad = encode_request(golden_request(false), /*binary=*/false);
  CHECK(bad.code() == errc::invalid_utf8);
  CHECK(bad.error().message == "input 'samples': BYTES element 1 is not valid UTF-8; send it as binary data");
}

TEST_CASE("golden req_no_outputs: binary_data_output, FP16 and UINT8") {
  const auto g = load_request_golden("req_no_outputs");
  auto r = decode_request(g.body, g.header_length);
  REQUIRE_MESSAGE(r, (r ? "" : r.error().message));
  CHECK(r->id.empty());
  CHECK(r->outputs.empty());
  CHECK(binary_data_output(*r));
  CHECK(priority(*r) == 0);
  CHECK_FALSE(timeout_us(*r).has_value());
  CHECK(wants_binary(*r, "anything", datatype::int32));
  REQUIRE(r->inputs.size() == 2);
  std::vector<std::uint16_t> bits;
  for (auto h : values_of<float16>(r->inputs[0])) bits.push_back(h.bits);
  CHECK(bits == std::vector<std::uint16_t>{float16(1.0f).bits, float16(-0.5f).bits, float16(65504.0f).bits});
  CHECK(r->inputs[1].shape == std::vector<std::int64_t>{2, 2, 1});
  CHECK(values_of<std::uint8_t>(r->inputs[1]) == std::vector<std::uint8_t>{0, 7, 128, 255});
  auto tv = r->inputs[1].as_tensor_view();
  REQUIRE(tv);
  CHECK(tv->dtype() == dtype::u8);
  CHECK(tv->numel() == 4);
  check_reencodes(*r, g);

  infer_request built;
  built.inputs.push_back(infer_tensor::from_values<float16>("half", {3}, std::vector<float16>{float16(1.0f), float16(-0.5f), float16(65504.0f)}));
  built.inputs.push_back(infer_tensor::from_values<std::uint8_t>("image", {2, 2, 1}, std::vector<std::uint8_t>{0, 7, 128, 255}));
  built.parameters = json::object({{"binary_data_output", true}});
  check_reencodes(built, g);
}

TEST_CASE("golden req_json_only: no binary section, FP64/INT32/UINT16, classification output") {
  const auto g = load_request_golden("req_json_only");
  CHECK_FALSE(g.header_length.has_value());
  auto r = decode_request(g.body, std::nullopt);
  REQUIRE_MESSAGE(r, (r ? "" : r.error().message));
  REQUIRE(r->inputs.size() == 3);
  CHECK(values_of<double>(r->inputs[0]) == std::vector<double>{0.25, -1e300});
  CHECK(values_of<std::int32_t>(r->inputs[1]) == std::vector<std::int32_t>{-7, 2147483647});
  CHECK(values_of<std::uint16_t>(r->inputs[2]) == std::vector<std::uint16_t>{80, 65535});
  REQUIRE(r->outputs.size() == 1);
  CHECK(r->outputs[0].parameters["classification"] == 3);
  CHECK(r->outputs[0].binary_data == false);
  check_reencodes(*r, g);

  infer_request built;
  built.id = "7";
  built.inputs.push_back(infer_tensor::from_values<double>("scale", {2}, std::vector<double>{0.25, -1e300}, false));
  built.inputs.push_back(infer_tensor::from_values<std::int32_t>("count", {1, 2}, std::vector<std::int32_t>{-7, 2147483647}, false));
  built.inputs.push_back(infer_tensor::from_values<std::uint16_t>("ports", {2}, std::vector<std::uint16_t>{80, 65535}, false));
  built.outputs.push_back({"out", false, json::object({{"classification", 3}})});
  check_reencodes(built, g);
}

namespace {

// The responses make_kserve_golden.py's EXPECTED_RESPONSES describes.
infer_response golden_response(bool json_form) {
  infer_response r;
  r.model_name = "vae";
  r.model_version = "1";
  if (!json_form) {
    r.id = "req-1";
    r.parameters = json::object({{"sequence_end", false}});
    r.outputs.push_back(infer_tensor::from_values<float>("embedding", {2, 4}, std::vector<float>{0.5f, -1.0f, 2.25f, 1e-3f, 4.0f, 0.0f, -0.125f, 1e6f}));
    r.outputs.push_back(infer_tensor::from_values<float16>("half", {2}, std::vector<float16>{float16(1.5f), float16(-2.0f)}));
    r.outputs.push_back(infer_tensor::from_values<bfloat16>("latent", {1, 2}, std::vector<bfloat16>{bfloat16(1.0f), bfloat16(-2.5f)}));
    r.outputs.push_back(infer_tensor::from_strings("captions", {3}, {"a cat", "", std::string_view("\x00\x01", 2)}));
    r.outputs.push_back(infer_tensor::from_values<std::int64_t>("scores", {1, 2}, std::vector<std::int64_t>{3, -4}, false));
  } else {
    r.outputs.push_back(infer_tensor::from_values<float>("embedding", {2}, std::vector<float>{0.5f, 0.1f}, false));
    r.outputs.push_back(infer_tensor::from_values<bool>("flags", {1, 2}, std::vector<bool>{true, false}, false));
    r.outputs.push_back(infer_tensor::from_strings("captions", {1}, {"caf\xc3\xa9"}, false));
  }
  return r;
}

void check_response_golden(const std::string& name, bool json_form) {
  const auto r = golden_response(json_form);
  auto enc = encode_response(r);
  REQUIRE(enc);
  const std::string body = enc->flatten();
  const std::string path = kserve_test::data_path("kserve_" + name + ".bin");
  if (std::getenv("JITEMBED_KSERVE_WRITE_GOLDEN")) kserve_test::write_file(path, body);
  CHECK(body == kserve_test::read_file(path));
  CHECK(enc->header_length.has_value() == !json_form);

  auto back = decode_response(body, enc->header_length);
  REQUIRE_MESSAGE(back, (back ? "" : back.error().message));
  CHECK(back->model_name == "vae");
  CHECK(back->model_version == "1");
  CHECK(back->id == r.id);
  REQUIRE(back->outputs.size() == r.outputs.size());
  for (std::size_t i = 0; i < r.outputs.size(); ++i) {
    CHECK(back->outputs[i].name == r.outputs[i].name);
    CHECK(back->outputs[i].type == r.outputs[i].type);
    CHECK(back->outputs[i].shape == r.outputs[i].shape);
    CHECK(back->outputs[i].binary == r.outputs[i].binary);
    CHECK(as_string(back->outputs[i].data) == as_string(r.outputs[i].data));
  }
  // Decoding then re-encoding is the identity.
  auto again = encode_response(*back);
  REQUIRE(again);
  CHECK(again->flatten() == body);
}

}  // namespace

TEST_CASE("golden responses: our encoder's bytes are stable and decode back") {
  SUBCASE("binary") { check_response_golden("resp_binary", false); }
  SUBCASE("json") { check_response_golden("resp_json", true); }
}

TEST_CASE("response header key order is Triton's: id, model_name, model_version, parameters, outputs") {
  auto enc = encode_response(golden_response(false));
  REQUIRE(enc);
  CHECK(enc->header.starts_with(R"({"id":"req-1","model_name":"vae","model_version":"1","parameters":{"sequence_end":false},"outputs":[{"name":"embedding","datatype":"FP32","shape":[2,4],"parameters":{"binary_data_size":32}},)"));
  CHECK(enc->header.ends_with(R"({"name":"scores","datatype":"INT64","shape":[1,2],"data":[3,-4]}]})"));
  CHECK(enc->binary.size() == 4);
  CHECK(*enc->header_length == enc->header.size());
}
