// zstd codec: round trips over every dtype, interop with plain zstd, shuffle, dictionaries, and hostile
// frames (bombs, lies, truncation, garbage, oversized windows).
#include <doctest/doctest.h>

#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_getFrameHeader
#include <zstd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "jitembed/codec/shuffle.hpp"
#include "jitembed/codec/zstd.hpp"
#include "zstd/alloc_probe.hpp"

using namespace jitembed;
using namespace jitembed::codec;

namespace {

// Storage of T (bool is stored as 0/1 bytes: std::vector<bool> has no data()).
template <class T>
using stored_t = std::conditional_t<std::is_same_v<T, bool>, std::uint8_t, T>;

template <class T>
std::vector<stored_t<T>> sample_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<stored_t<T>> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bool>) {
      v[i] = (rng() % 5) == 0;
    } else if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
      v[i] = T(normal(rng));
    } else if constexpr (std::is_floating_point_v<T>) {
      v[i] = static_cast<T>(normal(rng));
    } else {
      v[i] = static_cast<T>(static_cast<long long>(i % 97) * 3 + static_cast<long long>(rng() % 4) - 40);
    }
  }
  return v;
}

bytes_view bytes_of(const void* p, std::size_t n) { return {static_cast<const std::byte*>(p), n}; }

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

std::string text_like(std::size_t n) {
  static const char* words[] = {"a", "photo", "of", "the", "cat", "sitting", "on", "red", "sofa", "near",
                                "window", "with", "sunlight", "and", "plants", "in", "background"};
  std::mt19937 rng(7);
  std::string s;
  while (s.size() < n) {
    s += words[rng() % 17];
    s += ' ';
  }
  s.resize(n);
  return s;
}

byte_buffer compress_with(const zstd_codec& c, bytes_view in) {
  byte_buffer out(zstd_codec::compress_bound(in.size()));
  auto n = c.compress(in, out);
  REQUIRE_MESSAGE(n.has_value(), (n.code() == errc::ok ? std::string() : n.error().message));
  out.resize(*n);
  return out;
}

zstd_codec make_codec(int level, std::size_t shuffle, zstd_dictionary dict = {}) {
  zstd_options o;
  o.level = level;
  o.shuffle = shuffle;
  o.dictionary = std::move(dict);
  return zstd_codec(std::move(o));
}

// Streams `total` zero bytes through zstd in 1 MiB chunks; content size unknown unless `pledge`.
byte_buffer zero_bomb(std::uint64_t total, bool pledge) {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 1);
  if (pledge) ZSTD_CCtx_setPledgedSrcSize(c, total);
  std::vector<char> zeros(1 << 20, 0);
  byte_buffer out;
  std::vector<char> chunk(ZSTD_CStreamOutSize());
  std::uint64_t fed = 0;
  for (;;) {
    const bool last = fed + zeros.size() >= total;
    const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(zeros.size(), total - fed));
    ZSTD_inBuffer ib{zeros.data(), take, 0};
    bool done = false;
    while (!done) {
      ZSTD_outBuffer ob{chunk.data(), chunk.size(), 0};
      const std::size_t r = ZSTD_compressStream2(c, &ob, &ib, last ? ZSTD_e_end : ZSTD_e_continue);
      REQUIRE_FALSE(ZSTD_isError(r));
      append(out, bytes_of(chunk.data(), ob.pos));
      done = last ? r == 0 : ib.pos == ib.size;
    }
    fed += take;
    if (last) break;
  }
  ZSTD_freeCCtx(c);
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("zstd round trip over every dtype, with and without shuffle", T, std::uint8_t, std::int8_t,
                   std::int16_t, std::int32_t, std::int64_t, float16, bfloat16, float, double, bool) {
  const auto values = sample_values<T>(3001, 11);
  const tensor_view v(values.data(), dtype_of_v<T>, shape{3001});
  const std::size_t es = sizeof(T);
  for (std::size_t shuffle : {std::size_t{0}, es == 1 ? std::size_t{0} : es}) {
    for (int level : {-5, 1, 3, 9, 19}) {
      CAPTURE(shuffle);
      CAPTURE(level);
      const zstd_codec c = make_codec(level, shuffle);
      auto enc = encode_to_buffer(c, v);
      REQUIRE(enc.has_value());
      CHECK(enc->size() <= *c.max_encoded_size(v));

      auto dec = c.decode(*enc, decode_limits{});
      REQUIRE(dec.has_value());
      CHECK(dec->dtype() == dtype::u8);
      REQUIRE(dec->shape() == shape{static_cast<std::int64_t>(v.nbytes())});
      CHECK(std::memcmp(dec->data(), values.data(), v.nbytes()) == 0);

      std::vector<stored_t<T>> back(values.size());
      auto n = c.decompress_into(*enc, mutable_bytes(reinterpret_cast<std::byte*>(back.data()), v.nbytes()), decode_limits{});
      REQUIRE(n.has_value());
      CHECK(*n == v.nbytes());
      CHECK(std::memcmp(back.data(), values.data(), v.nbytes()) == 0);

      if (shuffle <= 1) {  // a plain zstd frame: the reference decoder reads it
        std::vector<std::byte> ref(v.nbytes() + 16);
        const std::size_t r = ZSTD_decompress(ref.data(), ref.size(), enc->data(), enc->size());
        REQUIRE_FALSE(ZSTD_isError(r));
        CHECK(r == v.nbytes());
        CHECK(std::memcmp(ref.data(), values.data(), v.nbytes()) == 0);
      } else {  // reference: zstd of the shuffled bytes
        std::vector<std::byte> ref(v.nbytes());
        const std::size_t r = ZSTD_decompress(ref.data(), ref.size(), enc->data(), enc->size());
        REQUIRE(r == v.nbytes());
        std::vector<std::byte> unsh(v.nbytes());
        byte_unshuffle(ref, unsh, shuffle);
        CHECK(std::memcmp(unsh.data(), values.data(), v.nbytes()) == 0);
      }
    }
  }
}

