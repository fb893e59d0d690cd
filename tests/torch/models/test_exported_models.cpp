// The real encoders scripts/export_models.py exports (ctest models/export, a fixture of these tests): the
// TorchScript files and the AOTInductor packages, run through torch_model, against the eager PyTorch outputs
// saved next to each model; batch compositions; bad model files. One TU: LibTorch headers are heavy.
#include "jitembed/models/torch_adapter.hpp"

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

using namespace jitembed;
using namespace jitembed::models;
namespace fs = std::filesystem;

namespace {

// TorchScript runs the eager graph's ATen ops: f32 results within 1e-5 max abs (measured: 1.1e-7 VAE, 0 T5).
constexpr float kScriptTolerance = 1e-5f;
// AOTInductor compiles its own fused C++ kernels (different reduction order and vectorisation): measured
// max abs 3.3e-7 (VAE, latents up to 0.15) and 8.6e-7 (T5, states up to 3.3) on this machine; asserted at 1e-5.
constexpr float kAotiTolerance = 1e-5f;

// The error message of a failed result ("" for a value: doctest also renders messages of passing checks).
template <class T>
std::string why(const result<T>& r) {
  return r.has_value() ? std::string() : r.error().message;
}

fs::path repository() {
  const fs::path dir = JITEMBED_MODEL_REPOSITORY;
  REQUIRE_MESSAGE(fs::is_regular_file(dir / ".export-stamp"),
                  "no exported model repository at " << dir.string() << ": ctest models/export writes it (it needs the "
                  "PyTorch wheel and diffusers, transformers, sentencepiece: bash scripts/install-deps.sh torch)");
  return dir;
}

std::vector<char> read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot read " << p.string());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

struct array {
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;  // rows first
  std::vector<char> bytes;
  std::size_t row_bytes() const { return bytes.size() / static_cast<std::size_t>(shape.at(0)); }
  // row i as one item (the shape after the rows dim)
  tensor row(std::size_t i) const {
    jitembed::shape s(std::span<const std::int64_t>(shape.data() + 1, shape.size() - 1));
    return tensor::copy_of(bytes_view(reinterpret_cast<const std::byte*>(bytes.data()) + i * row_bytes(), row_bytes()), type, s);
  }
};

array read_array(const fs::path& dir, const nlohmann::json& j) {
  array a;
  const std::string t = j.at("dtype");
  REQUIRE((t == "float32" || t == "int64"));
  a.type = t == "float32" ? dtype::f32 : dtype::i64;
  a.shape = j.at("shape").get<std::vector<std::int64_t>>();
  a.bytes = read_file(dir / j.at("file").get<std::string>());
  std::int64_t n = 1;
  for (auto d : a.shape) n *= d;
  REQUIRE(a.bytes.size() == static_cast<std::size_t>(n) * element_size(a.type));
  return a;
}

struct reference {
  array input, output;
};

reference read_reference(const fs::path& model_dir) {
  const fs::path ref = model_dir / "reference";
  const auto text = read_file(ref / "reference.json");
  const auto j = nlohmann::json::parse(text.begin(), text.end());
  return {read_array(ref, j.at("input")), read_array(ref, j.at("output"))};
}

// Options as the repository's config.pbtxt states them (INPUT__0 / OUTPUT__0, max_batch_size 32); run() only.
torch_model_options options_for(const std::string& name, const reference& r) {
  torch_model_options o;
  o.name = name;
  o.version = "export_models@1";
  o.input_modality = r.input.type == dtype::i64 ? modality::text : modality::image;
  o.input = {"INPUT__0", r.input.type, std::vector<std::int64_t>(r.input.shape.begin() + 1, r.input.shape.end())};
  o.outputs = {{"OUTPUT__0", dtype::f32, std::vector<std::int64_t>(r.output.shape.begin() + 1, r.output.shape.end())}};
  o.max_batch_size = 32;
  o.preprocess = [](bytes_view, const decode_limits&) -> result<tensor> {
    return fail(errc::invalid_argument, "the test feeds preprocessed rows");
  };
  o.preprocess_key = "test=rows";
  return o;
}

float max_abs_diff(const tensor& out, const array& want, std::size_t row) {
  REQUIRE(out.dtype() == dtype::f32);
  const tensor got = out.clone();  // contiguous
  REQUIRE(got.nbytes() == want.row_bytes());
  const auto* g = got.data<float>();
  const auto* w = reinterpret_cast<const float*>(want.bytes.data() + row * want.row_bytes());
  float m = 0;
  for (std::size_t i = 0; i < got.nbytes() / sizeof(float); ++i) m = std::max(m, std::fabs(g[i] - w[i]));
  return m;
}

// Runs batches of `sizes` rows (row k of a batch is reference row k % rows) and checks every output row
// against the eager output within `tol`; returns the largest difference seen. The same reference row in
// batches of different sizes must also agree within `tol`.
float check_compositions(const torch_model& m, const reference& r, std::initializer_list<std::size_t> sizes, float tol) {
  const std::size_t rows = static_cast<std::size_t>(r.input.shape[0]);
  float worst = 0;
  std::vector<tensor> first_seen(rows);
  for (std::size_t n : sizes) {
    std::vector<tensor> batch;
    for (std::size_t k = 0; k < n; ++k) batch.push_back(r.input.row(k % rows));
    auto out = m.run(batch);
    REQUIRE_MESSAGE(out.has_value(), why(out));
    REQUIRE(out->size() == n);
    for (std::size_t k = 0; k < n; ++k) {
      REQUIRE((*out)[k].size() == 1);
      const tensor& y = (*out)[k][0].second;
      const float d = max_abs_diff(y, r.output, k % rows);
      INFO(m.name() << ": batch of " << n << ", row " << k);
      CHECK(d <= tol);
      worst = std::max(worst, d);
      tensor& seen = first_seen[k % rows];
      if (!seen.defined()) {
        seen = y.clone();
      } else {
        const tensor yc = y.clone();
        float dd = 0;
        for (std::size_t i = 0; i < yc.nbytes() / sizeof(float); ++i)
          dd = std::max(dd, std::fabs(yc.data<float>()[i] - seen.data<float>()[i]));
        CHECK(dd <= tol);
      }
    }
  }
  MESSAGE(m.name() << ": max abs difference from eager PyTorch " << worst);
  return worst;
}

torch_model open_model(const std::string& name, const std::string& file) {
  const fs::path dir = repository() / name;
  auto m = torch_model::open(dir / "1" / file, options_for(name, read_reference(dir)));
  REQUIRE_MESSAGE(m.has_value(), why(m));
  return *m;
}

struct temp_file {
  fs::path path;
  explicit temp_file(const std::string& name)
      : path(fs::temp_directory_path() / ("jitembed-models-" + std::to_string(::getpid()) + "-" + name)) {}
  ~temp_file() {
    std::error_code ec;
    fs::remove(path, ec);
  }
  void write(const char* p, std::size_t n) const { std::ofstream(path, std::ios::binary).write(p, static_cast<std::streamsize>(n)); }
};

}  // namespace

