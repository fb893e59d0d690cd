// torch_model: a C++ torch::nn module and a TorchScript module run through the adapter equal running them
// directly; batching, metadata, fingerprints, preprocessing and errors. One TU: LibTorch headers are heavy.
// LibTorch first: Debian's LibTorch is built with glog, whose CHECK* macros would replace doctest's.
#include <torch/cuda.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "jitembed/models/torch_adapter.hpp"

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <unordered_map>
#include <vector>

#include "jitembed/codec/jpeg.hpp"
#include "jitembed/models/any_model.hpp"
#include "jitembed/models/image_latent.hpp"

using namespace jitembed;
using namespace jitembed::models;

static_assert(model<torch_model>);

namespace {

// A small image encoder: Conv2d -> ReLU -> (channel means, Linear over the flattened map).
struct tiny_encoderImpl : torch::nn::Module {
  tiny_encoderImpl() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).padding(1)));
    fc = register_module("fc", torch::nn::Linear(4 * 8 * 8, 6));
  }
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor x) {
    auto h = torch::relu(conv(x));
    return {h.mean({2, 3}), fc(h.flatten(1))};
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(tiny_encoder);

torch_model_options encoder_options() {
  torch_model_options o;
  o.name = "tiny-encoder";
  o.version = "test@1";
  o.input = {"image", dtype::u8, {8, 8, 3}};
  o.outputs = {{"pooled", dtype::f32, {4}}, {"embed", dtype::f32, {6}}};
  o.max_batch_size = 4;
  o.batch_transform = torch_image_to_nchw_unit;
  return o;
}

tensor random_image(std::int64_t h, std::int64_t w, std::uint32_t seed) {
  tensor t = tensor::empty({h, w, 3}, dtype::u8);
  auto* p = t.data<std::uint8_t>();
  for (std::size_t i = 0; i < t.nbytes(); ++i) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = static_cast<std::uint8_t>(seed >> 24);
  }
  return t;
}

torch::Tensor as_torch(const tensor& t) {
  std::vector<std::int64_t> sizes(t.shape().begin(), t.shape().end());
  return torch::from_blob(t.data(), sizes, models::detail::to_torch_dtype(t.dtype())).clone();
}

torch::Tensor stack_direct(const std::vector<tensor>& items) {
  std::vector<torch::Tensor> ts;
  for (const auto& t : items) ts.push_back(as_torch(t));
  return torch::stack(ts);
}

// A TorchScript module defined in C++ (no Python): y = tanh(x @ w + b), returned as a dict.
torch::jit::Module script_module(float scale) {
  torch::jit::Module m("jitembed_test_proj");
  m.register_parameter("w", torch::arange(12, torch::kFloat).reshape({4, 3}).mul(scale / 12.f), false);
  m.register_parameter("b", torch::full({3}, 0.25f), false);
  m.define(R"(
def forward(self, x):
    y = torch.tanh(torch.matmul(x, self.w) + self.b)
    return {"proj": y, "energy": (y * y).sum(1)}
)");
  return m;
}

torch_model_options script_options() {
  torch_model_options o;
  o.name = "script-proj";
  o.version = "script@1";
  o.input_modality = modality::text;
  o.input = {"features", dtype::f32, {4}};
  o.outputs = {{"proj", dtype::f32, {3}}, {"energy", dtype::f32, {}}};
  o.max_batch_size = 8;
  return o;
}

tensor features(float a) {
  tensor t = tensor::empty({4}, dtype::f32);
  for (int i = 0; i < 4; ++i) t.data<float>()[i] = a + 0.5f * static_cast<float>(i);
  return t;
}

void check_equal(const tensor& got, const torch::Tensor& want, double atol = 0.0) {
  REQUIRE(got.device().is_cpu());
  const torch::Tensor g = as_torch(got);
  REQUIRE(g.sizes() == want.sizes());
  if (atol == 0.0) {
    CHECK(torch::equal(g, want.contiguous()));
  } else {
    CHECK(torch::allclose(g, want.contiguous(), 0.0, atol));
  }
}

struct temp_file {
  std::filesystem::path path;
  explicit temp_file(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("jitembed_torch_" + std::to_string(::getpid()) + "_" + name)) {}
  ~temp_file() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

}  // namespace

