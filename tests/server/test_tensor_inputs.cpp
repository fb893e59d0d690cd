// Declared interfaces as Triton serves them: a model without preprocessing is fed through its declared input
// tensor (name, datatype, [batch, dims...]) and describes that input in its metadata and config; a model with
// preprocessing takes raw fields and its declared tensor; a text model whose input is token ids also takes
// "input_ids" (INT64 or INT32) with an optional "attention_mask".
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server_test_util.hpp"

using namespace server_test;

namespace {

// y = 2x + 1 over f32 [3]; no preprocessing (a Triton tensor model).
class affine_model {
 public:
  std::string_view name() const { return "affine"; }
  std::string_view version() const { return "affine-1"; }
  std::string_view preprocess_key() const { return "preprocess=none"; }
  models::modality input_modality() const { return models::modality::image; }
  std::span<const models::tensor_meta> inputs() const { return in_; }
  std::span<const models::tensor_meta> outputs() const { return out_; }
  std::size_t max_batch_size() const { return 8; }
  jitembed::device device() const { return jitembed::device::cpu(); }
  bool has_preprocess() const { return false; }
  result<tensor> preprocess(bytes_view, const decode_limits&) const { return fail(errc::invalid_argument, "affine: no preprocessing"); }
  result<std::vector<models::named_tensors>> run(std::span<const tensor> batch) const {
    std::vector<models::named_tensors> out;
    for (const auto& x : batch) {
      tensor y = tensor::empty({3}, dtype::f32);
      for (int i = 0; i < 3; ++i) y.data<float>()[i] = 2.0f * x.data<float>()[i] + 1.0f;
      out.push_back({{"y", std::move(y)}});
    }
    return out;
  }

 private:
  std::vector<models::tensor_meta> in_{{"INPUT__0", dtype::f32, {3}}};
  std::vector<models::tensor_meta> out_{{"y", dtype::f32, {3}}};
};

// A text model over i64 [2, 4] (ids, mask): the caption's bytes are its ids (padded with 0, mask 0);
// output "s" = (sum of ids * mask, sum of mask).
class ids_model {
 public:
  std::string_view name() const { return "ids"; }
  std::string_view version() const { return "ids-1"; }
  std::string_view preprocess_key() const { return "tokens=bytes"; }
  models::modality input_modality() const { return models::modality::text; }
  std::span<const models::tensor_meta> inputs() const { return in_; }
  std::span<const models::tensor_meta> outputs() const { return out_; }
  std::size_t max_batch_size() const { return 8; }
  jitembed::device device() const { return jitembed::device::cpu(); }
  result<tensor> preprocess(bytes_view raw, const decode_limits&) const {
    tensor t = tensor::zeros({2, 4}, dtype::i64);
    for (std::size_t i = 0; i < raw.size() && i < 4; ++i) {
      t.data<std::int64_t>()[i] = static_cast<std::int64_t>(raw[i]);
      t.data<std::int64_t>()[4 + i] = 1;
    }
    return t;
  }
  result<std::vector<models::named_tensors>> run(std::span<const tensor> batch) const {
    std::vector<models::named_tensors> out;
    for (const auto& x : batch) {
      const auto* v = x.data<std::int64_t>();
      tensor s = tensor::zeros({2}, dtype::f32);
      for (int i = 0; i < 4; ++i) {
        s.data<float>()[0] += static_cast<float>(v[i] * v[4 + i]);
        s.data<float>()[1] += static_cast<float>(v[4 + i]);
      }
      out.push_back({{"s", std::move(s)}});
    }
    return out;
  }

