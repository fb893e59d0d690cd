// The model repository's TorchScript backend (platform pytorch_libtorch): modules made in C++ and saved
// into version directories, served through service::handle and compared with eager LibTorch; bad
// repository content (a file that is not a model, a forward that throws, dims that disagree with the
// module, outputs of the wrong shape) fails that model only; fingerprints follow the weights.
// LibTorch first: Debian's LibTorch is built with glog, whose CHECK* macros would replace doctest's.
#include "jitembed/models/torch_repository.hpp"

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/codec/jpeg.hpp"
#include "jitembed/server/repository/model_repository.hpp"
#include "server/server_test_util.hpp"

using namespace jitembed;
using namespace jitembed::server;
using namespace server_test;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& name) {
    path = fs::temp_directory_path() / ("jitembed_repo_torch_" + std::to_string(::getpid()) + "_" + name + "_" +
                                        std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// An image encoder: [N, 3, 8, 8] in [0, 1] -> (per-channel means * scale [N, 3], total energy [N]).
torch::jit::Module image_module(float scale0) {
  torch::jit::Module m("jitembed_repo_image");
  m.register_parameter("scale", torch::tensor({scale0, 2.0f, -1.5f}), false);
  m.define(R"(
def forward(self, x):
    means = x.mean([2, 3]) * self.scale
    return (means, (x * x).sum([1, 2, 3]))
)");
  return m;
}

// A projection of f32 [4] features: [N, 4] @ [4, 3].
torch::jit::Module proj_module() {
  torch::jit::Module m("jitembed_repo_proj");
  m.register_parameter("w", torch::arange(12, torch::kFloat).reshape({4, 3}).div(12.f), false);
  m.define(R"(
def forward(self, x):
    return torch.matmul(x, self.w)
)");
  return m;
}

// forward throws on the warm-up batch (and any batch of N rows with 4N not a multiple of 7): a view LibTorch
// refuses. A module defined in C++ cannot name Python's exception types, so it cannot `raise`.
torch::jit::Module throwing_module() {
  torch::jit::Module m("jitembed_repo_throws");
  m.register_parameter("w", torch::ones({4}), false);
  m.define(R"(
def forward(self, x):
    return (x * self.w).view(-1, 7)
)");
  return m;
}

const std::string kImageConfig = R"pb(
platform: "pytorch_libtorch"
max_batch_size: 4
input [ { name: "INPUT__0" data_type: TYPE_UINT8 dims: [ 8, 8, 3 ] } ]
output [ { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ ] }, { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group [ { kind: KIND_CPU count: 2 } ]
parameters { key: "modality" value { string_value: "image" } }
parameters { key: "batch_transform" value { string_value: "nchw_unit" } }
parameters { key: "INFERENCE_MODE" value { string_value: "true" } }
)pb";

std::string proj_config(const std::string& input_dims = "4", const std::string& output_dims = "3", const std::string& extra = {}) {
  return "backend: \"pytorch\"\nmax_batch_size: 8\n"
         "input [ { name: \"INPUT__0\" data_type: TYPE_FP32 dims: [ " + input_dims + " ] } ]\n"
         "output [ { name: \"OUTPUT__0\" data_type: TYPE_FP32 dims: [ " + output_dims + " ] } ]\n" + extra;
}

repository_options torch_options() {
  repository_options o;
  o.backends.add("pytorch_libtorch", models::torch_script_backend());
  o.backends.add("torch_aoti", models::torch_aoti_backend());
  return o;
}

const repository_entry* entry(const std::vector<repository_entry>& idx, const std::string& name, const std::string& version = {}) {
  for (const auto& e : idx)
    if (e.name == name && e.version == version) return &e;
  return nullptr;
}

}  // namespace

TEST_CASE("repository torch: a TorchScript image model serves through the service, equal to eager LibTorch") {
  temp_dir d("serve");
  write(d.path / "enc" / "config.pbtxt", kImageConfig);
  fs::create_directories(d.path / "enc" / "1");
  image_module(0.5f).save((d.path / "enc" / "1" / "model.pt").string());
  auto repo = model_repository::open(d.path, torch_options());
  REQUIRE(repo);
  auto s = service::create(server_config{}).value();
  auto r = repo->load(s, "enc");
  REQUIRE_MESSAGE(r, (r ? "" : r.error().message));
  CHECK(repo->ignored("enc") == std::vector<std::string>{"parameters.INFERENCE_MODE"});
  s.attach(*repo);

  const std::vector<std::string> jpegs = {jpeg_bytes(8, 8, 1), jpeg_bytes(16, 12, 2), jpeg_bytes(8, 8, 3)};
  auto res = infer(s, "enc", bytes_request("image", {jpegs[0], jpegs[1], jpegs[2]}));
  REQUIRE_MESSAGE(res.status == 200, res.body);
  const auto out = decode(res);
  REQUIRE(out.outputs.size() == 2);
  // declared OUTPUT__1 first: each output is forward's value at its __k position, answered in that order
  CHECK(out.outputs[0].name == "OUTPUT__0");
  CHECK(out.outputs[0].shape == std::vector<std::int64_t>{3, 3});
  CHECK(out.outputs[1].name == "OUTPUT__1");
  CHECK(out.outputs[1].shape == std::vector<std::int64_t>{3});

  // Eager: the same preprocessing (JPEG decoded and stretched to 8x8, as torch_model does), the same module.
  auto eager = image_module(0.5f);
  eager.eval();
  std::vector<torch::Tensor> items;
  for (const auto& j : jpegs) {
    codec::jpeg_decode_options jo;
    jo.target_height = 8;
    jo.target_width = 8;
    auto t = codec::decode_jpeg(bytes_view(reinterpret_cast<const std::byte*>(j.data()), j.size()), jo, decode_limits{}).value();
    items.push_back(torch::from_blob(t.data(), {8, 8, 3}, torch::kUInt8).clone());
  }
  const auto x = torch::stack(items).permute({0, 3, 1, 2}).to(torch::kFloat).div(255.f).contiguous();
  const auto y = eager.forward({x}).toTuple()->elements();
  const auto means = y[0].toTensor().contiguous();
  const auto energy = y[1].toTensor().contiguous();
  REQUIRE(out.outputs[0].data.size() == 9 * sizeof(float));
  REQUIRE(out.outputs[1].data.size() == 3 * sizeof(float));
  std::vector<float> got_means(9), got_energy(3);
  std::memcpy(got_means.data(), out.outputs[0].data.data(), 9 * sizeof(float));
  std::memcpy(got_energy.data(), out.outputs[1].data.data(), 3 * sizeof(float));
  for (int i = 0; i < 9; ++i) CHECK(got_means[static_cast<std::size_t>(i)] == doctest::Approx(means.data_ptr<float>()[i]).epsilon(1e-6));
  for (int i = 0; i < 3; ++i) CHECK(got_energy[static_cast<std::size_t>(i)] == doctest::Approx(energy.data_ptr<float>()[i]).epsilon(1e-6));

  auto cfg = nlohmann::json::parse(call(s, "GET", "/v2/models/enc/config").body);
  CHECK(cfg["max_batch_size"] == 4);
  CHECK(cfg["instance_group"][0]["count"] == 2);
  CHECK(cfg["parameters"]["batch_transform"]["string_value"] == "nchw_unit");
}

TEST_CASE("repository torch: bad repository content fails that model only, with its errc, while the others serve") {
  temp_dir d("bad");
  const auto& r = d.path;
  const auto model = [&](const std::string& name, const std::string& config) {
    write(r / name / "config.pbtxt", config);
    fs::create_directories(r / name / "1");
    return r / name / "1" / "model.pt";
  };
  image_module(1.0f).save(model("good", kImageConfig).string());
  proj_module().save(model("proj", proj_config()).string());
  write(model("notamodel", proj_config()), "this is not a TorchScript archive\n");
  model("nofile", proj_config());
  throwing_module().save(model("throws", proj_config("4", "4")).string());
  proj_module().save(model("wrongindims", proj_config("5")).string());
  proj_module().save(model("wrongoutdims", proj_config("4", "5")).string());
  proj_module().save(model("nobatch", "backend: \"pytorch\"\ninput [ { name: \"INPUT__0\" data_type: TYPE_FP32 dims: [ 4 ] } ]\n"
                                      "output [ { name: \"OUTPUT__0\" data_type: TYPE_FP32 dims: [ 3 ] } ]\n").string());
  proj_module().save(model("stringout", "backend: \"pytorch\"\nmax_batch_size: 2\n"
                                        "input [ { name: \"INPUT__0\" data_type: TYPE_FP32 dims: [ 4 ] } ]\n"
                                        "output [ { name: \"OUTPUT__0\" data_type: TYPE_STRING dims: [ 1 ] } ]\n").string());
  proj_module().save(model("badparam", proj_config("4", "3", "parameters { key: \"resize\" value { string_value: \"shorter_side\" } }\n")).string());
  proj_module().save(model("gpu", proj_config("4", "3", "instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]\n")).string());
  // a text model without a tokenizer would fail every request: it does not load
  proj_module().save(model("notokenizer", "backend: \"pytorch\"\nmax_batch_size: 2\n"
                                          "input [ { name: \"INPUT__0\" data_type: TYPE_INT64 dims: [ 2, 8 ] } ]\n"
                                          "output [ { name: \"OUTPUT__0\" data_type: TYPE_FP32 dims: [ 3 ] } ]\n"
                                          "parameters { key: \"modality\" value { string_value: \"text\" } }\n").string());
  // preprocessing settings without `modality` (preprocessing is opt-in)
  proj_module().save(model("nomodality", proj_config("4", "3", "parameters { key: \"image_normalize\" value { string_value: \"signed\" } }\n")).string());

  auto repo = model_repository::open(r, torch_options());
  REQUIRE(repo);
  auto s = service::create(server_config{}).value();
  s.attach(*repo);
  CHECK(repo->load_all(s) == 11);
  CHECK(s.loaded() == std::vector<std::pair<std::string, std::string>>{{"good", "1"}, {"proj", "1"}});

  const auto idx = s.repository_index();
  const auto failed = [&](const std::string& name, errc code, const std::string& text) {
    const auto* e = entry(idx, name);
    REQUIRE_MESSAGE(e, name);
    CHECK(e->state == server::model_state::unavailable);
    CHECK_MESSAGE(e->reason.find(text) != std::string::npos, name, ": ", e->reason);
    auto again = repo->load(s, name);
    REQUIRE_FALSE(again);
    CHECK_MESSAGE(again.error().code == code, name, ": ", again.error().message);
  };
  failed("notamodel", errc::decode_failed, "cannot load");
  failed("nofile", errc::not_found, "model.pt");
  failed("throws", errc::internal, "is invalid for input of size");  // LibTorch's message
  failed("wrongindims", errc::internal, "warm-up");                    // [N, 5] @ [4, 3]: LibTorch's message
  failed("wrongoutdims", errc::internal, "item shape [3], declared [5]");  // both shapes
  failed("nobatch", errc::invalid_argument, "max_batch_size");
  failed("stringout", errc::invalid_argument, "TYPE_STRING");
  failed("badparam", errc::invalid_argument, "parameters 'resize'");
  failed("notokenizer", errc::invalid_argument, "a text model needs parameters 'tokenizer'");
  failed("nomodality", errc::invalid_argument, "parameters 'image_normalize' needs parameters 'modality'");
  CHECK(entry(idx, "gpu"));  // Debian's LibTorch has no CUDA: refused at load, whatever the reason
  CHECK(entry(idx, "gpu")->state == server::model_state::unavailable);
  for (const auto& e : idx) {
    const bool ok = e.state == server::model_state::ready || e.reason.find("config.pbtxt") != std::string::npos;  // every reason names the file
    CHECK_MESSAGE(ok, e.name, ": ", e.reason);
  }

  // The good ones serve meanwhile.
  auto res = infer(s, "good", bytes_request("image", {jpeg_bytes(8, 8, 9)}));
  CHECK_MESSAGE(res.status == 200, res.body);
  // "proj" sets no modality: a Triton tensor model, served through its declared input (x @ w, w = arange(12) / 12)
  const std::vector<float> x{1, 0, 0, 0, 0, 0, 0, 1};
  auto tensor_res = infer(s, "proj", tensors_request({ks::infer_tensor::from_values<float>("INPUT__0", {2, 4}, x)}));
  REQUIRE_MESSAGE(tensor_res.status == 200, tensor_res.body);
  const auto proj_out = decode(tensor_res).outputs.at(0);
  std::vector<float> y(6);
  REQUIRE(proj_out.data.size() == y.size() * sizeof(float));
  std::memcpy(y.data(), proj_out.data.data(), proj_out.data.size());
  CHECK(y == std::vector<float>{0.f / 12, 1.f / 12, 2.f / 12, 9.f / 12, 10.f / 12, 11.f / 12});
  const auto proj_meta = nlohmann::json::parse(call(s, "GET", "/v2/models/proj").body);
  CHECK(proj_meta["inputs"][0]["name"] == "INPUT__0");
  CHECK(proj_meta["parameters"]["preprocessing"] == "none");
  CHECK(infer(s, "proj", bytes_request("image", {jpeg_bytes(8, 8, 9)})).status == 400);
  const auto http_idx = nlohmann::json::parse(call(s, "POST", "/v2/repository/index").body);
  CHECK(http_idx.size() == 13);
}

TEST_CASE("repository torch: the cache key changes when one weight changes, not when the version directory is renamed") {
  temp_dir d("fingerprint");
  write(d.path / "enc" / "config.pbtxt", kImageConfig);
  fs::create_directories(d.path / "enc" / "1");
  image_module(0.5f).save((d.path / "enc" / "1" / "model.pt").string());
  auto repo = model_repository::open(d.path, torch_options());
  REQUIRE(repo);
  auto s = service::create(server_config{}).value();
  s.attach(*repo);
  REQUIRE(call(s, "POST", "/v2/repository/models/enc/load").status == 200);
  const auto fingerprint = [&] {
    auto meta = nlohmann::json::parse(call(s, "GET", "/v2/models/enc").body);
    return meta["parameters"]["fingerprint"].get<std::string>();
  };
  const std::string fp1 = fingerprint();
  CHECK(fp1 == *repo->fingerprint("enc", "1"));

  image_module(0.5f).save((d.path / "enc" / "1" / "model.pt").string());  // the same module saved again
  REQUIRE(call(s, "POST", "/v2/repository/models/enc/load").status == 200);
  const std::string fp_same = fingerprint();

  image_module(0.25f).save((d.path / "enc" / "1" / "model.pt").string());  // one weight differs
  REQUIRE(call(s, "POST", "/v2/repository/models/enc/load").status == 200);
  const std::string fp2 = fingerprint();
  CHECK(fp2 != fp_same);

  fs::rename(d.path / "enc" / "1", d.path / "enc" / "12");
  REQUIRE(call(s, "POST", "/v2/repository/models/enc/load").status == 200);
  CHECK(s.loaded() == std::vector<std::pair<std::string, std::string>>{{"enc", "12"}});
  CHECK(nlohmann::json::parse(call(s, "GET", "/v2/models/enc").body)["parameters"]["fingerprint"] == fp2);
  (void)fp1;
}