TEST_CASE("torch_model: nn module (Conv2d + Linear) through the adapter equals running it directly") {
  torch::manual_seed(1);
  tiny_encoder net;
  auto m = torch_model::create(net, encoder_options());
  REQUIRE(m);
  CHECK(m->name() == "tiny-encoder");
  CHECK(m->inputs().size() == 1);
  CHECK(m->outputs().size() == 2);
  CHECK(m->device() == device::cpu());

  const std::vector<tensor> items{random_image(8, 8, 1), random_image(8, 8, 2), random_image(8, 8, 3)};
  auto out = m->run(items);
  REQUIRE(out);
  REQUIRE(out->size() == 3);

  torch::NoGradGuard ng;
  auto [pooled, embed] = net->forward(torch_image_to_nchw_unit(stack_direct(items)));
  for (std::int64_t i = 0; i < 3; ++i) {
    const auto& o = (*out)[static_cast<std::size_t>(i)];
    REQUIRE(o.size() == 2);
    CHECK(o[0].first == "pooled");
    CHECK(o[1].first == "embed");
    CHECK(o[0].second.shape() == shape{4});
    CHECK(o[1].second.shape() == shape{6});
    CHECK(o[1].second.dtype() == dtype::f32);
    check_equal(o[0].second, pooled[i]);
    check_equal(o[1].second, embed[i]);
  }

  SUBCASE("a batch of 3 equals 3 singles") {
    for (std::size_t i = 0; i < 3; ++i) {
      auto single = m->run(std::span<const tensor>(&items[i], 1));
      REQUIRE(single);
      REQUIRE(single->size() == 1);
      check_equal((*single)[0][1].second, as_torch((*out)[i][1].second), 1e-5);
      check_equal((*single)[0][0].second, as_torch((*out)[i][0].second), 1e-5);
    }
  }
  SUBCASE("outputs are zero-copy views of one batch tensor that outlive the model") {
    const auto& a = (*out)[0][1].second;
    const auto& b = (*out)[1][1].second;
    CHECK(a.owner() == b.owner());
    CHECK(static_cast<const std::byte*>(b.data()) == static_cast<const std::byte*>(a.data()) + 6 * sizeof(float));
    std::vector<float> before(a.data<float>(), a.data<float>() + 6);
    m = fail(errc::internal, "drop the model");
    net = tiny_encoder(nullptr);
    CHECK(std::memcmp(before.data(), a.data(), 6 * sizeof(float)) == 0);
  }
}

TEST_CASE("torch_model: the model concept, any_model, metadata and version fingerprint") {
  torch::manual_seed(2);
  tiny_encoder net;
  auto m = torch_model::create(net, encoder_options());
  REQUIRE(m);
  any_model any(*m);
  CHECK(any.name() == "tiny-encoder");
  REQUIRE(any.get_if<torch_model>() != nullptr);
  const std::string v = std::string(m->version());
  CHECK(v.find("user=test@1;") != std::string::npos);
  CHECK(v.find("params=" + std::string(m->parameter_hash())) != std::string::npos);
  CHECK(m->parameter_hash().size() == 32);
  CHECK(v.find("outputs=pooled:f32[4],embed:f32[6];") != std::string::npos);

  // The same weights give the same version; one changed weight changes it.
  auto again = torch_model::create(net, encoder_options());
  REQUIRE(again);
  CHECK(again->version() == m->version());
  {
    torch::NoGradGuard ng;
    net->fc->bias[0].add_(1.0f);
  }
  auto changed = torch_model::create(net, encoder_options());
  REQUIRE(changed);
  CHECK(changed->parameter_hash() != m->parameter_hash());
  CHECK(changed->version() != m->version());
  auto o = encoder_options();
  o.version = "test@2";
  auto renamed = torch_model::create(net, o);
  REQUIRE(renamed);
  CHECK(renamed->parameter_hash() == changed->parameter_hash());
  CHECK(renamed->version() != changed->version());

  // Through any_model it runs the same.
  const std::vector<tensor> items{random_image(8, 8, 7)};
  auto a = any.run(items);
  auto b = m->run(items);
  REQUIRE(a);
  REQUIRE(b);
  check_equal((*a)[0][1].second, as_torch((*b)[0][1].second));
}

