// JPEG codec: round trips, equality with direct TurboJPEG calls, pixel formats, subsampling, DCT-scaled
// decode + exact resize, crop, decode_into, jpeg_codec and batch decode.
#include <doctest/doctest.h>

#include <array>
#include <climits>

#include "jpeg/jpeg_test_util.hpp"

using namespace jitembed;
using namespace jitembed::codec;
using namespace jpeg_test;

namespace {

std::vector<std::uint8_t> encode(const tensor& img, jpeg_encode_options o = {}) {
  auto r = encode_jpeg(img, o);
  REQUIRE(r);
  return to_vec(bytes_view(r->data(), r->size()));
}

}  // namespace

TEST_CASE("jpeg: round trip PSNR and equality with direct tjDecompress2") {
  const tensor img = make_image(256, 192);
  for (auto ss : {chroma_subsampling::s444, chroma_subsampling::s420}) {
    CAPTURE(int(ss));
    const auto j = encode(img, {95, ss});
    auto info = probe_jpeg(bv(j));
    REQUIRE(info);
    CHECK(info->width == 256);
    CHECK(info->height == 192);
    CHECK(info->subsampling == ss);
    CHECK(info->components == 3);
    CHECK(info->colorspace == jpeg_colorspace::ycbcr);

    auto dec = decode_jpeg(bv(j), {}, decode_limits{});
    REQUIRE(dec);
    CHECK(dec->shape() == shape{192, 256, 3});
    CHECK(dec->dtype() == dtype::u8);
    CHECK(psnr(dec->data<std::uint8_t>(), img.data<std::uint8_t>(), img.nbytes()) > 35.0);

    const auto ref = direct_decode(bv(j), TJPF_RGB);
    REQUIRE(ref.pixels.size() == dec->nbytes());
    CHECK(std::memcmp(ref.pixels.data(), dec->data(), dec->nbytes()) == 0);
  }
}

TEST_CASE("jpeg: encoder output equals direct tjCompress2") {
  const tensor img = make_image(97, 61, 3, true);
  const auto ours = encode(img, {80, chroma_subsampling::s422});
  const auto ref = direct_encode(img, TJPF_RGB, TJSAMP_422, 80);
  CHECK(ours == ref);
}

TEST_CASE("jpeg: rgb, bgr and gray pixel formats") {
  const tensor img = make_image(120, 80, 3, true);
  const auto j = encode(img, {90});
  jpeg_decode_options o;
  auto rgb = decode_jpeg(bv(j), o, {}).value();
  o.format = pixel_format::bgr;
  auto bgr = decode_jpeg(bv(j), o, {}).value();
  o.format = pixel_format::gray;
  auto gray = decode_jpeg(bv(j), o, {}).value();
  CHECK(gray.shape() == shape{80, 120, 1});
  const auto* a = rgb.data<std::uint8_t>();
  const auto* b = bgr.data<std::uint8_t>();
  bool swapped = true;
  for (std::size_t i = 0; i < 120 * 80; ++i)
    swapped &= a[3 * i] == b[3 * i + 2] && a[3 * i + 1] == b[3 * i + 1] && a[3 * i + 2] == b[3 * i];
  CHECK(swapped);
  const auto gref = direct_decode(bv(j), TJPF_GRAY);
  CHECK(std::memcmp(gref.pixels.data(), gray.data(), gray.nbytes()) == 0);

  SUBCASE("bgr input encodes like the same image in rgb") {
    tensor swapped_img = img.clone();
    auto* s = swapped_img.data<std::uint8_t>();
    for (std::size_t i = 0; i < 120 * 80; ++i) std::swap(s[3 * i], s[3 * i + 2]);
    jpeg_encode_options eo;
    eo.input_format = pixel_format::bgr;
    CHECK(encode(swapped_img, eo) == j);
  }
  SUBCASE("gray input [H,W] and [H,W,1] encode a gray JPEG") {
    const tensor g = make_image(64, 48, 1);
    const tensor g2(tensor::wrap(g.owner(), tensor_view(g.data(), dtype::u8, shape{48, 64})));
    const auto j1 = encode(g, {95, chroma_subsampling::s420});  // gray input ignores the chroma option
    const auto j2 = encode(g2, {95});
    CHECK(j1 == j2);
    auto info = probe_jpeg(bv(j1)).value();
    CHECK(info.subsampling == chroma_subsampling::gray);
    CHECK(info.components == 1);
    CHECK(info.colorspace == jpeg_colorspace::gray);
    jpeg_decode_options go;
    go.format = pixel_format::gray;
    auto back = decode_jpeg(bv(j1), go, {}).value();
    CHECK(back.shape() == shape{48, 64, 1});
    CHECK(psnr(back.data<std::uint8_t>(), g.data<std::uint8_t>(), g.nbytes()) > 35.0);
    auto as_rgb = decode_jpeg(bv(j1), {}, {}).value();  // gray JPEG to rgb: three equal channels
    CHECK(as_rgb.shape() == shape{48, 64, 3});
    CHECK(as_rgb.data<std::uint8_t>()[30] == as_rgb.data<std::uint8_t>()[31]);
  }
}