TEST_CASE("zstd output equals ZSTD_compress2 at the same level and decodes like ZSTD_decompress") {
  const std::string s = text_like(200000);
  for (int level : {1, 3, 7}) {
    const auto ours = compress_with(make_codec(level, 0), as_bytes_view(s));
    ZSTD_CCtx* c = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
    std::vector<std::byte> ref(ZSTD_compressBound(s.size()));
    const std::size_t rn = ZSTD_compress2(c, ref.data(), ref.size(), s.data(), s.size());
    ZSTD_freeCCtx(c);
    REQUIRE_FALSE(ZSTD_isError(rn));
    CHECK(ours.size() == rn);
    CHECK(std::memcmp(ours.data(), ref.data(), rn) == 0);
  }
}

TEST_CASE("byte shuffle: definition, inverse, tails, arguments") {
  for (std::size_t es : {1u, 2u, 4u, 8u}) {
    for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 255u, 256u, 257u, 2048u, 2051u, 5000u}) {
      CAPTURE(es);
      CAPTURE(n);
      const auto in = random_bytes(n, static_cast<unsigned>(es * 1000 + n));
      std::vector<std::byte> sh(n), back(n);
      byte_shuffle(in, sh, es);
      const std::size_t elems = n / es;
      bool def_ok = true;
      for (std::size_t i = 0; i < elems; ++i)
        for (std::size_t b = 0; b < es; ++b) def_ok &= sh[b * elems + i] == in[i * es + b];
      CHECK(def_ok);
      CHECK(std::equal(sh.begin() + static_cast<std::ptrdiff_t>(elems * es), sh.end(),
                       in.begin() + static_cast<std::ptrdiff_t>(elems * es)));  // tail unchanged
      byte_unshuffle(sh, back, es);
      CHECK(back == in);
    }
  }
  std::vector<std::byte> a(16), b(16), c(15);
  CHECK(try_byte_shuffle(a, b, 3).code() == errc::invalid_argument);
  CHECK(try_byte_shuffle(a, c, 2).code() == errc::invalid_argument);
  CHECK(try_byte_unshuffle(a, mutable_bytes(a).subspan(0), 2).code() == errc::invalid_argument);  // overlap
  CHECK_THROWS_AS(byte_shuffle(a, b, 16), jitembed::error);
  auto bad = make_codec(3, 3);
  byte_buffer out(64);
  CHECK(bad.compress(a, out).code() == errc::invalid_argument);
}

TEST_CASE("shuffle makes bf16 embeddings smaller") {
  const auto values = sample_values<bfloat16>(64 * 1024, 3);
  const auto raw = bytes_of(values.data(), values.size() * 2);
  const auto plain = compress_with(make_codec(3, 0), raw);
  const auto shuffled = compress_with(make_codec(3, 2), raw);
  MESSAGE("bf16 plain " << plain.size() << " shuffled " << shuffled.size());
  CHECK(shuffled.size() * 105 < plain.size() * 100);
}