TEST_CASE("torch_model: TorchScript module defined in C++, saved and loaded, round-trips") {
  torch::jit::Module src = script_module(1.0f);
  temp_file file("proj.pt");
  src.save(file.path.string());

  auto m = torch_model::open(file.path, script_options());
  REQUIRE(m);
  CHECK(m->input_modality() == modality::text);
  const std::vector<tensor> items{features(0.f), features(1.f), features(-2.f)};
  auto out = m->run(items);
  REQUIRE(out);
  REQUIRE(out->size() == 3);

  torch::NoGradGuard ng;
  const auto direct = src.forward({stack_direct(items)}).toGenericDict();
  const torch::Tensor proj = direct.at("proj").toTensor();
  const torch::Tensor energy = direct.at("energy").toTensor();
  for (std::int64_t i = 0; i < 3; ++i) {
    const auto& o = (*out)[static_cast<std::size_t>(i)];
    REQUIRE(o.size() == 2);
    CHECK(o[0].first == "proj");
    CHECK(o[1].first == "energy");
    CHECK(o[1].second.rank() == 0);
    check_equal(o[0].second, proj[i]);
    check_equal(o[1].second, energy[i]);
  }

  // The in-memory module and the loaded one have the same parameter fingerprint; other weights differ.
  auto mem = torch_model::create(src, script_options());
  REQUIRE(mem);
  CHECK(mem->version() == m->version());
  auto other = torch_model::create(script_module(2.0f), script_options());
  REQUIRE(other);
  CHECK(other->version() != m->version());

  SUBCASE("batch of 3 equals 3 singles") {
    for (std::size_t i = 0; i < 3; ++i) {
      auto single = m->run(std::span<const tensor>(&items[i], 1));
      REQUIRE(single);
      check_equal((*single)[0][0].second, as_torch((*out)[i][0].second), 1e-6);
    }
  }
  SUBCASE("outputs cast to the declared dtype") {
    auto o = script_options();
    o.outputs[0].type = dtype::bf16;
    auto bm = torch_model::create(src, o);
    REQUIRE(bm);
    auto r = bm->run(items);
    REQUIRE(r);
    CHECK((*r)[0][0].second.dtype() == dtype::bf16);
    check_equal((*r)[2][0].second, proj[2].to(torch::kBFloat16));
  }
  SUBCASE("text modality without a preprocess function") {
    auto p = m->preprocess(bytes_view{}, decode_limits{});
    REQUIRE_FALSE(p);
    CHECK(p.code() == errc::invalid_argument);
    CHECK(m->preprocess_key() == "preprocess=none;");
  }
}

TEST_CASE("torch_model: concurrent run() calls give the results of sequential ones") {
  torch::manual_seed(6);
  tiny_encoder net;
  auto m = torch_model::create(net, encoder_options());
  REQUIRE(m);
  std::vector<std::vector<tensor>> batches;
  std::vector<std::vector<named_tensors>> want;
  for (std::uint32_t t = 0; t < 4; ++t) {
    batches.push_back({random_image(8, 8, 100 + t), random_image(8, 8, 200 + t)});
    auto r = m->run(batches.back());
    REQUIRE(r);
    want.push_back(std::move(*r));
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        auto r = m->run(batches[t]);
        if (!r) {
          ++mismatches[t];
          continue;
        }
        for (std::size_t i = 0; i < 2; ++i)
          for (std::size_t k = 0; k < 2; ++k)
            if (std::memcmp((*r)[i][k].second.data(), want[t][i][k].second.data(), want[t][i][k].second.nbytes()) != 0)
              ++mismatches[t];
      }
    });
  for (auto& th : threads) th.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}

