// Decoder checks (exact error codes and messages for bad input), JSON data for every datatype, BYTES
// elements, datatypes and the HTTP status mapping.
#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kserve/kserve_test_util.hpp"

using namespace jitembed;
using namespace jitembed::net::kserve;

namespace {

std::string u32le(std::uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A body with a JSON header and `binary` appended; returns {body, header length}.
std::pair<std::string, std::size_t> body_of(const std::string& header, const std::string& binary) {
  return {header + binary, header.size()};
}

void check_request_error(const std::string& body, std::optional<std::size_t> hlen, errc code, const std::string& message,
                         const protocol_limits& lim = {}) {
  auto r = decode_request(body, hlen, lim);
  REQUIRE_FALSE(r);
  CHECK(r.code() == code);
  CHECK(r.error().message == message);
}

const std::string k16(16, '\x01');

}  // namespace

TEST_CASE("datatype names, sizes and the dtype mapping") {
  for (int i = 0; i < kDatatypeCount; ++i) {
    const auto t = static_cast<datatype>(i);
    CHECK(datatype_from_string(to_string(t)) == t);
  }
  CHECK_FALSE(datatype_from_string("fp32").has_value());
  CHECK_FALSE(datatype_from_string("FP8").has_value());
  CHECK(element_size(datatype::bytes) == 0);
  CHECK(element_size(datatype::uint64) == 8);
  CHECK(element_size(datatype::bf16) == 2);
  for (int i = 0; i < kDtypeCount; ++i) {
    const auto d = static_cast<dtype>(i);
    CHECK(to_dtype(from_dtype(d)) == d);
    CHECK(element_size(from_dtype(d)) == jitembed::element_size(d));
  }
  CHECK_FALSE(to_dtype(datatype::uint32).has_value());
  CHECK_FALSE(to_dtype(datatype::bytes).has_value());
}

TEST_CASE("BYTES elements: encode, walk, and bounds") {
  auto enc = encode_bytes_elements({"ab", "", "xyz"});
  REQUIRE(enc);
  CHECK(kserve_test::as_string(*enc) == u32le(2) + "ab" + u32le(0) + u32le(3) + "xyz");
  std::vector<std::string> seen;
  auto n = for_each_bytes_element(*enc, [&](std::string_view e) { seen.emplace_back(e); });
  REQUIRE(n);
  CHECK(*n == 3);
  CHECK(seen == std::vector<std::string>{"ab", "", "xyz"});

  const std::string past = u32le(2) + "ab" + u32le(9) + "xyz";
  auto bad = for_each_bytes_element(as_bytes_view(past), [](std::string_view) {});
  CHECK(bad.code() == errc::truncated);
  CHECK(bad.error().message == "BYTES element 1 at offset 6: length 9 runs past the end of the 13-byte buffer");
  const std::string short_prefix = u32le(1) + "a" + "\x01\x00";
  bad = for_each_bytes_element(as_bytes_view(short_prefix), [](std::string_view) {});
  CHECK(bad.code() == errc::truncated);
  CHECK(bad.error().message == "BYTES element 1: length prefix at offset 5 runs past the end of the 6-byte buffer");
  auto split = split_bytes_elements(*enc, 2);
  CHECK(split.code() == errc::corrupt_data);
  split = split_bytes_elements(*enc, 4);
  CHECK(split.code() == errc::corrupt_data);
  CHECK(split.error().message == "BYTES: 3 elements, expected 4");
  split = split_bytes_elements(*enc, 1000);  // cannot fit: rejected before reserving
  CHECK(split.error().message == "BYTES: 17 bytes cannot hold 1000 elements");
}

TEST_CASE("JSON data round trips for every datatype JSON can carry") {
  auto roundtrip = [](const infer_tensor& t) {
    infer_request r;
    r.inputs.push_back(t);
    auto enc = encode_request(r, /*binary=*/false);
    REQUIRE_MESSAGE(enc, (enc ? "" : enc.error().message));
    CHECK_FALSE(enc->header_length.has_value());
    auto dec = decode_request(enc->flatten(), enc->header_length);
    REQUIRE_MESSAGE(dec, (dec ? "" : dec.error().message));
    REQUIRE(dec->inputs.size() == 1);
    CHECK(dec->inputs[0].type == t.type);
    CHECK_FALSE(dec->inputs[0].binary);
    CHECK(kserve_test::as_string(dec->inputs[0].data) == kserve_test::as_string(t.data));
    return enc->header;
  };
  roundtrip(infer_tensor::from_values<bool>("b", {3}, std::vector<bool>{true, false, true}));
  CHECK(roundtrip(infer_tensor::from_values<std::uint8_t>("u8", {2}, std::vector<std::uint8_t>{0, 255})).find("[0,255]") != std::string::npos);
  roundtrip(infer_tensor::from_values<std::uint16_t>("u16", {2}, std::vector<std::uint16_t>{1, 65535}));
  roundtrip(infer_tensor::from_values<std::uint32_t>("u32", {2}, std::vector<std::uint32_t>{1, 4294967295u}));
  CHECK(roundtrip(infer_tensor::from_values<std::uint64_t>("u64", {1}, std::vector<std::uint64_t>{18446744073709551615ull}))
            .find("[18446744073709551615]") != std::string::npos);
  roundtrip(infer_tensor::from_values<std::int8_t>("i8", {2}, std::vector<std::int8_t>{-128, 127}));
  roundtrip(infer_tensor::from_values<std::int16_t>("i16", {2}, std::vector<std::int16_t>{-32768, 32767}));
  roundtrip(infer_tensor::from_values<std::int32_t>("i32", {2}, std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), 5}));
  roundtrip(infer_tensor::from_values<std::int64_t>("i64", {2}, std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(), 5}));
  roundtrip(infer_tensor::from_values<float>("f32", {2, 2}, std::vector<float>{0.1f, -3.4e38f, 1e-45f, 0.0f}));
  roundtrip(infer_tensor::from_values<double>("f64", {3}, std::vector<double>{0.1, 5e-324, -1.7976931348623157e308}));
  roundtrip(infer_tensor::from_strings("s", {2}, {"a\"b\\c\x01", "\xf0\x9f\x98\x80"}));
  CHECK(roundtrip(infer_tensor::from_strings("s", {1}, {"\xf0\x9f\x98\x80"})).find(R"(["\uD83D\uDE00"])") != std::string::npos);
  roundtrip(infer_tensor::from_values<float>("empty", {0, 3}, std::vector<float>{}));
}

