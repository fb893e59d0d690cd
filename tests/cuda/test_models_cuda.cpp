// CUDA reference models (models/cuda/*.cuh) against the CPU models. The host replays of the device code
// and the argument checks run everywhere; device runs skip with "no CUDA device".
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "jitembed/core/hash.hpp"
#include "jitembed/cuda/check.hpp"
#include "jitembed/models/detail/kernels.hpp"
#include "jitembed/models/image_latent.hpp"
#include "jitembed/models/text_embed.hpp"
#include "jitembed/models/video_latent.hpp"
#include "models_kernels.hpp"

using namespace jitembed;
namespace mt = jitembed::models::cuda_test;

namespace {

bool have_device() {
  if (cuda::device_count() > 0) return true;
  std::printf("no CUDA device: skipping\n");
  return false;
}

tensor random_u8(const shape& s, std::uint64_t seed) {
  tensor t = tensor::empty(s, dtype::u8);
  auto* p = t.data<std::uint8_t>();
  for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<std::uint8_t>(models::detail::splitmix64(seed + i) >> 56);
  return t;
}

tensor tokens_of(std::string_view text, std::size_t max_length) {
  const std::size_t n = std::min(text.size(), max_length);
  tensor t = tensor::empty({static_cast<std::int64_t>(n)}, dtype::i32);
  for (std::size_t i = 0; i < n; ++i) t.data<std::int32_t>()[i] = static_cast<unsigned char>(text[i]);
  return t;
}

float value_at(const tensor& t, std::size_t i) {
  switch (t.dtype()) {
    case dtype::f32: return t.data<float>()[i];
    case dtype::f16: return static_cast<float>(t.data<float16>()[i]);
    case dtype::bf16: return static_cast<float>(t.data<bfloat16>()[i]);
    default: return NAN;
  }
}

// Compares two outputs of one dtype: the largest |a - b| relative to max(1, |b|) and how many elements
// differ in their bits. The f32 paths are bit-identical by construction; the tolerances only guard
// against a compiler that contracts the CPU reference.
struct diff {
  double max_rel = 0;
  std::size_t bit_mismatches = 0;
};
diff compare(const tensor& got, const tensor& want) {
  diff d;
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  const std::size_t es = element_size(got.dtype());
  for (std::size_t i = 0; i < static_cast<std::size_t>(got.numel()); ++i) {
    const float a = value_at(got, i), b = value_at(want, i);
    d.max_rel = std::max(d.max_rel, std::fabs(static_cast<double>(a) - b) / std::max(1.0, std::fabs(static_cast<double>(b))));
    if (std::memcmp(static_cast<const std::byte*>(got.data()) + i * es, static_cast<const std::byte*>(want.data()) + i * es, es) != 0)
      ++d.bit_mismatches;
  }
  return d;
}
double tolerance(dtype t) { return t == dtype::f32 ? 1e-5 : t == dtype::f16 ? 1e-3 : 8e-3; }  // ~1 ulp of f16 / bf16

void check_outputs(const std::vector<models::named_tensors>& got, const std::vector<models::named_tensors>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    REQUIRE(got[i].size() == want[i].size());
    for (std::size_t k = 0; k < got[i].size(); ++k) {
      CHECK(got[i][k].first == want[i][k].first);
      CHECK(got[i][k].second.device().is_cpu());
      const diff d = compare(got[i][k].second, want[i][k].second);
      const std::string what = "item " + std::to_string(i) + " " + got[i][k].first + " " + std::string(to_string(got[i][k].second.dtype()));
      CHECK_MESSAGE(d.max_rel <= tolerance(got[i][k].second.dtype()), what, " max_rel ", d.max_rel);
      WARN_MESSAGE(d.bit_mismatches == 0, what, ": ", d.bit_mismatches, " elements not bit-identical to the CPU model");
    }
  }
}

// Small settings of the three reference models: image bucket 64, 8-frame clips at 32, 64-dim text.
std::tuple<models::image_latent_options, models::video_latent_options, models::text_embed_options> small_options() {
  models::image_latent_options io;
  io.bucket = 64;
  models::video_latent_options vo;
  vo.frames = 8;
  vo.bucket = 32;
  models::text_embed_options to;
  to.dim = 64;
  return {io, vo, to};
}

}  // namespace