 private:
  std::vector<models::tensor_meta> in_{{"INPUT__0", dtype::i64, {2, 4}}};
  std::vector<models::tensor_meta> out_{{"s", dtype::f32, {2}}};
};

server::service tensor_service() {
  server::server_config c;
  c.preprocess_threads = 1;
  auto s = server::service::create(c).value();
  server::model_config a;
  a.name = "affine";
  REQUIRE(s.load(a, models::any_model(affine_model{})));
  server::model_config t;
  t.name = "ids";
  REQUIRE(s.load(t, models::any_model(ids_model{})));
  return s;
}

std::vector<float> output_floats(const ks::infer_tensor& t) {
  std::vector<float> v(t.data.size() / sizeof(float));
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

std::string input_errc(const reply& r) {
  auto c = ks::parse_error_code(r.body);
  return c ? std::string(to_string(*c)) : "<none>";
}

}  // namespace

TEST_CASE("tensor inputs: a model without preprocessing serves its declared input, as Triton does") {
  auto s = tensor_service();
  const std::vector<float> x{1, 2, 3, -1, 0, 0.5f};
  auto r = infer(s, "affine", tensors_request({ks::infer_tensor::from_values<float>("INPUT__0", {2, 3}, x)}));
  REQUIRE_MESSAGE(r.status == 200, r.body);
  const auto out = decode(r);
  REQUIRE(out.outputs.size() == 1);
  CHECK(out.outputs[0].shape == std::vector<std::int64_t>{2, 3});
  CHECK(output_floats(out.outputs[0]) == std::vector<float>{3, 5, 7, -1, 1, 2});

  // metadata and config describe the declared input, not a BYTES one
  const auto meta = nlohmann::json::parse(call(s, "GET", "/v2/models/affine").body);
  CHECK(meta["inputs"] == nlohmann::json::parse(R"([{"name":"INPUT__0","datatype":"FP32","shape":[-1,3]}])"));
  CHECK(meta["parameters"]["preprocessing"] == "none");
  const auto cfg = nlohmann::json::parse(call(s, "GET", "/v2/models/affine/config").body);
  CHECK(cfg["input"][0]["name"] == "INPUT__0");
  CHECK(cfg["input"][0]["data_type"] == "TYPE_FP32");
  CHECK(cfg["input"][0]["dims"] == nlohmann::json::parse("[3]"));
  CHECK(cfg["parameters"]["preprocessing"]["string_value"] == "none");

  // raw bytes: refused, naming what the model takes
  auto raw = infer(s, "affine", bytes_request("image", {"abc"}));
  CHECK(raw.status == 400);
  CHECK(input_errc(raw) == "invalid_argument");
  CHECK(raw.body.find("has no preprocessing") != std::string::npos);
  CHECK(raw.body.find("'INPUT__0' FP32 [3]") != std::string::npos);
  // wrong datatype, wrong item shape, a second input, an unknown name
  const std::vector<double> xd{1, 2, 3};
  auto bad_type = infer(s, "affine", tensors_request({ks::infer_tensor::from_values<double>("INPUT__0", {1, 3}, xd)}));
  CHECK(bad_type.status == 400);
  CHECK(input_errc(bad_type) == "dtype_mismatch");
  auto bad_shape = infer(s, "affine", tensors_request({ks::infer_tensor::from_values<float>("INPUT__0", {3, 2}, x)}));
  CHECK(bad_shape.status == 400);
  CHECK(bad_shape.body.find("expected [batch] + [3]") != std::string::npos);
  auto two = infer(s, "affine", tensors_request({ks::infer_tensor::from_values<float>("INPUT__0", {2, 3}, x),
                                                 ks::infer_tensor::from_values<float>("OTHER", {2, 3}, x)}));
  CHECK(two.status == 400);
  auto unknown = infer(s, "affine", tensors_request({ks::infer_tensor::from_values<float>("x", {2, 3}, x)}));
  CHECK(unknown.status == 400);
  CHECK(unknown.body.find("unexpected input 'x'") != std::string::npos);
  // the service keeps serving
  CHECK(infer(s, "affine", tensors_request({ks::infer_tensor::from_values<float>("INPUT__0", {2, 3}, x)})).status == 200);
}

TEST_CASE("tensor inputs: a text model takes captions, its declared ids tensor, and input_ids (+ attention_mask)") {
  auto s = tensor_service();
  // "ab": ids 97, 98, mask 1 1 0 0 -> (195, 2)
  auto text = infer(s, "ids", bytes_request("text", {"ab", "abcdef"}));
  REQUIRE_MESSAGE(text.status == 200, text.body);
  const std::vector<float> want{195, 2, 97 + 98 + 99 + 100, 4};
  CHECK(output_floats(decode(text).outputs[0]) == want);

  const auto meta = nlohmann::json::parse(call(s, "GET", "/v2/models/ids").body);
  CHECK(meta["inputs"][0]["name"] == "text");
  CHECK(meta["inputs"][0]["datatype"] == "BYTES");
  CHECK(meta["parameters"]["preprocessing"] == "text");
  CHECK(nlohmann::json::parse(meta["parameters"]["tensor_input"].get<std::string>())["name"] == "INPUT__0");

  // the declared tensor: [batch, 2, 4]
  const std::vector<std::int64_t> declared{97, 98, 0, 0, 1, 1, 0, 0, 97, 98, 99, 100, 1, 1, 1, 1};
  auto direct = infer(s, "ids", tensors_request({ks::infer_tensor::from_values<std::int64_t>("INPUT__0", {2, 2, 4}, declared)}));
  REQUIRE_MESSAGE(direct.status == 200, direct.body);
  CHECK(output_floats(decode(direct).outputs[0]) == want);

  // input_ids INT32 with an INT64 attention_mask
  const std::vector<std::int32_t> ids32{97, 98, 7, 7, 97, 98, 99, 100};
  const std::vector<std::int64_t> mask{1, 1, 0, 0, 1, 1, 1, 1};
  auto ids = infer(s, "ids", tensors_request({ks::infer_tensor::from_values<std::int32_t>("input_ids", {2, 4}, ids32),
                                              ks::infer_tensor::from_values<std::int64_t>("attention_mask", {2, 4}, mask)}));
  REQUIRE_MESSAGE(ids.status == 200, ids.body);
  CHECK(output_floats(decode(ids).outputs[0]) == want);
  // without a mask every position counts (transformers' default)
  auto nomask = infer(s, "ids", tensors_request({ks::infer_tensor::from_values<std::int32_t>("input_ids", {2, 4}, ids32)}));
  REQUIRE_MESSAGE(nomask.status == 200, nomask.body);
  CHECK(output_floats(decode(nomask).outputs[0]) == std::vector<float>{97 + 98 + 14, 4, 97 + 98 + 99 + 100, 4});

  // errors: a length that is not L, a mask of another shape, a float mask, a third input
  const std::vector<std::int64_t> five(5, 1);
  auto long_ids = infer(s, "ids", tensors_request({ks::infer_tensor::from_values<std::int64_t>("input_ids", {1, 5}, five)}));
  CHECK(long_ids.status == 400);
  CHECK(long_ids.body.find("expected [batch, 4]") != std::string::npos);
  auto bad_mask = infer(s, "ids", tensors_request({ks::infer_tensor::from_values<std::int32_t>("input_ids", {2, 4}, ids32),
                                                   ks::infer_tensor::from_values<std::int64_t>("attention_mask", {1, 4},
                                                                                               std::vector<std::int64_t>{1, 1, 1, 1})}));
  CHECK(bad_mask.status == 400);
  const std::vector<float> fmask(8, 1.0f);
  auto float_mask = infer(s, "ids", tensors_request({ks::infer_tensor::from_values<std::int32_t>("input_ids", {2, 4}, ids32),
                                                     ks::infer_tensor::from_values<float>("attention_mask", {2, 4}, fmask)}));
  CHECK(float_mask.status == 400);
  CHECK(input_errc(float_mask) == "dtype_mismatch");
  auto third = infer(s, "ids", tensors_request({ks::infer_tensor::from_values<std::int32_t>("input_ids", {2, 4}, ids32),
                                                ks::infer_tensor::from_values<std::int32_t>("token_type_ids", {2, 4}, ids32)}));
  CHECK(third.status == 400);
  CHECK(third.body.find("unexpected input 'token_type_ids'") != std::string::npos);
  // a model that is not a token-id text model does not take input_ids
  auto not_text = infer(s, "affine", tensors_request({ks::infer_tensor::from_values<std::int32_t>("input_ids", {2, 4}, ids32)}));
  CHECK(not_text.status == 400);
}