TEST_CASE("exported VAE encoder (TorchScript): equals eager PyTorch, batches of 1, 7 and 32 agree") {
  const auto m = open_model("vae_encoder", "model.pt");
  CHECK(m.parameter_hash().size() == 32);
  check_compositions(m, read_reference(repository() / "vae_encoder"), {1, 7, 32}, kScriptTolerance);
}

TEST_CASE("exported T5 encoder (TorchScript): equals eager PyTorch, batches of 1, 7 and 32 agree") {
  const auto m = open_model("t5_encoder", "model.pt");
  check_compositions(m, read_reference(repository() / "t5_encoder"), {1, 7, 32}, kScriptTolerance);
  CHECK(fs::is_regular_file(repository() / "t5_encoder" / "spiece.model"));
}

TEST_CASE("exported video encoder (TorchScript, the VAE per frame): equals eager PyTorch") {
  const auto m = open_model("video_encoder", "model.pt");
  check_compositions(m, read_reference(repository() / "video_encoder"), {1, 3}, kScriptTolerance);
}

TEST_CASE("exported VAE encoder (AOTInductor .pt2, dynamic batch): within the stated tolerance of eager PyTorch") {
  const auto m = open_model("vae_encoder_aoti", "model.pt2");
  CHECK(m.parameter_hash().size() == 32);
  CHECK(m.parameter_hash() != open_model("t5_encoder_aoti", "model.pt2").parameter_hash());
  check_compositions(m, read_reference(repository() / "vae_encoder_aoti"), {1, 7, 32}, kAotiTolerance);
}