TEST_CASE("concatenated frames decode to the concatenation") {
  const std::string a = text_like(5000), b = "second frame";
  const auto fa = compress_with(make_codec(3, 0), as_bytes_view(a));
  const auto fb = compress_with(make_codec(3, 0), as_bytes_view(b));
  byte_buffer both = fa;
  append(both, fb);
  auto t = zstd_codec().decompress(both, decode_limits{});
  REQUIRE(t.has_value());
  CHECK(as_string_view(t->bytes()) == a + b);
  std::string out(a.size() + b.size(), '\0');
  auto n = zstd_codec().decompress_into(both, mutable_bytes(reinterpret_cast<std::byte*>(out.data()), out.size()), decode_limits{});
  REQUIRE(n.has_value());
  CHECK(out == a + b);
}

TEST_CASE("empty payload round trips") {
  const zstd_codec c;
  const auto f = compress_with(c, bytes_view{});
  auto t = c.decompress(f, decode_limits{});
  REQUIRE(t.has_value());
  CHECK(t->numel() == 0);
  CHECK(c.decompress_into(f, mutable_bytes{}, decode_limits{}).value() == 0);
  CHECK(c.decompress(bytes_view{}, decode_limits{}).code() == errc::truncated);
}

TEST_CASE("encode into a short buffer, bad views") {
  const std::string s = text_like(10000);
  const zstd_codec c;
  byte_buffer out(16);
  auto r = c.compress(as_bytes_view(s), out);
  CHECK(r.code() == errc::buffer_too_small);
  const auto random = random_bytes(4096, 5);  // incompressible: needs more than its own size
  byte_buffer out2(4096);
  CHECK(c.compress(random, out2).code() == errc::buffer_too_small);
  byte_buffer out3(zstd_codec::compress_bound(4096));
  CHECK(c.compress(random, out3).has_value());

  std::vector<float> m(12);
  const tensor_view strided(m.data(), dtype::f32, shape{3, 2}, shape{1, 3}, device::cpu());
  CHECK(c.max_encoded_size(strided).code() == errc::invalid_argument);
  CHECK(c.encode(strided, out3).code() == errc::invalid_argument);
  const tensor_view gpu(m.data(), dtype::f32, shape{12}, device::cuda(0));
  CHECK(c.encode(gpu, out3).code() == errc::invalid_argument);
}

TEST_CASE("decompress_into wants exactly out.size() bytes") {
  const std::string s = text_like(1000);
  const zstd_codec c;
  const auto f = compress_with(c, as_bytes_view(s));  // declares its size
  std::vector<std::byte> small(999), big(1001);
  auto r1 = c.decompress_into(f, small, decode_limits{});
  CHECK(r1.code() == errc::buffer_too_small);
  auto r2 = c.decompress_into(f, big, decode_limits{});
  CHECK(r2.code() == errc::corrupt_data);
  CHECK(r2.error().message == "zstd: decoded 1000 bytes, expected 1001");
  decode_limits lim;
  lim.max_decoded_bytes = 500;
  std::vector<std::byte> exact(1000);
  CHECK(c.decompress_into(f, exact, lim).code() == errc::limit_exceeded);

  // Without a declared size the overflow is found while decoding (one-byte probe past the buffer).
  const auto nofcs = zero_bomb(3 << 20, false);
  CHECK(ZSTD_getFrameContentSize(nofcs.data(), nofcs.size()) == ZSTD_CONTENTSIZE_UNKNOWN);
  std::vector<std::byte> two_mib(2 << 20), three(3 << 20), more((3 << 20) + 1);
  CHECK(c.decompress_into(nofcs, two_mib, decode_limits{}).code() == errc::buffer_too_small);
  CHECK(c.decompress_into(nofcs, three, decode_limits{}).value() == (3u << 20));
  CHECK(c.decompress_into(nofcs, more, decode_limits{}).code() == errc::corrupt_data);
}