TEST_CASE("jpeg: every chroma subsampling round trips and is probed") {
  const tensor img = make_image(70, 45, 3);
  for (auto ss : {chroma_subsampling::s444, chroma_subsampling::s422, chroma_subsampling::s420,
                  chroma_subsampling::gray, chroma_subsampling::s440, chroma_subsampling::s411}) {
    CAPTURE(int(ss));
    const auto j = encode(img, {92, ss});
    auto info = probe_jpeg(bv(j)).value();
    CHECK(info.subsampling == ss);
    CHECK(info.components == (ss == chroma_subsampling::gray ? 1 : 3));
    auto dec = decode_jpeg(bv(j), {}, {}).value();
    CHECK(dec.shape() == shape{45, 70, 3});
    const auto ref = direct_decode(bv(j), TJPF_RGB);
    CHECK(std::memcmp(ref.pixels.data(), dec.data(), dec.nbytes()) == 0);
    if (ss != chroma_subsampling::gray) CHECK(psnr(dec.data<std::uint8_t>(), img.data<std::uint8_t>(), img.nbytes()) > 30.0);
  }
}

TEST_CASE("jpeg: progressive JPEG decodes like TurboJPEG") {
  const tensor img = make_image(150, 100, 3, true);
  const auto j = direct_encode(img, TJPF_RGB, TJSAMP_420, 85, TJFLAG_PROGRESSIVE);
  auto dec = decode_jpeg(bv(j), {}, {}).value();
  const auto ref = direct_decode(bv(j), TJPF_RGB);
  CHECK(std::memcmp(ref.pixels.data(), dec.data(), dec.nbytes()) == 0);
}