TEST_CASE("JSON data: nested arrays are flattened, and bad elements are rejected") {
  const std::string nested = R"({"inputs":[{"name":"x","shape":[2,2],"datatype":"INT32","data":[[1,2],[3,4]]}]})";
  auto r = decode_request(nested, std::nullopt);
  REQUIRE(r);
  CHECK(r->inputs[0].values<std::int32_t>().value() == std::vector<std::int32_t>{1, 2, 3, 4});
  auto req = [](const std::string& type, const std::string& data, const std::string& shape = "[2]") {
    return R"({"inputs":[{"name":"x","shape":)" + shape + R"(,"datatype":")" + type + R"(","data":)" + data + "}]}";
  };
  check_request_error(req("INT8", "[1,128]"), std::nullopt, errc::invalid_argument, "input 'x': data element 1 is not an integer in range of INT8");
  check_request_error(req("UINT8", "[-1,1]"), std::nullopt, errc::invalid_argument, "input 'x': data element 0 is not an integer in range of UINT8");
  check_request_error(req("INT32", "[1.5,1]"), std::nullopt, errc::invalid_argument, "input 'x': data element 0 is not an integer in range of INT32");
  check_request_error(req("BOOL", "[1,0]"), std::nullopt, errc::invalid_argument, "input 'x': data element 0 is not a boolean");
  check_request_error(req("FP32", "[1,\"a\"]"), std::nullopt, errc::invalid_argument, "input 'x': data element 1 is not a number");
  check_request_error(req("BYTES", "[\"a\",3]"), std::nullopt, errc::invalid_argument, "input 'x': data element 1 is not a string");
  check_request_error(req("FP32", "[1,2,3]"), std::nullopt, errc::invalid_argument, "input 'x': \"data\" has 3 elements, shape needs 2");
  check_request_error(req("FP32", "5"), std::nullopt, errc::invalid_argument, "input 'x': \"data\" is not an array");
  check_request_error(req("FP16", "[1,2]"), std::nullopt, errc::invalid_argument,
                      "input 'x': FP16 data cannot be sent as JSON; use the binary data extension");
  check_request_error(req("BF16", "[1,2]"), std::nullopt, errc::invalid_argument,
                      "input 'x': BF16 data cannot be sent as JSON; use the binary data extension");
  // The encoder refuses the same things.
  infer_request bad;
  bad.inputs.push_back(infer_tensor::from_values<float16>("h", {1}, std::vector<float16>{float16(1.0f)}, false));
  CHECK(encode_request(bad).code() == errc::invalid_argument);
  bad.inputs[0] = infer_tensor::from_values<float>("n", {1}, std::vector<float>{std::numeric_limits<float>::quiet_NaN()}, false);
  auto e = encode_request(bad);
  CHECK(e.code() == errc::invalid_argument);
  CHECK(e.error().message == "input 'n': element 0 is NaN or infinite, which JSON cannot carry; send it as binary data");
  CHECK(encode_request(bad, /*binary=*/true));  // binary carries NaN fine
}