TEST_CASE("exported T5 encoder (AOTInductor .pt2, dynamic batch): within the stated tolerance of eager PyTorch") {
  const auto m = open_model("t5_encoder_aoti", "model.pt2");
  check_compositions(m, read_reference(repository() / "t5_encoder_aoti"), {1, 7, 32}, kAotiTolerance);
}

TEST_CASE("AOTInductor packages: a batch over max_batch_size, and an input declaration that disagrees with the export") {
  const fs::path dir = repository() / "vae_encoder_aoti";
  const auto r = read_reference(dir);
  SUBCASE("over max_batch_size: refused before forward") {
    const auto m = open_model("vae_encoder_aoti", "model.pt2");
    auto out = m.run(std::vector<tensor>(33, r.input.row(0)));
    REQUIRE_FALSE(out.has_value());
    CHECK(out.code() == errc::limit_exceeded);
  }
  SUBCASE("an input declared [3, 128, 128] for a package exported at 256 x 256") {
    auto o = options_for("vae_encoder_aoti", r);
    o.input.shape = {3, 128, 128};
    o.outputs[0].shape = {4, 16, 16};
    auto m = torch_model::open(dir / "1" / "model.pt2", o);
    REQUIRE(m.has_value());
    auto out = m->run(std::vector<tensor>(2, tensor::zeros({3, 128, 128}, dtype::f32)));
    REQUIRE_FALSE(out.has_value());
    CHECK(out.code() == errc::internal);
    CHECK(out.error().message.find("expected: 256, but got: 128") != std::string::npos);
  }
}

TEST_CASE("bad model files: truncated .pt2, a file that is no model, the wrong format -> specific errors") {
  const fs::path dir = repository() / "t5_encoder_aoti";
  const auto opts = options_for("t5_encoder_aoti", read_reference(dir));
  const auto pt2 = read_file(dir / "1" / "model.pt2");

  SUBCASE("missing") {
    auto m = torch_model::open(dir / "1" / "absent.pt2", opts);
    REQUIRE_FALSE(m.has_value());
    CHECK(m.code() == errc::not_found);
    CHECK(m.error().message.find("no AOTInductor package") != std::string::npos);
  }
  SUBCASE("truncated at several points") {
    for (std::size_t keep : {std::size_t{0}, std::size_t{100}, pt2.size() / 2, pt2.size() - 30}) {
      temp_file f("truncated.pt2");
      f.write(pt2.data(), keep);
      auto m = torch_model::open(f.path, opts);
      INFO("kept " << keep << " of " << pt2.size() << " bytes");
      REQUIRE_FALSE(m.has_value());
      CHECK(m.code() == errc::decode_failed);
      CHECK(m.error().message.find(f.path.string()) != std::string::npos);
    }
  }
  SUBCASE("not a model") {
    temp_file f("config.pt2");
    const auto cfg = read_file(dir / "config.pbtxt");
    f.write(cfg.data(), cfg.size());
    auto m = torch_model::open(f.path, opts);
    REQUIRE_FALSE(m.has_value());
    CHECK(m.code() == errc::decode_failed);
  }
  SUBCASE("a TorchScript archive read as a package, and a package read as TorchScript") {
    auto o = opts;
    o.file_format = torch_file_format::aoti_package;
    auto a = torch_model::open(repository() / "t5_encoder" / "1" / "model.pt", o);
    REQUIRE_FALSE(a.has_value());
    CHECK(a.code() == errc::decode_failed);
    o.file_format = torch_file_format::torchscript;
    auto b = torch_model::open(dir / "1" / "model.pt2", o);
    REQUIRE_FALSE(b.has_value());
    CHECK(b.code() == errc::decode_failed);
  }
  SUBCASE("aoti_runners 0") {
    auto o = opts;
    o.aoti_runners = 0;
    auto m = torch_model::open(dir / "1" / "model.pt2", o);
    REQUIRE_FALSE(m.has_value());
    CHECK(m.code() == errc::invalid_argument);
  }
}