TEST_CASE("models: device XXH3-64 for 1..8 bytes equals libxxhash") {
  std::uint8_t buf[8];
  int checked = 0;
  for (std::uint64_t seed : {0ull, 1ull, 0x6a6974656d626565ull, 0xffffffffffffffffull, 0x123456789abcdef0ull})
    for (std::uint32_t len = 1; len <= 8; ++len)
      for (int rep = 0; rep < 200; ++rep) {
        for (std::uint32_t i = 0; i < len; ++i) buf[i] = static_cast<std::uint8_t>(models::detail::splitmix64(seed ^ (rep * 8 + i + len * 4096)) >> 13);
        const std::uint64_t want = xxh3_64(bytes_view(reinterpret_cast<const std::byte*>(buf), len), seed);
        if (mt::xxh3_64_short(buf, len, seed) != want) {
          FAIL("len ", len, " seed ", seed, " rep ", rep);
        }
        ++checked;
      }
  CHECK(checked == 5 * 8 * 200);
}

TEST_CASE("models: host replay of the image latent kernel partition is bit-identical to the CPU model") {
  for (auto [h, w, seed] : {std::tuple{64, 64, 1ull}, std::tuple{40, 72, 2ull}, std::tuple{8, 8, 3ull}}) {
    const tensor rgb = random_u8({h, w, 3}, seed);
    std::vector<float> want(static_cast<std::size_t>(4 * (h / 8) * (w / 8))), got(want.size(), -1.f);
    models::detail::image_latent_into(rgb.data<std::uint8_t>(), h, w, want.data());
    mt::image_latent_replay(rgb, got.data());
    CHECK_MESSAGE(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0, h, "x", w);
  }
  // A constant colour: channels 0-2 are its (y, cb, cr), channel 3 is 0.
  tensor flat = tensor::empty({16, 16, 3}, dtype::u8);
  for (int i = 0; i < 16 * 16; ++i) {
    flat.data<std::uint8_t>()[i * 3] = 200;
    flat.data<std::uint8_t>()[i * 3 + 1] = 30;
    flat.data<std::uint8_t>()[i * 3 + 2] = 90;
  }
  std::vector<float> got(4 * 2 * 2);
  mt::image_latent_replay(flat, got.data());
  const auto c = models::detail::to_ycbcr(200, 30, 90);
  CHECK(got[0] == doctest::Approx(c.y).epsilon(1e-5));
  CHECK(got[4] == doctest::Approx(c.cb).epsilon(1e-5));
  CHECK(got[8] == doctest::Approx(c.cr).epsilon(1e-5));
  CHECK(std::fabs(got[12]) < 1e-5);
}

TEST_CASE("models: host replay of the text kernels is bit-identical to the CPU model") {
  models::text_embed_options o;
  o.dim = 72;
  o.hash_buckets = 300;
  SUBCASE("ngrams 1..3") {}
  SUBCASE("ngrams 1..8, short max_length") {
    o.ngram_max = 8;
    o.max_length = 20;
  }
  const models::text_embed m = models::text_embed::create(o).value();
  for (std::string_view text : {"", "a", "hello, world", "caf\xc3\xa9 au lait, s'il vous pla\xc3\xaet, with a long tail of text"}) {
    const tensor tok = tokens_of(text, static_cast<std::size_t>(o.max_length));
    auto want = m.run(std::span<const tensor>(&tok, 1));
    REQUIRE(want.has_value());
    std::vector<float> seq, pooled;
    mt::text_embed_replay(m, tok, seq, pooled);
    const tensor* ws = find_tensor((*want)[0], "sequence");
    const tensor* wp = find_tensor((*want)[0], "pooled");
    REQUIRE(ws);
    REQUIRE(wp);
    CHECK_MESSAGE(std::memcmp(seq.data(), ws->data(), ws->nbytes()) == 0, text);
    CHECK_MESSAGE(std::memcmp(pooled.data(), wp->data(), wp->nbytes()) == 0, text);
  }
}