TEST_CASE("zstd bomb: 1 GiB of zeros stops at a 1 MiB limit without allocating the GiB") {
  for (bool pledge : {false, true}) {
    CAPTURE(pledge);
    const auto bomb = zero_bomb(std::uint64_t{1} << 30, pledge);
    CHECK(bomb.size() < (std::size_t{1} << 20));
    decode_limits lim;
    lim.max_decoded_bytes = 1 << 20;
    const auto t0 = std::chrono::steady_clock::now();
    jitembed::test::reset_max_alloc();
    auto r = zstd_codec().decompress(bomb, lim);
    const std::size_t biggest = jitembed::test::max_alloc();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(r.code() == errc::limit_exceeded);
    if (jitembed::test::alloc_probe_active()) CHECK(biggest <= (std::size_t{1} << 20));
    CHECK(secs < 0.5);
    // Even under default limits (2 GiB) decoding stays bounded and correct; a pledged size is used only up to
    // 32x the input size for the first allocation.
    if (pledge) {
      CHECK(r.error().message.find("frame declares 1073741824") != std::string::npos);
    } else {
      CHECK(r.error().message.find("exceeds limit 1048576") != std::string::npos);
    }
    std::vector<std::byte> out(1 << 20);
    CHECK(zstd_codec().decompress_into(bomb, out, lim).code() == errc::buffer_too_small);
  }
}

TEST_CASE("a frame lying about its content size") {
  const std::string s = text_like(1000);
  auto f = compress_with(zstd_codec(), as_bytes_view(s));
  const auto fhd = static_cast<std::uint8_t>(f[4]);
  const unsigned fcs_flag = fhd >> 6, single = (fhd >> 5) & 1, did_flag = fhd & 3;
  REQUIRE(fcs_flag == 1);  // 2-byte field, value - 256
  const std::size_t off = 5 + (single ? 0 : 1) + (did_flag == 3 ? 4 : did_flag);
  auto set_fcs = [&](unsigned v) {
    f[off] = static_cast<std::byte>((v - 256) & 0xff);
    f[off + 1] = static_cast<std::byte>((v - 256) >> 8);
  };
  set_fcs(60000);  // claims more than it holds
  CHECK(ZSTD_getFrameContentSize(f.data(), f.size()) == 60000);
  auto r = zstd_codec().decompress(f, decode_limits{});
  CHECK(r.code() == errc::decode_failed);
  std::vector<std::byte> out(60000);
  CHECK(zstd_codec().decompress_into(f, out, decode_limits{}).code() == errc::decode_failed);
  decode_limits lim;
  lim.max_decoded_bytes = 10000;
  CHECK(zstd_codec().decompress(f, lim).code() == errc::limit_exceeded);  // the claim alone is over
  set_fcs(500);  // claims less than it holds
  CHECK(zstd_codec().decompress(f, decode_limits{}).code() == errc::decode_failed);
  std::vector<std::byte> out500(500);
  CHECK(zstd_codec().decompress_into(f, out500, decode_limits{}).code() != errc::ok);
}

TEST_CASE("truncated and garbage frames") {
  const std::string s = text_like(20000);
  for (bool checksum : {false, true}) {
    zstd_options o;
    o.checksum = checksum;
    const zstd_codec c(o);
    const auto f = compress_with(c, as_bytes_view(s));
    for (std::size_t cut = 0; cut < f.size(); ++cut) {
      auto r = c.decompress(bytes_view(f).first(cut), decode_limits{});
      if (r.code() != errc::truncated) {
        CAPTURE(cut);
        CHECK(r.code() == errc::truncated);
      }
    }
    std::vector<std::byte> out(s.size());
    auto rt = c.decompress_into(bytes_view(f).first(f.size() / 2), out, decode_limits{});
    CHECK(rt.code() == errc::truncated);
    CHECK(rt.error().message.find("frame truncated") != std::string::npos);
    if (checksum) {
      auto bad = f;
      bad[bad.size() - 1] ^= std::byte{1};
      // The frame's own checksum is part of the frame: decode_failed (docs/format.md), not checksum_mismatch.
      auto rb = c.decompress(bad, decode_limits{});
      CHECK(rb.code() == errc::decode_failed);
      CHECK(rb.error().message.find("content checksum") != std::string::npos);
      std::vector<std::byte> outb(s.size());
      CHECK(c.decompress_into(bad, outb, decode_limits{}).code() == errc::decode_failed);
    }
  }
  const auto g = random_bytes(1000, 9);
  auto r = zstd_codec().decompress(g, decode_limits{});
  CHECK(r.code() == errc::decode_failed);
  CHECK(r.error().message.find("Unknown frame descriptor") != std::string::npos);
  // Valid frame followed by trailing garbage.
  auto f = compress_with(zstd_codec(), as_bytes_view(s));
  append(f, bytes_view(g).first(10));
  CHECK(zstd_codec().decompress(f, decode_limits{}).code() == errc::decode_failed);
  // Corrupted block contents.
  std::mt19937 rng(1);
  int failures = 0;
  auto clean = compress_with(zstd_codec(), as_bytes_view(s));
  for (int i = 0; i < 200; ++i) {
    auto bad = clean;
    bad[8 + rng() % (bad.size() - 8)] ^= static_cast<std::byte>(1 + rng() % 255);
    auto rr = zstd_codec().decompress(bad, decode_limits{});
    if (!rr) {
      ++failures;
      CHECK((rr.code() == errc::decode_failed || rr.code() == errc::truncated || rr.code() == errc::limit_exceeded));
    }
  }
  CHECK(failures > 0);
}

