// The README's usage snippets, compiled and run on real data, so the README stays true.
#include <doctest/doctest.h>

#include <filesystem>

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

  // cache (Redis tier pointed at a port with no server: it degrades to misses, never errors)
  const auto dir = std::filesystem::temp_directory_path() / ("jitembed_readme_" + std::to_string(::getpid()));
  {
    const std::string model_fingerprint = "v1";
    cache::cache_key key = cache::make_key({.model = "image-latent", .version = model_fingerprint,
                                            .preprocess = cache::preprocess_params{}.set("bucket", 256).str(),
                                            .content = jpeg_bytes});
    auto lmdb = cache::lmdb_cache::open({.path = dir.string()}).value();
    cache::tiered_cache tiers({cache::any_store::make<cache::memory_cache>(std::size_t{1} << 30), cache::any_store(lmdb),
                               cache::any_store::make<cache::redis_cache>(cache::redis_options{.port = 1})});
    tiers.put(key, cache::encode_value({{"latent", latent}}).value());
    auto hit = tiers.get(key);
    REQUIRE(hit);
    tensor back = cache::decode_value(*hit).value().tensor("latent").value();
    CHECK(back.shape() == latent.shape());
  }
  std::filesystem::remove_all(dir);

  // models
  auto m = models::make_reference_model("image-latent").value();
  tensor x = m.preprocess(jpeg_bytes, decode_limits{}).value();
  auto outputs = m.run(std::span(&x, 1)).value();
  CHECK(outputs.size() == 1);
}
