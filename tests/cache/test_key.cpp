// Cache keys: the documented byte layout, sensitivity to every input, stability across processes, and the
// canonical preprocessing string.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <xxhash.h>

#include "jitembed/cache/key.hpp"

using namespace jitembed;
using namespace jitembed::cache;

namespace {

// The layout of docs/cache.md, built by hand and hashed with libxxhash directly.
struct layout_writer {
  std::string buf;
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) buf.push_back(static_cast<char>(v >> (8 * i)));
  }
  void part(std::string_view s) {
    u64(s.size());
    buf.append(s);
  }
  hash128 hash() const {
    const XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size());
    return {h.low64, h.high64};
  }
};

cache_key key_of(std::string_view m, std::string_view v, std::string_view p, std::string_view c) {
  return make_key(key_inputs{m, v, p, as_bytes_view(c)});
}

}  // namespace

TEST_CASE("cache key: matches the documented layout hashed by libxxhash") {
  layout_writer w;
  w.buf = "jitembed/cache-key";
  w.u64(1);  // key format version
  w.u64(1);  // single content
  w.part("clip-vit-l14");
  w.part("v1");
  w.part("bucket=224;");
  w.part("hello");
  CHECK(key_of("clip-vit-l14", "v1", "bucket=224;", "hello").hash == w.hash());

  layout_writer m;
  m.buf = "jitembed/cache-key";
  m.u64(1);
  m.u64(2);  // named fields
  m.part("vlm");
  m.part("2024-06");
  m.part("");
  m.u64(2);
  m.part("caption");
  m.part("a cat");
  m.part("image");
  m.part("JPEGBYTES");
  const key_field fields[] = {{"image", as_bytes_view("JPEGBYTES")}, {"caption", as_bytes_view("a cat")}};
  auto k = make_key({"vlm", "2024-06", "", fields});
  REQUIRE(k);
  CHECK(k->hash == m.hash());
}

TEST_CASE("cache key: golden value (a layout change must bump kKeyFormatVersion and this value)") {
  const cache_key k = key_of("clip-vit-l14", "v1", "bucket=224;", "hello");
  CHECK(k.to_hex() == "3ad59e464f280a59b83881657d13ce56");
  const auto b = k.bytes();
  CHECK(std::to_integer<unsigned>(b[0]) == (k.hash.low & 0xff));
  CHECK(std::to_integer<unsigned>(b[8]) == (k.hash.high & 0xff));
}

TEST_CASE("cache key: changing any input by one byte changes the key") {
  const std::string model = "sdxl-vae", version = "sha256:abcd", pre = "bucket=256;frame_stride=4;";
  std::string content(1000, '\0');
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 31 + 7);
  const cache_key base = key_of(model, version, pre, content);
  CHECK(key_of(model, version, pre, content) == base);

  auto flip = [](std::string s, std::size_t i) {
    s[i] = static_cast<char>(s[i] ^ 1);
    return s;
  };
  SUBCASE("model") {
    for (std::size_t i = 0; i < model.size(); ++i) CHECK(key_of(flip(model, i), version, pre, content) != base);
  }
  SUBCASE("version") {
    for (std::size_t i = 0; i < version.size(); ++i) CHECK(key_of(model, flip(version, i), pre, content) != base);
  }
  SUBCASE("preprocess") {
    for (std::size_t i = 0; i < pre.size(); ++i) CHECK(key_of(model, version, flip(pre, i), content) != base);
  }
  SUBCASE("content") {
    for (std::size_t i : {std::size_t{0}, std::size_t{1}, std::size_t{499}, std::size_t{999}})
      CHECK(key_of(model, version, pre, flip(content, i)) != base);
    CHECK(key_of(model, version, pre, content + '\0') != base);
    CHECK(key_of(model, version, pre, content.substr(0, 999)) != base);
  }
}

TEST_CASE("cache key: length prefixes stop bytes moving between parts") {
  CHECK(key_of("ab", "c", "", "") != key_of("a", "bc", "", ""));
  CHECK(key_of("a", "", "b", "") != key_of("a", "b", "", ""));
  CHECK(key_of("", "", "", "x") != key_of("", "", "x", ""));
  CHECK(key_of("", "", "", "") != key_of("", "", "", std::string_view("\0", 1)));
}