TEST_CASE("models: the launchers reject bad arguments before touching the device") {
  alignas(64) static std::byte fake[1 << 16];  // never dereferenced: every call below fails its checks
  const device gpu = device::cuda(0);
  auto view = [&](dtype t, const shape& s, device d) { return tensor_view(fake, t, s, d); };
  tensor cpu_in = tensor::zeros({1, 16, 16, 3}, dtype::u8), cpu_out = tensor::zeros({1, 4, 2, 2}, dtype::f32);
  auto e = mt::call_image_latent_cuda(cpu_in, cpu_out);
  CHECK(e.code == errc::invalid_argument);
  CHECK(e.message == "image latent input must be on a CUDA device");
  e = mt::call_image_latent_cuda(view(dtype::f32, {1, 16, 16, 3}, gpu), view(dtype::f32, {1, 4, 2, 2}, gpu));
  CHECK(e.code == errc::dtype_mismatch);
  e = mt::call_image_latent_cuda(view(dtype::u8, {1, 12, 16, 3}, gpu), view(dtype::f32, {1, 4, 1, 2}, gpu));
  CHECK(e.code == errc::invalid_argument);
  CHECK(e.message == "image latent input [1,12,16,3] is not [N, H, W, 3] with H, W multiples of 8");
  e = mt::call_image_latent_cuda(view(dtype::u8, {1, 16, 16, 3}, gpu), view(dtype::f32, {1, 4, 2, 3}, gpu));
  CHECK(e.code == errc::invalid_argument);
  e = mt::call_image_latent_cuda(view(dtype::u8, {1, 16, 16, 3}, gpu), view(dtype::i32, {1, 4, 2, 2}, gpu));
  CHECK(e.code == errc::dtype_mismatch);
  e = mt::call_video_latent_cuda(view(dtype::u8, {1, 6, 16, 16, 3}, gpu), view(dtype::f32, {1, 4, 1, 2, 2}, gpu),
                                 view(dtype::f32, {1, 6, 4, 2, 2}, gpu));
  CHECK(e.code == errc::invalid_argument);  // T = 6 is not a multiple of 4
  e = mt::call_video_latent_cuda(view(dtype::u8, {1, 8, 16, 16, 3}, gpu), view(dtype::f32, {1, 4, 2, 2, 2}, gpu),
                                 view(dtype::bf16, {1, 8, 4, 2, 2}, gpu));
  CHECK(e.code == errc::invalid_argument);  // scratch must be f32
}

TEST_CASE("models: create() is errc::not_found without a device, else matches the CPU model's metadata") {
  auto [io, vo, to] = small_options();
  auto ii = mt::image_info(io);
  auto vi = mt::video_info(vo);
  auto ti = mt::text_info(to);
  if (cuda::device_count() == 0) {
    CHECK(ii.code() == errc::not_found);
    CHECK(vi.code() == errc::not_found);
    CHECK(ti.code() == errc::not_found);
    CHECK(ii.error().message == "image-latent: no CUDA device 0 (0 devices)");
    return;
  }
  REQUIRE(ii.has_value());
  REQUIRE(vi.has_value());
  REQUIRE(ti.has_value());
  const models::image_latent ic = models::image_latent::create(io).value();
  const models::video_latent vc = models::video_latent::create(vo).value();
  const models::text_embed tc = models::text_embed::create(to).value();
  CHECK(ii->name == ic.name());
  CHECK(ii->version == ic.version());
  CHECK(ii->preprocess_key == ic.preprocess_key());
  CHECK(ii->dev == device::cuda(0));
  CHECK(vi->version == vc.version());
  CHECK(vi->preprocess_key == vc.preprocess_key());
  CHECK(ti->version == tc.version());
  CHECK(ti->preprocess_key == tc.preprocess_key());
  // Bad options fail like the CPU model's.
  io.bucket = 60;
  CHECK(mt::image_info(io).code() == errc::invalid_argument);
}

TEST_CASE("models: cuda_image_latent matches image_latent in f32, bf16, f16") {
  if (!have_device()) return;
  for (dtype t : {dtype::f32, dtype::bf16, dtype::f16}) {
    models::image_latent_options o;
    o.bucket = 64;
    o.output_dtype = t;
    std::vector<tensor> batch;
    for (std::uint64_t i = 0; i < 3; ++i) batch.push_back(random_u8({64, 64, 3}, 100 + i));
    auto got = mt::run_image(o, batch);
    auto want = models::image_latent::create(o).value().run(batch);
    REQUIRE(got.has_value());
    REQUIRE(want.has_value());
    check_outputs(*got, *want);
    // Batch composition does not change an item's result.
    auto alone = mt::run_image(o, std::span<const tensor>(&batch[1], 1));
    REQUIRE(alone.has_value());
    CHECK(std::memcmp((*alone)[0][0].second.data(), (*got)[1][0].second.data(), (*alone)[0][0].second.nbytes()) == 0);
  }
  // Errors come from the same checks as the CPU model.
  models::image_latent_options o;
  o.bucket = 64;
  o.max_batch_size = 2;
  std::vector<tensor> three(3, random_u8({64, 64, 3}, 7));
  CHECK(mt::run_image(o, three).code() == errc::limit_exceeded);
  std::vector<tensor> wrong{tensor::zeros({64, 64, 3}, dtype::f32)};
  CHECK(mt::run_image(o, wrong).code() == errc::dtype_mismatch);
  CHECK(mt::run_image(o, {}).value().empty());
}