TEST_CASE("decode_request: binary size, shape and section checks") {
  const std::string tensor = R"({"name":"x","shape":[2,2],"datatype":"FP32","parameters":{"binary_data_size":)";
  auto [b12, h12] = body_of(R"({"inputs":[)" + tensor + "12}}]}", std::string(12, '\0'));
  check_request_error(b12, h12, errc::invalid_argument, "input 'x': binary_data_size 12 does not match shape [2,2] of FP32 = 16 bytes");

  auto [b16, h16] = body_of(R"({"inputs":[)" + tensor + "16}}]}", std::string(10, '\0'));
  check_request_error(b16, h16, errc::truncated, "input 'x': binary_data_size 16 at offset 0 runs past the end of the 10-byte binary section");

  auto [extra, hx] = body_of(R"({"inputs":[)" + tensor + "16}}]}", k16 + "zz");
  check_request_error(extra, hx, errc::corrupt_data, "binary section has 18 bytes but the inputs declare 16");

  auto [ok, hok] = body_of(R"({"inputs":[)" + tensor + "16}}]}", k16);
  CHECK(decode_request(ok, hok));
  check_request_error(ok, ok.size() + 1, errc::corrupt_data, "Inference-Header-Content-Length 111 is past the end of the 110-byte body");
  // Binary data but no header length: the whole body is parsed as JSON and fails.
  CHECK(decode_request(ok, std::nullopt).code() == errc::corrupt_data);

  auto [both, hb] = body_of(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[1],"parameters":{"binary_data_size":1}}]})", "\x01");
  check_request_error(both, hb, errc::invalid_argument, "input 'x': has both \"data\" and binary_data_size");
  check_request_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT8"}]})", std::nullopt, errc::invalid_argument,
                      "input 'x': no data (neither \"data\" nor binary_data_size)");
  check_request_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP8","data":[1]}]})", std::nullopt, errc::invalid_argument,
                      "input 'x': unknown datatype 'FP8'");
  check_request_error(R"({"inputs":[{"name":"x","shape":[-1],"datatype":"INT8","data":[1]}]})", std::nullopt, errc::invalid_argument,
                      "input 'x': negative extent -1 at dim 0");
  check_request_error(R"({"inputs":[{"name":"x","shape":[4294967296,4294967296],"datatype":"INT8","parameters":{"binary_data_size":0}}]})", 0,
                      errc::corrupt_data, "inference header is not valid JSON: [json.exception.parse_error.101] parse error at line 1, column 1: syntax error while parsing value - unexpected end of input; expected '[', '{', or a literal");
  const std::string overflow = R"({"inputs":[{"name":"x","shape":[4294967296,4294967296],"datatype":"INT8","parameters":{"binary_data_size":0}}]})";
  check_request_error(overflow, overflow.size(), errc::shape_overflow, "input 'x': shape product overflows at dim 1");
  const std::string big = R"({"inputs":[{"name":"x","shape":[4294967296,4],"datatype":"INT64","parameters":{"binary_data_size":0}}]})";
  check_request_error(big, big.size(), errc::invalid_argument,
                      "input 'x': binary_data_size 0 does not match shape [4294967296,4] of INT64 = 137438953472 bytes");
  check_request_error(R"({"inputs":[{"name":"x","shape":[1,1,1,1,1,1,1,1,1],"datatype":"INT8","data":[1]}]})", std::nullopt,
                      errc::limit_exceeded, "input 'x': shape rank 9 > max_dims 8");
  check_request_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[1]},{"name":"x","shape":[1],"datatype":"INT8","data":[2]}]})",
                      std::nullopt, errc::invalid_argument, "duplicate input name 'x'");
  check_request_error(R"({"inputs":[],"outputs":[{"name":"y"},{"name":"y"}]})", std::nullopt, errc::invalid_argument,
                      "duplicate requested output name 'y'");
  check_request_error(R"({"inputs":[],"outputs":[{"name":"y","parameters":{"binary_data":1}}]})", std::nullopt, errc::invalid_argument,
                      "requested output 'y': binary_data is not a boolean");
  check_request_error(R"({"inputs":[],"parameters":{"priority":-1}})", std::nullopt, errc::invalid_argument,
                      "request parameter 'priority' is not a non-negative integer");
  check_request_error(R"({"inputs":[],"parameters":{"binary_data_output":1}})", std::nullopt, errc::invalid_argument,
                      "request parameter 'binary_data_output' is not a boolean");
  check_request_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT8","parameters":{"shared_memory_region":"r"}}]})",
                      std::nullopt, errc::invalid_argument,
                      "input 'x': shared_memory_byte_size is missing or not a non-negative integer (region 'r')");
  check_request_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT8","parameters":{"shared_memory_byte_size":1}}]})",
                      std::nullopt, errc::invalid_argument,
                      "input 'x': shared_memory_region is missing or not a non-empty string");
  check_request_error(
      R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[1],"parameters":{"shared_memory_region":"r","shared_memory_byte_size":1}}]})",
      std::nullopt, errc::invalid_argument, "input 'x': has shared_memory_region 'r' and also data in the message");
  check_request_error(
      R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT8","parameters":{"shared_memory_region":"r","shared_memory_byte_size":1,"shared_memory_offset":-1}}]})",
      std::nullopt, errc::invalid_argument, "input 'x': shared_memory_offset is not a non-negative integer (region 'r')");
  check_request_error(R"({"inputs":[],"outputs":[{"name":"y","parameters":{"shared_memory_region":7}}]})", std::nullopt,
                      errc::invalid_argument,
                      "requested output 'y': shared_memory_region is missing or not a non-empty string");
  check_request_error(R"({"outputs":[]})", std::nullopt, errc::invalid_argument, "inference header has no \"inputs\"");
  check_request_error(R"([1])", std::nullopt, errc::corrupt_data, "inference header is not a JSON object");
  check_request_error(R"({"inputs":[{"shape":[1]}]})", std::nullopt, errc::invalid_argument, "input 0: missing string \"name\"");
  check_request_error(R"({"id":5,"inputs":[]})", std::nullopt, errc::invalid_argument, "request: \"id\" is not a string");
  auto bad_utf8 = decode_request("{\"inputs\":[],\"id\":\"\xff\"}", std::nullopt);
  CHECK(bad_utf8.code() == errc::corrupt_data);
  CHECK(bad_utf8.error().message.starts_with("inference header is not valid JSON: [json.exception.parse_error.101] parse error at line 1, column 20: syntax error while parsing value - invalid string: ill-formed UTF-8 byte"));
}