TEST_CASE("cache key: named fields") {
  const key_field ab[] = {{"image", as_bytes_view("img")}, {"caption", as_bytes_view("cap")}};
  const key_field ba[] = {{"caption", as_bytes_view("cap")}, {"image", as_bytes_view("img")}};
  auto k1 = make_key({"m", "v", "p", ab});
  auto k2 = make_key({"m", "v", "p", ba});
  REQUIRE(k1);
  REQUIRE(k2);
  CHECK(*k1 == *k2);  // order-independent

  const key_field swapped[] = {{"image", as_bytes_view("cap")}, {"caption", as_bytes_view("img")}};
  CHECK(*make_key({"m", "v", "p", swapped}) != *k1);
  const key_field renamed[] = {{"image", as_bytes_view("img")}, {"captioN", as_bytes_view("cap")}};
  CHECK(*make_key({"m", "v", "p", renamed}) != *k1);

  // One named field is not the single-content key of the same bytes.
  const key_field one[] = {{"image", as_bytes_view("img")}};
  CHECK(*make_key({"m", "v", "p", one}) != key_of("m", "v", "p", "img"));

  const key_field dup[] = {{"image", as_bytes_view("a")}, {"image", as_bytes_view("b")}};
  auto bad = make_key({"m", "v", "p", dup});
  REQUIRE_FALSE(bad);
  CHECK(bad.code() == errc::invalid_argument);
  CHECK(bad.error().message.find("'image' given twice") != std::string::npos);
}

TEST_CASE("cache key: equal inputs give equal keys in another process") {
  const std::string content(4096, 'q');
  const cache_key parent = key_of("t5-xxl", "1.1", "max_text_length=512;", content);
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    const std::string hex = key_of("t5-xxl", "1.1", "max_text_length=512;", std::string(4096, 'q')).to_hex();
    const ssize_t n = write(fds[1], hex.data(), hex.size());
    _exit(n == static_cast<ssize_t>(hex.size()) ? 0 : 1);
  }
  close(fds[1]);
  char buf[64] = {};
  std::size_t got = 0;
  while (got < 32) {
    const ssize_t n = read(fds[0], buf + got, sizeof buf - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(std::string(buf, got) == parent.to_hex());
}

TEST_CASE("preprocess_params: canonical string") {
  SUBCASE("sorted by name, independent of insertion order") {
    const std::string a = preprocess_params{}.set("bucket", 256).set("frame_stride", 4).str();
    const std::string b = preprocess_params{}.set("frame_stride", 4).set("bucket", 256).str();
    CHECK(a == "bucket=256;frame_stride=4;");
    CHECK(a == b);
    CHECK(preprocess_params{}.str().empty());
  }
  SUBCASE("numbers have one spelling whatever their C++ type") {
    CHECK(preprocess_params{}.set("x", 256).str() == preprocess_params{}.set("x", std::uint64_t{256}).str());
    CHECK(preprocess_params{}.set("x", 256.0).str() == "x=256;");
    CHECK(preprocess_params{}.set("x", 0.1f).str() == "x=0.1;");
    CHECK(preprocess_params{}.set("x", 0.1).str() == "x=0.1;");
    CHECK(preprocess_params{}.set("x", -3).str() == "x=-3;");
    CHECK(preprocess_params{}.set("x", -0.0).str() == "x=0;");
    CHECK(preprocess_params{}.set("x", 1e20).str() == "x=1e+20;");
    CHECK(preprocess_params{}.set("x", std::numeric_limits<double>::quiet_NaN()).str() == "x=nan;");
    CHECK(preprocess_params{}.set("x", -std::numeric_limits<float>::infinity()).str() == "x=-inf;");
    CHECK(preprocess_params{}.set("x", std::numeric_limits<std::int64_t>::min()).str() == "x=-9223372036854775808;");
    CHECK(preprocess_params{}.set("x", true).str() == "x=true;");
    CHECK(preprocess_params{}.set("bucket", {256, 384}).str() == "bucket=256,384;");
  }
  SUBCASE("strings are escaped, so no value can forge another parameter") {
    CHECK(preprocess_params{}.set("tok", "a;b=c\\").str() == "tok=a\\;b\\=c\\\\;");
    CHECK(preprocess_params{}.set("a", "1;b=2").str() != preprocess_params{}.set("a", "1").set("b", "2").str());
    CHECK(preprocess_params{}.set("a=b", "c").str() == "a\\=b=c;");
  }
  SUBCASE("set replaces, erase and contains") {
    preprocess_params p;
    p.set("bucket", 256).set("bucket", 512).set("crop", "center");
    CHECK(p.size() == 2);
    CHECK(p.str() == "bucket=512;crop=center;");
    CHECK(p.contains("crop"));
    CHECK(p.erase("crop"));
    CHECK_FALSE(p.erase("crop"));
    CHECK(p.str() == "bucket=512;");
  }
  SUBCASE("empty name throws invalid_argument") {
    try {
      preprocess_params{}.set("", 1);
      FAIL("no throw");
    } catch (const jitembed::error& e) {
      CHECK(e.code() == errc::invalid_argument);
    }
  }
  SUBCASE("the string feeds the key") {
    const auto p1 = preprocess_params{}.set("bucket", 256).str();
    const auto p2 = preprocess_params{}.set("bucket", 257).str();
    CHECK(key_of("m", "v", p1, "c") != key_of("m", "v", p2, "c"));
  }
}
