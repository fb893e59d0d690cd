// JPEG decoding of untrusted bytes: limits checked from the header, exact error codes for bad input,
// no crash on truncations, bit flips, random bytes and a progressive scan-count bomb.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "jpeg/jpeg_test_util.hpp"

using namespace jitembed;
using namespace jitembed::codec;
using namespace jpeg_test;

namespace {

std::vector<std::uint8_t> small_jpeg(int w = 48, int h = 32, int q = 85, bool textured = true) {
  auto r = encode_jpeg(make_image(w, h, 3, textured), {q});
  REQUIRE(r);
  return to_vec(bytes_view(r->data(), r->size()));
}

// Rewrites the SOF0 frame size.
std::vector<std::uint8_t> with_size(std::vector<std::uint8_t> j, int w, int h) {
  const std::size_t sof = find_marker(j, 0xC0);
  j[sof + 5] = std::uint8_t(h >> 8);
  j[sof + 6] = std::uint8_t(h);
  j[sof + 7] = std::uint8_t(w >> 8);
  j[sof + 8] = std::uint8_t(w);
  return j;
}

bool is_error_code(errc e) {
  return e == errc::truncated || e == errc::decode_failed || e == errc::corrupt_data || e == errc::bad_magic ||
         e == errc::limit_exceeded || e == errc::unsupported_format;
}

}  // namespace

TEST_CASE("jpeg: a header claiming 65000x65000 is rejected before any pixel allocation") {
  const auto j = with_size(small_jpeg(), 65000, 65000);
  auto info = probe_jpeg(bv(j));  // the header itself is fine
  REQUIRE(info);
  CHECK(info->width == 65000);
  CHECK(info->height == 65000);
  auto r = decode_jpeg(bv(j), {}, decode_limits{});
  REQUIRE(r.code() == errc::limit_exceeded);
  CHECK(r.error().message == "jpeg: image 65000x65000 = 4225000000 pixels > max_image_pixels 134217728");
  // Same with scaling requested: the source size is what libjpeg would hold.
  jpeg_decode_options o;
  o.target_width = 64;
  o.target_height = 64;
  CHECK(decode_jpeg(bv(j), o, decode_limits{}).code() == errc::limit_exceeded);
  CHECK(jpeg_output_shape(bv(j), o, decode_limits{}).code() == errc::limit_exceeded);
  tensor out = tensor::zeros({1, 1, 3}, dtype::u8);
  CHECK(decode_jpeg_into(bv(j), {}, decode_limits{}, out).code() == errc::limit_exceeded);
}

TEST_CASE("jpeg: max_image_pixels, max_decoded_bytes and max_elements") {
  const auto j = small_jpeg(48, 32);
  decode_limits lim;
  lim.max_image_pixels = 48 * 32;
  CHECK(decode_jpeg(bv(j), {}, lim));
  lim.max_image_pixels = 48 * 32 - 1;
  CHECK(decode_jpeg(bv(j), {}, lim).code() == errc::limit_exceeded);

  lim = {};
  lim.max_decoded_bytes = 48 * 32 * 3;
  CHECK(decode_jpeg(bv(j), {}, lim));
  lim.max_decoded_bytes = 48 * 32 * 3 - 1;
  auto r = decode_jpeg(bv(j), {}, lim);
  CHECK(r.code() == errc::limit_exceeded);
  CHECK(r.error().message.find("max_decoded_bytes") != std::string::npos);
  jpeg_decode_options gray;
  gray.format = pixel_format::gray;
  CHECK(decode_jpeg(bv(j), gray, lim));  // 1 byte per pixel fits

  lim = {};
  lim.max_elements = 100;
  CHECK(decode_jpeg(bv(j), {}, lim).code() == errc::limit_exceeded);

  // An upsampling target is bounded too.
  lim = {};
  lim.max_image_pixels = 10000;
  jpeg_decode_options big;
  big.target_width = 200;
  big.target_height = 100;
  CHECK(decode_jpeg(bv(j), big, lim).code() == errc::limit_exceeded);
  big.target_width = -1;
  CHECK(decode_jpeg(bv(j), big, {}).code() == errc::invalid_argument);
}