TEST_CASE("jpeg: DCT-scaled decode picks the smallest factor covering the target") {
  const tensor img = make_image(1024, 768);
  const auto j = encode(img, {90});
  jpeg_decode_options o;
  o.target_width = 300;
  o.target_height = 200;
  // Default: power-of-two factors only (SIMD IDCTs): 1/2.
  auto plan = codec::detail::plan_decode(bv(j), o, {});
  REQUIRE(plan);
  CHECK(plan->scaled_w == 512);
  CHECK(plan->scaled_h == 384);
  auto pow2 = decode_jpeg(bv(j), o, {}).value();
  CHECK(pow2.shape() == shape{200, 300, 3});
  {
    const auto half = direct_decode(bv(j), TJPF_RGB, 512, 384);
    std::vector<std::uint8_t> exact(200 * 300 * 3);
    codec::detail::resize_u8(half.pixels.data(), 512, 384, 512 * 3, 3, 300, 200, 0, 0, 300, 200, exact.data(), 300 * 3);
    CHECK(std::memcmp(exact.data(), pow2.data(), exact.size()) == 0);
  }
  o.dct_scaling = jpeg_dct_scaling::off;
  CHECK(codec::detail::plan_decode(bv(j), o, {})->scaled_w == 1024);
  // Any factor: 3/8, as 384x288 >= 300x200 and 1/4 (256x192) is not.
  o.dct_scaling = jpeg_dct_scaling::any;
  plan = codec::detail::plan_decode(bv(j), o, {});
  REQUIRE(plan);
  CHECK(plan->scaled_w == 384);
  CHECK(plan->scaled_h == 288);
  auto out = decode_jpeg(bv(j), o, {});
  REQUIRE(out);
  CHECK(out->shape() == shape{200, 300, 3});
  CHECK(jpeg_output_shape(bv(j), o, {}).value() == shape{200, 300, 3});

  // Exactly: TurboJPEG at 3/8, then the resize.
  const auto scaled = direct_decode(bv(j), TJPF_RGB, 384, 288);
  std::vector<std::uint8_t> exact(200 * 300 * 3);
  codec::detail::resize_u8(scaled.pixels.data(), 384, 288, 384 * 3, 3, 300, 200, 0, 0, 300, 200, exact.data(), 300 * 3);
  CHECK(std::memcmp(exact.data(), out->data(), exact.size()) == 0);

  // Against decode-at-native-size-then-resize: close, not equal.
  const auto full = direct_decode(bv(j), TJPF_RGB);
  std::vector<std::uint8_t> ref(200 * 300 * 3);
  codec::detail::resize_u8(full.pixels.data(), 1024, 768, 1024 * 3, 3, 300, 200, 0, 0, 300, 200, ref.data(), 300 * 3);
  for (const tensor* t : {&*out, &pow2}) {
    CHECK(mean_abs_diff(ref.data(), t->data<std::uint8_t>(), ref.size()) < 2.0);
    CHECK(psnr(ref.data(), t->data<std::uint8_t>(), ref.size()) > 35.0);
  }

  SUBCASE("a target equal to a scaled size is TurboJPEG's scaled output, byte for byte") {
    o.target_width = 512;
    o.target_height = 384;
    auto half = decode_jpeg(bv(j), o, {}).value();
    const auto r = direct_decode(bv(j), TJPF_RGB, 512, 384);
    CHECK(half.shape() == shape{384, 512, 3});
    CHECK(std::memcmp(r.pixels.data(), half.data(), half.nbytes()) == 0);
  }
  SUBCASE("below 1/8 the resize does the rest") {
    o.target_width = 50;
    o.target_height = 40;
    auto p2 = codec::detail::plan_decode(bv(j), o, {}).value();
    CHECK(p2.scaled_w == 128);
    CHECK(p2.scaled_h == 96);
    auto small = decode_jpeg(bv(j), o, {}).value();
    CHECK(small.shape() == shape{40, 50, 3});
  }
  SUBCASE("one target extent follows the aspect ratio") {
    o.target_width = 400;
    o.target_height = 0;
    CHECK(decode_jpeg(bv(j), o, {}).value().shape() == shape{300, 400, 3});
  }
  SUBCASE("upsampling decodes at native size and resizes up") {
    const tensor s = make_image(40, 30);
    const auto js = encode(s, {95});
    o.target_width = 80;
    o.target_height = 60;
    auto big = decode_jpeg(bv(js), o, {}).value();
    CHECK(big.shape() == shape{60, 80, 3});
    std::vector<std::uint8_t> ref2(60 * 80 * 3);
    const auto nat = direct_decode(bv(js), TJPF_RGB);
    codec::detail::resize_u8(nat.pixels.data(), 40, 30, 40 * 3, 3, 80, 60, 0, 0, 80, 60, ref2.data(), 80 * 3);
    CHECK(std::memcmp(ref2.data(), big.data(), ref2.size()) == 0);
  }
}

TEST_CASE("jpeg: resize keeps flat images flat and handles gray") {
  std::vector<std::uint8_t> flat(33 * 17, 77), out(10 * 7);
  codec::detail::resize_u8(flat.data(), 33, 17, 33, 1, 10, 7, 0, 0, 10, 7, out.data(), 10);
  for (auto v : out) CHECK(v == 77);
  std::vector<std::uint8_t> up(50 * 40);
  codec::detail::resize_u8(flat.data(), 33, 17, 33, 1, 50, 40, 0, 0, 50, 40, up.data(), 50);
  for (auto v : up) CHECK(v == 77);
}