TEST_CASE("torch_model: AnyModule and a user preprocess function") {
  torch::manual_seed(3);
  torch::nn::AnyModule lin(torch::nn::Linear(4, 2));
  auto o = script_options();
  o.name = "any-linear";
  o.outputs = {{"y", dtype::f32, {2}}};
  o.preprocess = [](bytes_view raw, const decode_limits&) -> result<tensor> {
    if (raw.size() != 4) return fail(errc::invalid_argument, "want 4 bytes");
    tensor t = tensor::empty({4}, dtype::f32);
    for (int i = 0; i < 4; ++i) t.data<float>()[i] = static_cast<float>(std::to_integer<int>(raw[static_cast<std::size_t>(i)]));
    return t;
  };
  o.preprocess_key = "bytes-as-floats;";
  auto m = torch_model::create(lin, o);
  REQUIRE(m);
  CHECK(m->preprocess_key() == "bytes-as-floats;");
  const std::byte raw[4] = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  auto t = m->preprocess(bytes_view(raw, 4), decode_limits{});
  REQUIRE(t);
  auto r = m->run(std::span<const tensor>(&*t, 1));
  REQUIRE(r);
  torch::NoGradGuard ng;
  const torch::Tensor want = lin.forward(torch::tensor({1.f, 2.f, 3.f, 4.f}).unsqueeze(0))[0];
  check_equal((*r)[0][0].second, want);
  auto bad = m->preprocess(bytes_view(raw, 3), decode_limits{});
  REQUIRE_FALSE(bad);
  CHECK(bad.code() == errc::invalid_argument);

  o.preprocess_key.clear();
  auto nokey = torch_model::create(lin, o);
  REQUIRE_FALSE(nokey);
  CHECK(nokey.code() == errc::invalid_argument);
}

TEST_CASE("torch_model: reference image preprocessing matches image-latent's") {
  torch::manual_seed(4);
  tiny_encoder net;
  auto o = encoder_options();
  o.input = {"image", dtype::u8, {16, 16, 3}};
  o.outputs = {{"pooled", dtype::f32, {4}}, {"embed", dtype::f32, {6}}};
  auto m = torch_model::create(net, o);
  REQUIRE(m);
  image_latent_options io;
  io.bucket = 16;
  image_latent ref = image_latent::create(io).value();
  CHECK(m->preprocess_key() == ref.preprocess_key());

  auto jpeg = codec::encode_jpeg(random_image(40, 24, 9), codec::jpeg_encode_options{});
  REQUIRE(jpeg);
  auto mine = m->preprocess(bytes_view(jpeg->data(), jpeg->size()), decode_limits{});
  auto theirs = ref.preprocess(bytes_view(jpeg->data(), jpeg->size()), decode_limits{});
  REQUIRE(mine);
  REQUIRE(theirs);
  CHECK(mine->shape() == shape{16, 16, 3});
  CHECK(std::memcmp(mine->data(), theirs->data(), mine->nbytes()) == 0);

  const std::byte junk[8] = {std::byte{0xFF}, std::byte{0xD8}, std::byte{0x00}, std::byte{0x01}};
  auto bad = m->preprocess(bytes_view(junk, 8), decode_limits{});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.rfind("tiny-encoder: jpeg", 0) == 0);

  // The module wants 8x8 after the conv (Linear 4*8*8): a 16x16 input fails inside forward, as an error.
  auto r = m->run(std::span<const tensor>(&*mine, 1));
  REQUIRE_FALSE(r);
  CHECK(r.code() == errc::internal);
  CHECK(r.error().message.rfind("tiny-encoder: forward failed: ", 0) == 0);
}