TEST_CASE("decode_request: BYTES binary elements must fill the buffer exactly and match the shape") {
  auto req = [](const std::string& shape, const std::string& payload) {
    return body_of(R"({"inputs":[{"name":"s","shape":)" + shape + R"(,"datatype":"BYTES","parameters":{"binary_data_size":)" +
                       std::to_string(payload.size()) + "}}]}",
                   payload);
  };
  auto [good, hg] = req("[2]", u32le(1) + "a" + u32le(2) + "bc");
  auto r = decode_request(good, hg);
  REQUIRE(r);
  CHECK(r->inputs[0].strings().value() == std::vector<std::string_view>{"a", "bc"});
  auto [past, hp] = req("[2]", u32le(1) + "a" + u32le(7) + "bc");
  check_request_error(past, hp, errc::truncated, "input 's': BYTES element 1 at offset 5: length 7 runs past the end of the 11-byte buffer");
  auto [few, hf] = req("[3]", u32le(1) + "a" + u32le(2) + "bc");
  check_request_error(few, hf, errc::invalid_argument, "input 's': binary data holds 2 BYTES elements, shape [3] needs 3");
  auto [many, hm] = req("[1]", u32le(1) + "a" + u32le(2) + "bc");
  check_request_error(many, hm, errc::invalid_argument, "input 's': binary data holds more than the 1 BYTES elements of shape [1]");
  protocol_limits lim;
  lim.max_bytes_elements = 1;
  check_request_error(good, hg, errc::limit_exceeded, "input 's': 2 BYTES elements > max_bytes_elements 1", lim);
}