TEST_CASE("jpeg: resize matches a floating-point triangle-filter reference within 1") {
  // Separable antialiased bilinear in double precision, straight from the definition.
  auto ref_axis = [](int in, int out) {
    std::vector<std::vector<std::pair<int, double>>> taps(static_cast<std::size_t>(out));
    const double scale = double(in) / out, fs = std::max(scale, 1.0);
    for (int i = 0; i < out; ++i) {
      const double center = (i + 0.5) * scale;
      double sum = 0;
      for (int j = 0; j < in; ++j) {
        const double d = std::abs((j + 0.5 - center) / fs);
        if (d < 1) {
          taps[std::size_t(i)].push_back({j, 1 - d});
          sum += 1 - d;
        }
      }
      for (auto& t : taps[std::size_t(i)]) t.second /= sum;
    }
    return taps;
  };
  for (auto [sw, sh, dw, dh] : {std::array{97, 61, 40, 33}, std::array{40, 30, 91, 47}, std::array{64, 64, 7, 5},
                                std::array{13, 9, 13, 20}, std::array{50, 50, 49, 2}}) {
    CAPTURE(sw);
    CAPTURE(dw);
    const tensor src = make_image(sw, sh, 3, true, 9);
    std::vector<std::uint8_t> got(std::size_t(dw) * dh * 3);
    codec::detail::resize_u8(src.data<std::uint8_t>(), sw, sh, sw * 3, 3, dw, dh, 0, 0, dw, dh, got.data(), dw * 3);
    const auto ax = ref_axis(sw, dw), ay = ref_axis(sh, dh);
    int worst = 0;
    for (int y = 0; y < dh; ++y)
      for (int x = 0; x < dw; ++x)
        for (int c = 0; c < 3; ++c) {
          double v = 0;
          for (auto [yy, wy] : ay[std::size_t(y)]) {
            double row = 0;
            for (auto [xx, wx] : ax[std::size_t(x)]) row += wx * src.data<std::uint8_t>()[(yy * sw + xx) * 3 + c];
            v += wy * row;
          }
          worst = std::max(worst, std::abs(int(std::lround(v)) - int(got[(std::size_t(y) * dw + x) * 3 + c])));
        }
    CHECK(worst <= 1);
  }
}

TEST_CASE("jpeg: crop in output coordinates") {
  const tensor img = make_image(200, 150, 3, true);
  const auto j = encode(img, {90});
  const auto full = decode_jpeg(bv(j), {}, {}).value();

  jpeg_decode_options o;
  o.crop = crop_rect{13, 7, 50, 40};
  auto c = decode_jpeg(bv(j), o, {}).value();
  CHECK(c.shape() == shape{40, 50, 3});
  bool same = true;
  for (int y = 0; y < 40; ++y)
    same &= std::memcmp(c.data<std::uint8_t>() + y * 150, full.data<std::uint8_t>() + ((y + 7) * 200 + 13) * 3, 150) == 0;
  CHECK(same);

  SUBCASE("crop of a resized image equals the same window of the whole resized image") {
    o.target_width = 90;
    o.target_height = 70;
    o.crop = crop_rect{20, 10, 60, 55};
    auto cr = decode_jpeg(bv(j), o, {}).value();
    o.crop.reset();
    auto whole = decode_jpeg(bv(j), o, {}).value();
    CHECK(cr.shape() == shape{55, 60, 3});
    bool eq = true;
    for (int y = 0; y < 55; ++y)
      eq &= std::memcmp(cr.data<std::uint8_t>() + y * 180, whole.data<std::uint8_t>() + ((y + 10) * 90 + 20) * 3, 180) == 0;
    CHECK(eq);
  }
  SUBCASE("out of bounds crops are invalid_argument") {
    for (crop_rect bad : {crop_rect{-1, 0, 10, 10}, crop_rect{0, -1, 10, 10}, crop_rect{0, 0, 0, 10},
                          crop_rect{0, 0, 10, -5}, crop_rect{191, 0, 10, 10}, crop_rect{0, 141, 10, 10},
                          crop_rect{INT_MAX, 0, 10, 10}, crop_rect{1, 0, INT_MAX, 10}, crop_rect{0, 0, 201, 150}}) {
      o.crop = bad;
      auto r = decode_jpeg(bv(j), o, {});
      CHECK(r.code() == errc::invalid_argument);
    }
    o.crop = crop_rect{190, 140, 10, 10};  // flush with the corner: fine
    CHECK(decode_jpeg(bv(j), o, {}).value().shape() == shape{10, 10, 3});
  }
}

