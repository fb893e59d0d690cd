// The README's usage snippets, compiled and run on real data, so the README stays true.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "jitembed/jitembed.hpp"

using namespace jitembed;

namespace {
tensor gradient_image(int h, int w) {
  tensor img = tensor::empty({h, w, 3}, dtype::u8);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) img.data<std::uint8_t>()[(y * w + x) * 3 + c] = static_cast<std::uint8_t>((x * (c + 1) + y) % 256);
  return img;
}
}  // namespace

TEST_CASE("README: codecs, format, cache, models") {
  // codecs
  tensor embedding = tensor::zeros({64, 128}, dtype::bf16);
  codec::zstd_codec z{{.level = 3, .shuffle = 2}};
  byte_buffer packed = codec::encode_to_buffer(z, embedding).value();
  tensor bytes = z.decode(packed, decode_limits{}).value();
  CHECK(bytes.nbytes() == embedding.nbytes());

  const byte_buffer jpeg_bytes = codec::encode_jpeg(gradient_image(96, 128), {}).value();
  codec::jpeg_info info = codec::probe_jpeg(jpeg_bytes).value();
  CHECK(info.width == 128);
  tensor img = codec::decode_jpeg(jpeg_bytes, {.format = codec::pixel_format::rgb, .target_width = 64, .target_height = 64},
                                  decode_limits{}).value();
  CHECK(img.shape() == shape{64, 64, 3});

  tensor frames = tensor::zeros({8, 64, 64, 3}, dtype::u8);
  byte_buffer mp4_bytes = codec::encode_video(frames, {.fps = 24}).value();
  codec::video_info vi = codec::probe_video(mp4_bytes, decode_limits{}).value();
  CHECK(vi.frame_count == 8);
  tensor clip = codec::decode_video(mp4_bytes, {.num_frames = 4, .width = 32, .height = 32}, decode_limits{}).value();
  CHECK(clip.shape() == shape{4, 32, 32, 3});

  byte_buffer caption = codec::encode_text("a cat on a mat").value();
  tensor token_ids = tensor::zeros({77}, dtype::i32);
  byte_buffer ids = codec::encode_tokens(token_ids).value();
  CHECK(codec::decode_text(caption, decode_limits{}).value() == "a cat on a mat");

  // format
  tensor latent_bf16 = tensor::zeros({4, 8, 8}, dtype::bf16);
  format::record_builder b;
  b.add_image("image", jpeg_bytes).value();
  b.add_video("clip", mp4_bytes).value();
  b.add_text("caption", "a cat on a mat").value();
  b.add_tensor("tokens", token_ids, format::tensor_encoding::zstd(3, /*shuffle=*/4)).value();
  b.add_tensor("latent", latent_bf16).value();
  byte_buffer rec = b.finish().value();
  auto view = format::record_view::parse(rec).value();
  bytes_view jpeg = view.find("image")->payload();
  CHECK(jpeg.data() >= rec.data());
  CHECK(jpeg.data() < rec.data() + rec.size());
  tensor latent = view.find("latent")->decode({}).value();
  CHECK(latent.data() >= static_cast<const void*>(rec.data()));
  tensor decoded = view.find("image")->decode_with(codec::jpeg_codec{}, {}).value();
  CHECK(decoded.shape() == shape{96, 128, 3});

  // cache (Redis pointed at a port with no server: open() says so, and the tiers go on without it)
  const auto dir = std::filesystem::temp_directory_path() / ("jitembed_readme_" + std::to_string(::getpid()));
  {
    const std::string model_fingerprint = "v1";
    cache::cache_key key = cache::make_key({.model = "image-latent", .version = model_fingerprint,
                                            .preprocess = cache::preprocess_params{}.set("bucket", 256).str(),
                                            .content = jpeg_bytes});
    auto lmdb = cache::lmdb_cache::open({.path = dir.string()}).value();
    std::vector<cache::any_store> stores{cache::any_store(std::in_place_type<cache::memory_cache>, std::size_t{1} << 30),
                                         cache::any_store(lmdb)};
    auto redis = cache::redis_cache::open({.port = 1});
    CHECK(redis.code() == errc::io_error);
    if (redis) stores.emplace_back(std::move(*redis));
    cache::tiered_cache tiers(std::move(stores));
    tiers.put(key, cache::encode_value({{"latent", latent}}).value());
    auto hit = tiers.get(key);
    REQUIRE(hit);
    tensor back = cache::decode_value(*hit).value().tensor("latent").value();
    CHECK(back.shape() == latent.shape());
  }
  std::filesystem::remove_all(dir);

  // models
  auto m = models::reference_model::create("image-latent").value();
  tensor x = m.preprocess(jpeg_bytes, decode_limits{}).value();
  auto outputs = m.run(std::span(&x, 1)).value();
  CHECK(outputs.size() == 1);
}