TEST_CASE("jpeg: not a JPEG is bad_magic, SOI alone is truncated") {
  CHECK(decode_jpeg({}, {}, {}).code() == errc::truncated);
  CHECK(probe_jpeg({}).code() == errc::truncated);
  const std::vector<std::uint8_t> png = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  auto r = decode_jpeg(bv(png), {}, {});
  CHECK(r.code() == errc::bad_magic);
  CHECK(r.error().message == "jpeg: no SOI marker (0xFFD8) at offset 0");
  CHECK(probe_jpeg(bv(png)).code() == errc::bad_magic);
  const std::vector<std::uint8_t> soi = {0xFF, 0xD8};
  CHECK(decode_jpeg(bv(soi), {}, {}).code() == errc::truncated);
  const std::vector<std::uint8_t> one = {0xFF};
  CHECK(decode_jpeg(bv(one), {}, {}).code() == errc::truncated);
  const std::vector<std::uint8_t> zero = {0x00};
  CHECK(decode_jpeg(bv(zero), {}, {}).code() == errc::bad_magic);
}

TEST_CASE("jpeg: truncation at every offset fails cleanly (strict) or decodes to the right shape") {
  const auto j = small_jpeg(40, 24);
  const std::size_t sos = find_marker(j, 0xDA);
  int truncated = 0;
  for (std::size_t n = 0; n < j.size() - 2; ++n) {  // keep the EOI off: every prefix is incomplete
    CAPTURE(n);
    const std::vector<std::uint8_t> cut(j.begin(), j.begin() + static_cast<std::ptrdiff_t>(n));
    auto strict = decode_jpeg(bv(cut), {}, {});
    REQUIRE_FALSE(strict);
    CHECK(is_error_code(strict.code()));
    if (strict.code() == errc::truncated) ++truncated;
    if (n > sos + 20) CHECK(strict.code() == errc::truncated);  // inside the entropy-coded data
    jpeg_decode_options lax;
    lax.strict = false;
    auto r = decode_jpeg(bv(cut), lax, {});
    if (r) CHECK(r->shape() == shape{24, 40, 3});
    if (n > sos + 20) CHECK(r);  // libjpeg pads the missing rows
  }
  CHECK(truncated > 0);
  // The error keeps TurboJPEG's message.
  const std::vector<std::uint8_t> half(j.begin(), j.begin() + static_cast<std::ptrdiff_t>(sos + 40));
  auto r = decode_jpeg(bv(half), {}, {});
  CHECK(r.error().message.find("Premature end of JPEG file") != std::string::npos);
}

TEST_CASE("jpeg: bit flips and random bytes never crash and map to the known codes") {
  const auto j = small_jpeg(64, 40);
  std::mt19937 rng(1234);
  int ok = 0, failed = 0;
  for (int i = 0; i < 600; ++i) {
    auto m = j;
    const int flips = 1 + i % 4;
    for (int f = 0; f < flips; ++f) m[rng() % m.size()] ^= std::uint8_t(1u << (rng() % 8));
    for (bool strict : {true, false}) {
      jpeg_decode_options o;
      o.strict = strict;
      if (i % 3 == 0) {
        o.target_width = 20;
        o.target_height = 17;
      }
      decode_limits lim;
      lim.max_image_pixels = 1 << 20;
      auto r = decode_jpeg(bv(m), o, lim);
      if (r) {
        ++ok;
        CHECK(r->rank() == 3);
      } else {
        ++failed;
        CHECK(is_error_code(r.code()));
      }
    }
  }
  CHECK(failed > 0);
  CHECK(ok > 0);

  for (int i = 0; i < 300; ++i) {
    std::vector<std::uint8_t> junk(1 + rng() % 400);
    for (auto& b : junk) b = std::uint8_t(rng());
    if (i % 2) {
      junk.insert(junk.begin(), {0xFF, 0xD8});  // past the magic check: TurboJPEG must reject it
    } else if (junk.size() >= 2 && junk[0] == 0xFF && junk[1] == 0xD8) {
      junk[0] = 0;
    }
    auto r = decode_jpeg(bv(junk), {}, {});
    REQUIRE_FALSE(r);
    if (i % 2 == 0) CHECK(r.code() == errc::bad_magic);
    else CHECK(is_error_code(r.code()));
    CHECK(!r.error().message.empty());
  }
}