TEST_CASE("jpeg: decode_jpeg_into a caller's buffer") {
  const tensor img = make_image(64, 32);
  const auto j = encode(img, {90});
  const auto ref = decode_jpeg(bv(j), {}, {}).value();

  tensor out = tensor::zeros({32, 64, 3}, dtype::u8);
  REQUIRE(decode_jpeg_into(bv(j), {}, {}, out));
  CHECK(std::memcmp(out.data(), ref.data(), ref.nbytes()) == 0);

  // A slice of a padded [32, 80, 3] buffer: rows 240 bytes apart.
  tensor padded = tensor::zeros({32, 80, 3}, dtype::u8);
  tensor_view slice(padded.data(), dtype::u8, shape{32, 64, 3}, shape{240, 3, 1}, device::cpu());
  REQUIRE(decode_jpeg_into(bv(j), {}, {}, slice));
  bool eq = true;
  for (int y = 0; y < 32; ++y) eq &= std::memcmp(padded.data<std::uint8_t>() + y * 240, ref.data<std::uint8_t>() + y * 192, 192) == 0;
  CHECK(eq);
  CHECK(padded.data<std::uint8_t>()[200] == 0);  // the padding is untouched

  // Resized into a buffer.
  jpeg_decode_options o;
  o.target_width = 20;
  o.target_height = 10;
  tensor small = tensor::zeros({10, 20, 3}, dtype::u8);
  CHECK(decode_jpeg_into(bv(j), o, {}, small));
  CHECK(std::memcmp(small.data(), decode_jpeg(bv(j), o, {}).value().data(), small.nbytes()) == 0);

  CHECK(decode_jpeg_into(bv(j), {}, {}, tensor::zeros({32, 63, 3}, dtype::u8)).code() == errc::invalid_argument);
  CHECK(decode_jpeg_into(bv(j), {}, {}, tensor::zeros({32, 64, 1}, dtype::u8)).code() == errc::invalid_argument);
  CHECK(decode_jpeg_into(bv(j), {}, {}, tensor::zeros({32, 64, 3}, dtype::f32)).code() == errc::dtype_mismatch);
  tensor_view transposed(padded.data(), dtype::u8, shape{32, 64, 3}, shape{3, 96, 1}, device::cpu());
  CHECK(decode_jpeg_into(bv(j), {}, {}, transposed).code() == errc::invalid_argument);
}

TEST_CASE("jpeg: jpeg_codec models codec and encodes into caller buffers") {
  const tensor img = make_image(100, 60, 3, true);
  jpeg_codec c;
  c.encode_options.quality = 85;
  const auto bound = c.max_encoded_size(img).value();
  CHECK(bound == tjBufSize(100, 60, TJSAMP_420));

  byte_buffer exact(bound);
  const auto n = c.encode(img, exact).value();
  CHECK(n > 0);
  CHECK(n < bound);
  const auto expected = direct_encode(img, TJPF_RGB, TJSAMP_420, 85);
  CHECK(to_vec(bytes_view(exact.data(), n)) == expected);

  byte_buffer fits(n);  // smaller than tjBufSize but enough for this image
  CHECK(c.encode(img, fits).value() == n);
  CHECK(to_vec(bytes_view(fits.data(), n)) == expected);

  byte_buffer tiny(n - 1);
  CHECK(c.encode(img, tiny).code() == errc::buffer_too_small);

  auto buf = encode_to_buffer(c, img).value();
  CHECK(buf.size() == n);
  auto back = c.decode(buf, decode_limits{}).value();
  CHECK(back.shape() == img.shape());
  CHECK(psnr(back.data<std::uint8_t>(), img.data<std::uint8_t>(), img.nbytes()) > 30.0);
}