TEST_CASE("torch_model: bad batches and bad options are error results, never exceptions") {
  torch::manual_seed(5);
  tiny_encoder net;
  auto m = torch_model::create(net, encoder_options());
  REQUIRE(m);

  SUBCASE("wrong dtype") {
    const std::vector<tensor> b{tensor::zeros({8, 8, 3}, dtype::f32)};
    auto r = m->run(b);
    REQUIRE_FALSE(r);
    CHECK(r.code() == errc::dtype_mismatch);
  }
  SUBCASE("wrong shape") {
    const std::vector<tensor> b{random_image(8, 8, 1), random_image(8, 9, 1)};
    auto r = m->run(b);
    REQUIRE_FALSE(r);
    CHECK(r.code() == errc::invalid_argument);
    CHECK(r.error().message == "tiny-encoder: batch[1] 'image' has shape [8,9,3], expected [8,8,3]");
  }
  SUBCASE("batch over max_batch_size") {
    const std::vector<tensor> b(5, random_image(8, 8, 1));
    auto r = m->run(b);
    REQUIRE_FALSE(r);
    CHECK(r.code() == errc::limit_exceeded);
  }
  SUBCASE("empty batch") {
    auto r = m->run({});
    REQUIRE(r);
    CHECK(r->empty());
  }
  SUBCASE("variable extents must agree within a batch") {
    torch::jit::Module s = script_module(1.0f);
    auto o = script_options();
    o.input = {"features", dtype::f32, {-1, 4}};
    o.outputs = {{"proj", dtype::f32, {-1, 3}}, {"energy", dtype::f32, {-1}}};
    auto v = torch_model::create(s, o);
    REQUIRE(v);
    // [N, L, 4] @ [4, 3] -> [N, L, 3]; the energy sums dim 1 (L) -> [N, 3].
    const std::vector<tensor> same{tensor::zeros({2, 4}, dtype::f32), tensor::zeros({2, 4}, dtype::f32)};
    auto ok = v->run(same);
    REQUIRE(ok);
    CHECK((*ok)[1][0].second.shape() == shape{2, 3});
    const std::vector<tensor> differ{tensor::zeros({2, 4}, dtype::f32), tensor::zeros({3, 4}, dtype::f32)};
    auto r = v->run(differ);
    REQUIRE_FALSE(r);
    CHECK(r.code() == errc::invalid_argument);
    CHECK(r.error().message.find("items of one batch must agree") != std::string::npos);
  }
  SUBCASE("declared outputs that disagree with forward") {
    auto o = encoder_options();
    o.outputs[1].shape = {7};
    auto w = torch_model::create(net, o);
    REQUIRE(w);
    auto r = w->run(std::vector<tensor>{random_image(8, 8, 1)});
    REQUIRE_FALSE(r);
    CHECK(r.code() == errc::internal);
    CHECK(r.error().message == "tiny-encoder: output 'embed' has item shape [6], declared [7] (batch [1,6])");
    o.outputs.pop_back();
    auto one = torch_model::create(net, o);
    REQUIRE(one);
    auto r1 = one->run(std::vector<tensor>{random_image(8, 8, 1)});
    REQUIRE_FALSE(r1);
    CHECK(r1.code() == errc::internal);
    CHECK(r1.error().message == "tiny-encoder: forward returned 2 values, 1 outputs are declared");
  }
  SUBCASE("bad options") {
    auto o = encoder_options();
    o.outputs.clear();
    CHECK(torch_model::create(net, o).code() == errc::invalid_argument);
    o = encoder_options();
    o.name.clear();
    CHECK(torch_model::create(net, o).code() == errc::invalid_argument);
    o = encoder_options();
    o.max_batch_size = 0;
    CHECK(torch_model::create(net, o).code() == errc::invalid_argument);
    o = encoder_options();
    o.outputs[1].name = "pooled";
    CHECK(torch_model::create(net, o).code() == errc::invalid_argument);
    o = encoder_options();
    o.input = {"image", dtype::f32, {8, 8, 3}};  // reference image preprocessing makes u8
    CHECK(torch_model::create(net, o).code() == errc::invalid_argument);
    CHECK(torch_model::create(tiny_encoder(nullptr), encoder_options()).code() == errc::invalid_argument);
    if (!torch::cuda::is_available()) {
      o = encoder_options();
      o.device = device::cuda(0);
      auto c = torch_model::create(net, o);
      REQUIRE_FALSE(c);
      CHECK(c.code() == errc::invalid_argument);
      CHECK(c.error().message.rfind("torch_model 'tiny-encoder': cannot prepare the module: ", 0) == 0);
    }
  }
  SUBCASE("TorchScript files that are missing or not TorchScript") {
    auto missing = torch_model::open("/nonexistent/jitembed/model.pt", script_options());
    REQUIRE_FALSE(missing);
    CHECK(missing.code() == errc::not_found);
    temp_file junk("junk.pt");
    {
      std::ofstream f(junk.path, std::ios::binary);
      f << "this is not a zip archive";
    }
    auto bad = torch_model::open(junk.path, script_options());
    REQUIRE_FALSE(bad);
    CHECK(bad.code() == errc::decode_failed);
  }
}