TEST_CASE("jpeg: strict fails on libjpeg warnings, lax returns the concealed image") {
  const auto j = small_jpeg(48, 32);
  // Junk bytes before the SOS marker: libjpeg warns "extraneous bytes before marker" and carries on.
  auto junk = j;
  const std::size_t sos = find_marker(junk, 0xDA);
  junk.insert(junk.begin() + static_cast<std::ptrdiff_t>(sos), {0x12, 0x34, 0x56});
  auto strict = decode_jpeg(bv(junk), {}, {});
  REQUIRE(strict.code() == errc::decode_failed);
  CHECK(strict.error().message.find("extraneous bytes before marker") != std::string::npos);
  jpeg_decode_options lax;
  lax.strict = false;
  auto ok = decode_jpeg(bv(junk), lax, {});
  REQUIRE(ok);
  const auto clean = decode_jpeg(bv(j), {}, {}).value();
  CHECK(std::memcmp(ok->data(), clean.data(), clean.nbytes()) == 0);
  CHECK(probe_jpeg(bv(junk)).value().width == 48);  // probe tolerates header warnings

  // Corrupt entropy data (a flipped byte mid-scan) with the EOI intact: strict decode_failed, lax decodes.
  auto flipped = j;
  flipped[sos + (j.size() - sos) / 2] ^= 0x5A;
  auto s2 = decode_jpeg(bv(flipped), {}, {});
  auto l2 = decode_jpeg(bv(flipped), lax, {});
  if (!s2) CHECK(s2.code() == errc::decode_failed);
  if (l2) CHECK(l2->shape() == shape{32, 48, 3});
}

TEST_CASE("jpeg: a progressive scan-count bomb hits TJFLAG_LIMITSCANS") {
  const tensor img = make_image(32, 32);
  const auto p = direct_encode(img, TJPF_RGB, TJSAMP_420, 80, TJFLAG_PROGRESSIVE);
  // The last scan (SOS .. EOI) repeated 600 times.
  std::size_t last_sos = 0;
  for (std::size_t i = 0; i + 1 < p.size(); ++i)
    if (p[i] == 0xFF && p[i + 1] == 0xDA) last_sos = i;
  REQUIRE(last_sos > 0);
  REQUIRE(p[p.size() - 2] == 0xFF);
  REQUIRE(p[p.size() - 1] == 0xD9);
  std::vector<std::uint8_t> bomb(p.begin(), p.end() - 2);
  for (int k = 0; k < 600; ++k) bomb.insert(bomb.end(), p.begin() + static_cast<std::ptrdiff_t>(last_sos), p.end() - 2);
  bomb.push_back(0xFF);
  bomb.push_back(0xD9);

  CHECK(decode_jpeg(bv(p), {}, {}));
  jpeg_decode_options lax;
  lax.strict = false;
  auto r = decode_jpeg(bv(bomb), lax, {});
  REQUIRE(r.code() == errc::limit_exceeded);
  CHECK(r.error().message.find("more than 500 scans") != std::string::npos);
  CHECK_FALSE(decode_jpeg(bv(bomb), {}, {}));  // strict stops at the first bogus scan
}

TEST_CASE("jpeg: a tables-only stream and a zero-size frame are corrupt, CMYK is unsupported") {
  auto j = small_jpeg();
  // Tables only: SOI, the DQT/DHT segments, EOI.
  std::vector<std::uint8_t> tables = {0xFF, 0xD8};
  for (const auto& s : header_segments(j))
    if (s.marker == 0xDB || s.marker == 0xC4)
      tables.insert(tables.end(), j.begin() + static_cast<std::ptrdiff_t>(s.offset),
                    j.begin() + static_cast<std::ptrdiff_t>(s.offset + 2 + s.length));
  tables.push_back(0xFF);
  tables.push_back(0xD9);
  auto t = decode_jpeg(bv(tables), {}, {});
  CHECK(t.code() == errc::corrupt_data);
  CHECK(probe_jpeg(bv(tables)).code() == errc::corrupt_data);

  auto zero = with_size(j, 0, 32);
  CHECK(is_error_code(decode_jpeg(bv(zero), {}, {}).code()));
  CHECK_FALSE(probe_jpeg(bv(zero)));

  const tensor cmyk = make_image(16, 16, 4);
  tjhandle c = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  REQUIRE(tjCompress2(c, cmyk.data<std::uint8_t>(), 16, 0, 16, TJPF_CMYK, &buf, &size, TJSAMP_444, 90, 0) == 0);
  const std::vector<std::uint8_t> cj(buf, buf + size);
  tjFree(buf);
  tjDestroy(c);
  auto info = probe_jpeg(bv(cj));
  REQUIRE(info);
  CHECK(info->components == 4);
  CHECK(info->colorspace == jpeg_colorspace::ycck);
  CHECK(decode_jpeg(bv(cj), {}, {}).code() == errc::unsupported_format);
}