TEST_CASE("frame window over max_zstd_window_log is rejected") {
  const std::string s = text_like(300000);
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, 24);
  ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
  byte_buffer f(ZSTD_compressBound(s.size()));
  // Two calls, so zstd cannot size the window from the whole input: the header keeps windowLog 24.
  ZSTD_inBuffer ib{s.data(), s.size() / 2, 0};
  ZSTD_outBuffer ob{f.data(), f.size(), 0};
  REQUIRE_FALSE(ZSTD_isError(ZSTD_compressStream2(c, &ob, &ib, ZSTD_e_continue)));
  REQUIRE(ib.pos == ib.size);
  ib = ZSTD_inBuffer{s.data(), s.size(), s.size() / 2};
  REQUIRE(ZSTD_compressStream2(c, &ob, &ib, ZSTD_e_end) == 0);
  ZSTD_freeCCtx(c);
  f.resize(ob.pos);
  decode_limits lim;
  lim.max_zstd_window_log = 20;
  auto r = zstd_codec().decompress(f, lim);
  CHECK(r.code() == errc::limit_exceeded);
  CHECK(r.error().message.find("max_zstd_window_log 20") != std::string::npos);
  std::vector<std::byte> out(s.size());
  CHECK(zstd_codec().decompress_into(f, out, lim).code() == errc::limit_exceeded);
  lim.max_zstd_window_log = 24;
  auto ok = zstd_codec().decompress(f, lim);
  REQUIRE(ok.has_value());
  CHECK(as_string_view(ok->bytes()) == s);
}

TEST_CASE("frame window over max_zstd_window_log is rejected when the frame declares its content size") {
  // libzstd decodes such a frame in one pass when the output has room, skipping ZSTD_d_windowLogMax; the
  // codec checks the header's window itself, for every frame, whatever the buffers.
  const std::string s = text_like(std::size_t{1} << 21);  // content 2 x 2 MiB > window: not one segment
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, 21);
  ZSTD_CCtx_setPledgedSrcSize(c, s.size() + s.size());  // declares the content size
  byte_buffer f(ZSTD_compressBound(2 * s.size()));
  ZSTD_inBuffer ib{s.data(), s.size(), 0};
  ZSTD_outBuffer ob{f.data(), f.size(), 0};
  REQUIRE_FALSE(ZSTD_isError(ZSTD_compressStream2(c, &ob, &ib, ZSTD_e_continue)));
  ib = ZSTD_inBuffer{s.data(), s.size(), 0};
  REQUIRE(ZSTD_compressStream2(c, &ob, &ib, ZSTD_e_end) == 0);
  ZSTD_freeCCtx(c);
  f.resize(ob.pos);
  ZSTD_frameHeader h{};
  REQUIRE(ZSTD_getFrameHeader(&h, f.data(), f.size()) == 0);
  REQUIRE(h.frameContentSize == 2 * s.size());
  REQUIRE(h.windowSize == (std::uint64_t{1} << 21));
  decode_limits lim;
  lim.max_zstd_window_log = 20;
  std::vector<std::byte> out(2 * s.size());
  auto r = zstd_codec().decompress_into(f, out, lim);
  CHECK(r.code() == errc::limit_exceeded);
  CHECK(r.error().message.find("max_zstd_window_log 20") != std::string::npos);
  CHECK(zstd_codec().decompress(f, lim).code() == errc::limit_exceeded);
  // Behind a small good frame the same frame is refused too (the check runs at every frame start).
  const auto small = compress_with(zstd_codec(), as_bytes_view(std::string("head")));
  byte_buffer two(small.begin(), small.end());
  append(two, f);
  std::vector<std::byte> out2(4 + 2 * s.size());
  CHECK(zstd_codec().decompress_into(two, out2, lim).code() == errc::limit_exceeded);
  lim.max_zstd_window_log = 21;
  REQUIRE(zstd_codec().decompress_into(f, out, lim).has_value());
  CHECK(std::memcmp(out.data(), s.data(), s.size()) == 0);
  CHECK(std::memcmp(out.data() + s.size(), s.data(), s.size()) == 0);
}