TEST_CASE("decode_request: limits on body, header, tensors and JSON shape") {
  protocol_limits lim;
  lim.max_body_bytes = 10;
  check_request_error(R"({"inputs":[]})", std::nullopt, errc::limit_exceeded, "body of 13 bytes > max_body_bytes 10", lim);
  lim = {};
  lim.max_header_bytes = 12;
  check_request_error(R"({"inputs":[]})", std::nullopt, errc::limit_exceeded, "inference header of 13 bytes > max_header_bytes 12", lim);
  lim = {};
  lim.max_tensors = 1;
  check_request_error(R"({"inputs":[{},{}]})", std::nullopt, errc::limit_exceeded, "2 inputs > max_tensors 1", lim);
  check_request_error(R"({"inputs":[],"outputs":[{},{}]})", std::nullopt, errc::limit_exceeded, "2 outputs > max_tensors 1", lim);
  // Deep nesting and huge objects are refused by the SAX pass, before a document is built.
  const std::string deep = R"({"inputs":[],"parameters":{"a":)" + std::string(100000, '[') + std::string(100000, ']') + "}}";
  check_request_error(deep, std::nullopt, errc::limit_exceeded, "inference header: JSON nesting deeper than max_json_depth 32");
  std::string wide = R"({"inputs":[],"parameters":{)";
  for (int i = 0; i < 300; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  wide += "}}";
  check_request_error(wide, std::nullopt, errc::limit_exceeded, "inference header: object with more than max_object_keys 256 keys");
}

TEST_CASE("decode_response: outputs and the same checks") {
  infer_response resp;
  resp.model_name = "clip";
  resp.model_version = "3";
  resp.outputs.push_back(infer_tensor::from_values<float>("e", {2}, std::vector<float>{1.0f, 2.0f}));
  auto enc = encode_response(resp);
  REQUIRE(enc);
  std::string body = enc->flatten();
  auto dec = decode_response(body, enc->header_length);
  REQUIRE(dec);
  CHECK(dec->find_output("e")->values<float>().value() == std::vector<float>{1.0f, 2.0f});
  CHECK(dec->find_output("nope") == nullptr);
  auto cut = decode_response(std::string_view(body).substr(0, body.size() - 1), enc->header_length);
  CHECK(cut.code() == errc::truncated);
  CHECK(cut.error().message == "output 'e': binary_data_size 8 at offset 0 runs past the end of the 7-byte binary section");
  CHECK(decode_response(R"({"model_name":"m"})", std::nullopt).error().message == "inference header has no \"outputs\"");
}

TEST_CASE("encoder checks tensor data against the shape") {
  infer_request r;
  r.inputs.push_back(infer_tensor::from_values<float>("x", {2, 2}, std::vector<float>{1, 2, 3}));
  auto e = encode_request(r);
  CHECK(e.code() == errc::invalid_argument);
  CHECK(e.error().message == "input 'x': 12 bytes of data do not match shape of 4 FP32 elements");
  r.inputs[0] = infer_tensor::from_strings("s", {3}, {"a", "b"});
  CHECK(encode_request(r).error().message == "input 's': 2 BYTES elements, shape needs 3");
  // Scatter/gather: binary pieces view the tensors' own bytes.
  r.inputs[0] = infer_tensor::from_values<float>("x", {1}, std::vector<float>{1});
  auto ok = encode_request(r);
  REQUIRE(ok);
  REQUIRE(ok->binary.size() == 1);
  CHECK(ok->binary[0].data() == r.inputs[0].data.data());
  // User parameters come first, binary_data_size last (tritonclient's order); a stale one is replaced.
  r.inputs[0].parameters = json::object({{"binary_data_size", 99}, {"note", "n"}});
  CHECK(encode_request(r)->header == R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","parameters":{"note":"n","binary_data_size":4}}]})");
}

TEST_CASE("shared-memory tensors: parameters only, no data, both ways (Triton's system shared memory)") {
  // A request input and a requested output naming regions: no data in the message, parameters kept.
  const std::string body =
      R"({"inputs":[{"name":"x","shape":[2],"datatype":"FP32","parameters":{"shared_memory_region":"in",)"
      R"("shared_memory_byte_size":8,"shared_memory_offset":16}}],"outputs":[{"name":"y","parameters":{)"
      R"("shared_memory_region":"out","shared_memory_byte_size":64}}]})";
  auto req = decode_request(body, std::nullopt);
  REQUIRE(req);
  const auto& x = req->inputs.front();
  CHECK(x.data.empty());
  const auto ref = shared_memory_parameters(x.parameters, "input 'x'").value();
  REQUIRE(ref);
  CHECK(ref->region == "in");
  CHECK(ref->byte_size == 8);
  CHECK(ref->offset == 16);
  const auto out_ref = shared_memory_parameters(req->outputs.front().parameters, "output 'y'").value();
  REQUIRE(out_ref);
  CHECK(out_ref->offset == 0);
  CHECK(encode_request(*req)->header == body);  // re-encodes to the sender's bytes (no data, no binary_data_size)
  CHECK_FALSE(shared_memory_parameters(json::object({{"binary_data", true}}), "w").value());

  // A response output that went to a region: name, datatype and shape only (Triton's HTTP answer; its
  // shared_memory_* parameters are for front ends that carry them, such as gRPC).
  infer_response resp;
  resp.model_name = "m";
  resp.model_version = "1";
  const auto t = infer_tensor::from_values<float>("y", {2}, std::vector<float>{1.0f, 2.0f});
  resp.outputs.push_back(shared_memory_output(t, *out_ref, 8));
  auto enc = encode_response(resp);
  REQUIRE(enc);
  CHECK(enc->binary.empty());
  CHECK_FALSE(enc->header_length);
  CHECK(enc->header ==
        R"({"model_name":"m","model_version":"1","outputs":[{"name":"y","datatype":"FP32","shape":[2]}]})");
  CHECK(resp.outputs.front().parameters["shared_memory_region"] == "out");
  // The response decoder takes an output in shared memory, with its parameters (gRPC's form) or without
  // (HTTP's): no data; its receiver reads the region.
  auto with_params = decode_response(R"({"outputs":[{"name":"y","datatype":"FP32","shape":[2],"parameters":{)"
                                     R"("shared_memory_region":"out","shared_memory_byte_size":8}}]})",
                                     std::nullopt);
  REQUIRE(with_params);
  CHECK(with_params->outputs.front().data.empty());
  CHECK(with_params->outputs.front().parameters["shared_memory_region"] == "out");
  auto bare = decode_response(enc->header, std::nullopt);
  REQUIRE(bare);
  CHECK(bare->outputs.front().data.empty());
  CHECK(bare->outputs.front().shape == std::vector<std::int64_t>{2});
  // Data and a region together stay an error.
  CHECK(decode_response(R"({"outputs":[{"name":"y","datatype":"FP32","shape":[2],"data":[1,2],"parameters":{)"
                        R"("shared_memory_region":"out","shared_memory_byte_size":8}}]})",
                        std::nullopt)
            .code() == errc::invalid_argument);
  CHECK(resp.outputs.front().parameters["shared_memory_byte_size"] == 8);
}

TEST_CASE("status mapping and error bodies") {
  CHECK(http_status(errc::invalid_argument) == 400);
  CHECK(http_status(errc::corrupt_data) == 400);
  CHECK(http_status(errc::truncated) == 400);
  CHECK(http_status(errc::limit_exceeded) == 400);
  CHECK(http_status(errc::shape_overflow) == 400);
  CHECK(http_status(errc::dtype_mismatch) == 400);
  CHECK(http_status(errc::not_found) == 404);
  CHECK(http_status(errc::internal) == 500);
  CHECK(http_status(errc::io_error) == 500);
  auto r = decode_request("{", std::nullopt);
  const auto pe = to_protocol_error(r.error());
  CHECK(pe.http_status == 400);
  CHECK(error_body(pe) == R"({"error":")" + std::string(pe.message) + R"("})");
  CHECK(unavailable(unavailable_reason::queue_full, "model 'vae'").http_status == 503);
  CHECK(unavailable(unavailable_reason::queue_full, "model 'vae'").message == "queue full: model 'vae'");
  CHECK(unavailable(unavailable_reason::not_ready, "").message == "not ready");
  CHECK(model_not_found("vae", "2").http_status == 404);
  CHECK(model_not_found("vae").message == "Request for unknown model: 'vae' is not found");
  CHECK(error_body("bad \"x\"\n\xc3\xa9") == R"({"error":"bad \"x\"\n\u00E9"})");
  CHECK(error_body("\xff") == R"({"error":"\uFFFD"})");
  CHECK(parse_error_body(error_body("oops \"q\"")).value() == "oops \"q\"");
  CHECK(parse_error_body("{}").code() == errc::corrupt_data);
  CHECK(parse_error_body("nope").code() == errc::corrupt_data);
}