TEST_CASE("models: image_latent_cuda on a non-square batch matches the CPU definition") {
  if (!have_device()) return;
  const int n = 5, h = 40, w = 72;
  const tensor rgb = random_u8({n, h, w, 3}, 42);
  const tensor got = mt::image_latent_on_device(rgb, dtype::f32);
  const std::size_t per = static_cast<std::size_t>(4 * (h / 8) * (w / 8));
  std::vector<float> want(per * n);
  for (int i = 0; i < n; ++i)
    models::detail::image_latent_into(rgb.data<std::uint8_t>() + static_cast<std::size_t>(i) * h * w * 3, h, w, want.data() + i * per);
  double max_err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) max_err = std::max(max_err, std::fabs(static_cast<double>(got.data<float>()[i]) - want[i]));
  CHECK(max_err < 1e-5);
  WARN(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
}

TEST_CASE("models: cuda_video_latent matches video_latent") {
  if (!have_device()) return;
  for (dtype t : {dtype::f32, dtype::bf16}) {
    models::video_latent_options o;
    o.frames = 8;
    o.bucket = 32;
    o.output_dtype = t;
    std::vector<tensor> batch{random_u8({8, 32, 32, 3}, 5), random_u8({8, 32, 32, 3}, 6)};
    auto got = mt::run_video(o, batch);
    auto want = models::video_latent::create(o).value().run(batch);
    REQUIRE(got.has_value());
    REQUIRE(want.has_value());
    check_outputs(*got, *want);
  }
}

TEST_CASE("models: cuda_text_embed matches text_embed (sequence, mask, pooled)") {
  if (!have_device()) return;
  for (dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
    models::text_embed_options o;
    o.dim = 96;
    o.max_length = 32;
    o.output_dtype = t;
    std::vector<tensor> batch;
    for (std::string_view text : {"", "a cat", "a photograph of an astronaut riding a horse on the moon", "\xe2\x82\xac 12"})
      batch.push_back(tokens_of(text, 32));
    auto got = mt::run_text(o, batch);
    auto want = models::text_embed::create(o).value().run(batch);
    REQUIRE(got.has_value());
    REQUIRE(want.has_value());
    check_outputs(*got, *want);
  }
  models::text_embed_options o;
  o.dim = 16;
  tensor bad = tensor::empty({2}, dtype::i32);
  bad.data<std::int32_t>()[0] = 65;
  bad.data<std::int32_t>()[1] = 300;
  auto r = mt::run_text(o, std::span<const tensor>(&bad, 1));
  CHECK(r.code() == errc::invalid_argument);
  CHECK(r.error().message == "text-embed: batch[0] token 1 = 300 is not a byte");
}

TEST_CASE("models: the three CUDA models share one GPU, called concurrently from three threads") {
  if (!have_device()) return;
  // As jitembed-server runs them: one instance thread per model, all on device 0, each batch checked
  // against the CPU model (several rounds, so the models' kernels and copies interleave on the device).
  models::image_latent_options io;  // plain variables: the threads' lambdas capture them
  models::video_latent_options vo;
  models::text_embed_options to;
  std::tie(io, vo, to) = small_options();
  std::vector<tensor> images, videos, texts;
  for (std::uint64_t i = 0; i < 4; ++i) images.push_back(random_u8({64, 64, 3}, 300 + i));
  for (std::uint64_t i = 0; i < 2; ++i) videos.push_back(random_u8({8, 32, 32, 3}, 400 + i));
  for (std::string_view t : {"a red circle", "two blue squares on a white background", ""}) texts.push_back(tokens_of(t, 32));
  const auto want_image = models::image_latent::create(io).value().run(images).value();
  const auto want_video = models::video_latent::create(vo).value().run(videos).value();
  const auto want_text = models::text_embed::create(to).value().run(texts).value();
  constexpr int kRounds = 8;
  std::vector<result<std::vector<models::named_tensors>>> got_image, got_video, got_text;
  {
    std::vector<std::jthread> threads;
    threads.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) got_image.push_back(mt::run_image(io, images));
    });
    threads.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) got_video.push_back(mt::run_video(vo, videos));
    });
    threads.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) got_text.push_back(mt::run_text(to, texts));
    });
  }
  for (int r = 0; r < kRounds; ++r) {
    REQUIRE(got_image[static_cast<std::size_t>(r)].has_value());
    REQUIRE(got_video[static_cast<std::size_t>(r)].has_value());
    REQUIRE(got_text[static_cast<std::size_t>(r)].has_value());
    check_outputs(*got_image[static_cast<std::size_t>(r)], want_image);
    check_outputs(*got_video[static_cast<std::size_t>(r)], want_video);
    check_outputs(*got_text[static_cast<std::size_t>(r)], want_text);
  }
}