#if defined(JITEMBED_HAS_GLOO)
TEST_CASE("README: parallel") {
  using namespace jitembed::parallel;
  auto fill = [](const shape& s, float scale) {
    tensor t = tensor::empty(s, dtype::f32);
    for (std::uint64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * static_cast<float>(static_cast<int>(i % 13) - 6);
    return t;
  };
  const tensor w = fill({256, 64}, 0.01f), b = fill({256}, 0.1f), x = fill({16, 64}, 0.5f), dy_full = fill({16, 256}, 0.2f);
  // The single-rank reference.
  tensor y_ref = tensor::empty({16, 256}, dtype::f32), dx_ref = tensor::empty({16, 64}, dtype::f32);
  tensor gw_ref = tensor::zeros({256, 64}, dtype::f32);
  math::linear_forward(x, w, &b.view(), y_ref);
  const tensor_view dx_ref_v = dx_ref.view(), gw_ref_v = gw_ref.view();
  math::linear_backward(x, w, dy_full, &dx_ref_v, &gw_ref_v, nullptr);

  struct rank_result {
    tensor y, dx, y_full;
    std::uint64_t ar = 0, ag = 0;
    std::string error;
  };
  std::vector<rank_result> res(2);

  shared_store store(hash_store{});  // ranks as threads (copies share it); file_store::open(dir) for processes
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        const tensor dy = local_chunk(dy_full, 1, 2, r);  // this rank's columns of the output gradient
        // on each rank r of 2 (a thread each):
        auto comm = gloo_communicator::create(store, r, 2).value();   // TCP on 127.0.0.1
        auto fc = column_parallel_linear<gloo_communicator>::create(comm, /*in=*/64, /*out=*/256).value();
        fc.load_full(w, b);                      // keeps rows [128r, 128r + 128) of w [256, 64] and b [256]
        tensor y = fc.forward(x).value();        // x [16, 64] replicated → y [16, 128], no communication
        tensor dx = fc.backward(dy).value();     // dy [16, 128] → dx [16, 64]: one all_reduce
        dtensor yd{y, shape{16, 256}, placement::shard(1)};   // y holds this rank's columns of the output
        tensor y_full = full_tensor(comm, yd);                // [16, 256] on both ranks: one all_gather
        std::uint64_t ar = comm.stats()[coll::all_reduce].bytes;   // 16·64·4 = 4096 (nccl-tests size)

        auto& o = res[static_cast<std::size_t>(r)];
        o.y = y;
        o.dx = dx;
        o.y_full = y_full;
        o.ar = ar;
        o.ag = comm.stats()[coll::all_gather].bytes;
      } catch (const std::exception& e) {
        res[static_cast<std::size_t>(r)].error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();

  auto max_diff = [](const tensor_view& a, const tensor_view& e) {
    REQUIRE(a.shape() == e.shape());
    double d = 0;
    for (std::uint64_t i = 0; i < a.numel(); ++i) {
      d = std::max(d, static_cast<double>(std::abs(a.data<const float>()[i] - e.data<const float>()[i])));
    }
    return d;
  };
  for (int r = 0; r < 2; ++r) {
    const auto& o = res[static_cast<std::size_t>(r)];
    REQUIRE(o.error.empty());
    CHECK(max_diff(o.y, local_chunk(y_ref, 1, 2, r)) < 1e-5);
    CHECK(max_diff(o.dx, dx_ref) < 1e-5);
    CHECK(max_diff(o.y_full, y_ref) < 1e-5);
    CHECK(o.ar == 16 * 64 * 4);
    CHECK(o.ag == 16 * 256 * 4);
  }
}
#endif

#if defined(JITEMBED_HAS_CLIENT)
#include "jitembed/client.hpp"
#include "jitembed/net/http/server.hpp"

TEST_CASE("README: client") {
  server::server_config sc;
  server::model_config mc;
  mc.name = "text-embed";
  sc.models = {mc};
  auto svc = server::service::create(sc).value();
  auto http_made = net::http::server::create(net::http::server_options{}, svc.as_handler());
  REQUIRE(http_made);
  auto& http = *http_made;
  const std::uint16_t port = http.port();

  client::client_options o;
  o.endpoints.list = {"http://127.0.0.1:" + std::to_string(port)};
  auto c = client::jit_client::create(o).value();
  client::embed_request req{.model = "text-embed", .input = "text"};
  req.rows = {as_bytes_view(std::string_view("a cat on a mat"))};
  result<client::embed_result> r = c.embed(req).get();
  REQUIRE(r);
  tensor pooled = *r->find("pooled");
  CHECK(pooled.shape() == shape{1, 768});
  http.stop(std::chrono::seconds(1));
}
#endif