TEST_CASE("jpeg: encode rejects inputs it cannot encode") {
  CHECK(encode_jpeg(tensor::zeros({8, 8, 3}, dtype::f32), {}).code() == errc::dtype_mismatch);
  CHECK(encode_jpeg(tensor::zeros({8, 8, 4}, dtype::u8), {}).code() == errc::invalid_argument);
  CHECK(encode_jpeg(tensor::zeros({8}, dtype::u8), {}).code() == errc::invalid_argument);
  CHECK(encode_jpeg(tensor::zeros({0, 8, 3}, dtype::u8), {}).code() == errc::invalid_argument);
  CHECK(encode_jpeg(tensor::zeros({8, 8, 3}, dtype::u8), {0}).code() == errc::invalid_argument);
  CHECK(encode_jpeg(tensor::zeros({8, 8, 3}, dtype::u8), {101}).code() == errc::invalid_argument);
  jpeg_encode_options o;
  o.input_format = pixel_format::gray;
  CHECK(encode_jpeg(tensor::zeros({8, 8, 3}, dtype::u8), o).code() == errc::invalid_argument);
  // Strided input: every other column is not interleaved pixels.
  tensor wide = tensor::zeros({8, 16, 3}, dtype::u8);
  tensor_view cols(wide.data(), dtype::u8, shape{8, 8, 3}, shape{48, 6, 1}, device::cpu());
  CHECK(encode_jpeg(cols, {}).code() == errc::invalid_argument);
  // Row-padded input is fine and equals the packed image.
  tensor_view rows(wide.data(), dtype::u8, shape{8, 8, 3}, shape{48, 3, 1}, device::cpu());
  CHECK(encode_jpeg(rows, {}));
}

TEST_CASE("jpeg: batch decode on a pool equals serial decode, errors in place") {
  std::vector<std::vector<std::uint8_t>> files;
  for (int i = 0; i < 12; ++i) files.push_back(encode(make_image(64 + 8 * i, 48 + 4 * i, 3, i % 2 == 1, i), {85}));
  files[5] = {0x00, 0x01, 0x02};                       // not a JPEG
  files[9].resize(files[9].size() / 2);                 // truncated
  std::vector<bytes_view> views;
  for (auto& f : files) views.push_back(bv(f));
  jpeg_decode_options o;
  o.target_width = 40;
  o.target_height = 30;
  thread_pool pool(2);
  auto batch = decode_jpeg_batch(views, o, decode_limits{}, pool);
  REQUIRE(batch.size() == files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    CAPTURE(i);
    auto serial = decode_jpeg(views[i], o, decode_limits{});
    REQUIRE(batch[i].code() == serial.code());
    if (serial) {
      CHECK(batch[i]->shape() == shape{30, 40, 3});
      CHECK(std::memcmp(batch[i]->data(), serial->data(), serial->nbytes()) == 0);
    }
  }
  CHECK(batch[5].code() == errc::bad_magic);
  CHECK(batch[9].code() == errc::truncated);
  CHECK(decode_jpeg_batch({}, o, decode_limits{}, pool).empty());

  // Into slices of one [N, 30, 40, 3] tensor.
  tensor stacked = tensor::zeros({std::int64_t(files.size()), 30, 40, 3}, dtype::u8);
  std::vector<tensor_view> outs;
  for (std::size_t i = 0; i < files.size(); ++i)
    outs.emplace_back(stacked.data<std::uint8_t>() + i * 3600, dtype::u8, shape{30, 40, 3});
  auto into = decode_jpeg_batch_into(views, outs, o, decode_limits{}, pool);
  REQUIRE(into.size() == files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    CAPTURE(i);
    CHECK(into[i].code() == batch[i].code());
    if (batch[i]) CHECK(std::memcmp(outs[i].data(), batch[i]->data(), 3600) == 0);
  }
  outs.pop_back();
  auto mismatch = decode_jpeg_batch_into(views, outs, o, decode_limits{}, pool);
  REQUIRE(mismatch.size() == files.size());
  CHECK(mismatch[0].code() == errc::invalid_argument);
}