TEST_CASE("dictionary: train, load, round trip, smaller output, mismatch, threads") {
  std::vector<std::string> samples;
  std::mt19937 rng(42);
  static const char* objs[] = {"cat", "dog", "car", "tree", "house", "boat", "bird", "lamp"};
  for (int i = 0; i < 400; ++i)
    samples.push_back(std::string("{\"caption\":\"a high resolution photo of a ") + objs[rng() % 8] +
                      " next to a " + objs[rng() % 8] + "\",\"width\":" + std::to_string(256 + rng() % 4 * 256) +
                      ",\"height\":" + std::to_string(256 + rng() % 4 * 256) + ",\"aesthetic\":" +
                      std::to_string(rng() % 1000 / 100.0) + ",\"source\":\"laion-subset-" + std::to_string(rng() % 16) + "\"}");
  std::vector<bytes_view> views;
  for (auto& s : samples) views.push_back(as_bytes_view(s));
  auto dict = zstd_dictionary::create(views, 4096);
  REQUIRE_MESSAGE(dict.has_value(), (dict.code() == errc::ok ? std::string() : dict.error().message));
  CHECK(dict->id() != 0);
  CHECK(dict->bytes().size() <= 4096);

  const std::string fresh = "{\"caption\":\"a high resolution photo of a dog next to a boat\",\"width\":512,"
                            "\"height\":768,\"aesthetic\":6.100000,\"source\":\"laion-subset-3\"}";
  const auto with = compress_with(make_codec(3, 0, *dict), as_bytes_view(fresh));
  const auto without = compress_with(make_codec(3, 0), as_bytes_view(fresh));
  MESSAGE("sample " << fresh.size() << " B: with dict " << with.size() << " B, without " << without.size() << " B");
  CHECK(with.size() * 2 < without.size());
  CHECK(ZSTD_getDictID_fromFrame(with.data(), with.size()) == dict->id());

  auto back = make_codec(3, 0, *dict).decompress(with, decode_limits{});
  REQUIRE(back.has_value());
  CHECK(as_string_view(back->bytes()) == fresh);
  // The reference decoder with the same dictionary bytes reads it too.
  std::string ref(fresh.size(), '\0');
  ZSTD_DCtx* d = ZSTD_createDCtx();
  const std::size_t rn = ZSTD_decompress_usingDict(d, ref.data(), ref.size(), with.data(), with.size(),
                                                   dict->bytes().data(), dict->bytes().size());
  ZSTD_freeDCtx(d);
  CHECK(rn == fresh.size());
  CHECK(ref == fresh);

  auto reloaded = zstd_dictionary::parse(dict->bytes());
  REQUIRE(reloaded.has_value());
  CHECK(reloaded->id() == dict->id());
  CHECK(as_string_view(make_codec(3, 0, *reloaded).decompress(with, decode_limits{})->bytes()) == fresh);

  auto nodict = zstd_codec().decompress(with, decode_limits{});
  CHECK(nodict.code() == errc::decode_failed);
  CHECK(nodict.error().message.find("Dictionary mismatch") != std::string::npos);

  CHECK(zstd_dictionary::parse(bytes_view{}).code() == errc::invalid_argument);
  CHECK(zstd_dictionary::create({}, 4096).code() == errc::invalid_argument);
  std::vector<bytes_view> few(2, as_bytes_view(fresh));
  CHECK(zstd_dictionary::create(few, 4096).code() == errc::encode_failed);

  // Shared by several threads at several levels (CDict cache under its mutex, one context per thread).
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      const zstd_codec c = make_codec(1 + t % 2 * 2, t % 2 ? 2 : 0, *dict);
      for (int i = 0; i < 200; ++i) {
        const auto& s = samples[static_cast<std::size_t>(i * 4 + t) % samples.size()];
        byte_buffer out(zstd_codec::compress_bound(s.size()));
        auto n = c.compress(as_bytes_view(s), out);
        if (!n) { ++bad; continue; }
        std::string r(s.size(), '\0');
        auto m = c.decompress_into(bytes_view(out).first(*n), mutable_bytes(reinterpret_cast<std::byte*>(r.data()), r.size()), decode_limits{});
        if (!m || r != s) ++bad;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(bad == 0);
}
