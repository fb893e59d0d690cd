// Cache values: round trips for every dtype (raw and shuffle+zstd), zero-copy decoding, corrupt values.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "jitembed/cache/value.hpp"

using namespace jitembed;
using namespace jitembed::cache;

namespace {

template <class T>
tensor make_tensor(const shape& s, std::uint32_t seed, bool smooth) {
  tensor t = tensor::empty(s, dtype_of_v<T>);
  auto* p = static_cast<std::byte*>(t.data());
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < t.nbytes(); ++i) {
    // Smooth data compresses (small steps after the shuffle), random data does not.
    p[i] = static_cast<std::byte>(smooth ? (i % element_size(t.dtype()) == 0 ? i / 64 : 0) : rng());
  }
  if constexpr (std::is_same_v<T, bool>) {
    for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<std::byte>(static_cast<unsigned>(p[i]) & 1u);
  }
  return t;
}

// Values live in a shared aligned buffer, as the memory store gives them.
cached_value as_cached(const byte_buffer& b) {
  auto buf = allocate_shared_aligned(b.size());
  std::memcpy(buf.get(), b.data(), b.size());
  return cached_value{bytes_view(buf.get(), b.size()), buf};
}

bool points_into(const tensor& t, bytes_view b) {
  const auto* p = static_cast<const std::byte*>(t.data());
  return p >= b.data() && p + t.nbytes() <= b.data() + b.size();
}

}  // namespace

TEST_CASE_TEMPLATE("cache value: round trip raw and zstd", T, std::uint8_t, std::int8_t, std::int16_t, std::int32_t,
                   std::int64_t, float16, bfloat16, float, double, bool) {
  const tensor a = make_tensor<T>({3, 5, 7}, 1, false);
  const tensor b = make_tensor<T>({130}, 2, true);
  for (auto c : {format::compression::raw, format::compression::zstd}) {
    CAPTURE(static_cast<int>(c));
    value_options opt;
    opt.compression = c;
    auto enc = encode_value({{"latent", a.view()}, {"pooled", b.view()}}, opt);
    REQUIRE(enc);
    const cached_value cv = as_cached(*enc);
    auto v = decode_value(cv);
    REQUIRE(v);
    CHECK(v->size() == 2);
    CHECK(v->names() == std::vector<std::string_view>{"latent", "pooled"});
    for (const auto& [name, ref] : {std::pair<std::string, tensor>{"latent", a}, {"pooled", b}}) {
      auto t = v->tensor(name);
      REQUIRE(t);
      CHECK(t->dtype() == dtype_of_v<T>);
      CHECK(t->shape() == ref.shape());
      REQUIRE(t->nbytes() == ref.nbytes());
      CHECK(std::memcmp(t->data(), ref.data(), ref.nbytes()) == 0);
    }
    const auto* fb = v->record().find("pooled");
    REQUIRE(fb);
    if (c == format::compression::zstd && element_size(dtype_of_v<T>) > 1) {
      CHECK(fb->codec() == codec::codec_id::zstd);  // smooth data compresses
      CHECK(fb->shuffle() == auto_shuffle(dtype_of_v<T>));
    }
    if (c == format::compression::raw) CHECK(fb->codec() == codec::codec_id::raw);
  }
}

TEST_CASE("cache value: raw tensors are zero-copy and keep the value bytes alive") {
  const tensor a = make_tensor<float>({16, 64}, 3, false);
  auto enc = encode_value({{"emb", a.view()}});
  REQUIRE(enc);
  cached_value cv = as_cached(*enc);
  const bytes_view bytes = cv.bytes;
  std::weak_ptr<const void> watch = cv.keep_alive;
  tensor t;
  {
    auto v = decode_value(cv);
    REQUIRE(v);
    t = v->tensor("emb").value();
  }
  CHECK(points_into(t, bytes));
  CHECK(reinterpret_cast<std::uintptr_t>(t.data()) % 64 == 0);
  cv = {};  // the tensor alone keeps the buffer
  CHECK_FALSE(watch.expired());
  CHECK(std::memcmp(t.data(), a.data(), a.nbytes()) == 0);
  t = {};
  CHECK(watch.expired());
}

TEST_CASE("cache value: zstd falls back to raw for incompressible tensors unless told not to") {
  const tensor noise = make_tensor<float>({1024}, 4, false);
  value_options opt;
  opt.compression = format::compression::zstd;
  auto enc = encode_value({{"emb", noise.view()}}, opt);
  REQUIRE(enc);
  auto v = decode_value(as_cached(*enc));
  REQUIRE(v);
  CHECK(v->record().find("emb")->codec() == codec::codec_id::raw);

  opt.raw_if_not_smaller = false;
  enc = encode_value({{"emb", noise.view()}}, opt);
  REQUIRE(enc);
  auto cv = as_cached(*enc);
  v = decode_value(cv);
  REQUIRE(v);
  CHECK(v->record().find("emb")->codec() == codec::codec_id::zstd);
  auto t = v->tensor("emb");
  REQUIRE(t);
  CHECK_FALSE(points_into(*t, cv.bytes));
  CHECK(std::memcmp(t->data(), noise.data(), noise.nbytes()) == 0);

  SUBCASE("explicit shuffle") {
    opt.shuffle = 0;
    const tensor smooth = make_tensor<float>({1024}, 5, true);
    enc = encode_value({{"emb", smooth.view()}}, opt);
    REQUIRE(enc);
    v = decode_value(as_cached(*enc));
    REQUIRE(v);
    CHECK(v->record().find("emb")->shuffle() == 0);
    CHECK(std::memcmp(v->tensor("emb")->data(), smooth.data(), smooth.nbytes()) == 0);
  }
}

TEST_CASE("cache value: encode errors") {
  const tensor a = make_tensor<float>({4, 4}, 6, false);
  SUBCASE("no tensors") {
    auto e = encode_value(std::span<const named_tensor>{});
    CHECK(e.code() == errc::invalid_argument);
  }
  SUBCASE("duplicate names") {
    auto e = encode_value({{"x", a.view()}, {"x", a.view()}});
    CHECK(e.code() == errc::invalid_argument);
    CHECK(e.error().message.find("duplicate field name 'x'") != std::string::npos);
  }
  SUBCASE("non-contiguous") {
    const tensor_view tv(a.data(), dtype::f32, shape{2, 2}, shape{8, 1}, device::cpu());
    for (auto c : {format::compression::raw, format::compression::zstd}) {
      value_options opt;
      opt.compression = c;
      CHECK(encode_value({{"x", tv}}, opt).code() == errc::invalid_argument);
    }
  }
  SUBCASE("bad shuffle") {
    value_options opt;
    opt.compression = format::compression::zstd;
    opt.shuffle = 3;
    CHECK(encode_value({{"x", a.view()}}, opt).code() == errc::invalid_argument);
  }
}

TEST_CASE("cache value: corrupt or foreign bytes are errors, never tensors") {
  const tensor a = make_tensor<float>({256}, 7, false);
  auto enc = encode_value({{"emb", a.view()}});
  REQUIRE(enc);
  const byte_buffer good = *enc;
  REQUIRE(decode_value(as_cached(good)));

  SUBCASE("payload byte flipped") {
    byte_buffer bad = good;
    bad[bad.size() - 100] ^= std::byte{0x10};  // inside the payload (1024 bytes at the end)
    auto v = decode_value(as_cached(bad));
    REQUIRE_FALSE(v);
    CHECK(v.code() == errc::checksum_mismatch);
    CHECK(v.error().message.rfind("cache value: ", 0) == 0);
    // Without verification the value parses, but decoding the tensor still checks.
    auto lazy = decode_value(as_cached(bad), {}, format::checksum_policy::skip);
    REQUIRE(lazy);
    CHECK(lazy->tensor("emb").code() == errc::checksum_mismatch);
  }
  SUBCASE("header byte flipped") {
    for (std::size_t off : {std::size_t{0}, std::size_t{24}, std::size_t{70}}) {
      byte_buffer bad = good;
      bad[off] ^= std::byte{0x01};
      auto v = decode_value(as_cached(bad));
      CHECK_FALSE(v);
    }
  }
  SUBCASE("truncated") {
    auto v = decode_value(cached_value{bytes_view(good.data(), good.size() - 64), nullptr});
    CHECK(v.code() == errc::truncated);
    CHECK(decode_value(cached_value{bytes_view(good.data(), 10), nullptr}).code() == errc::truncated);
    CHECK(decode_value(cached_value{}).code() == errc::truncated);
  }
  SUBCASE("every single-byte flip is detected") {
    for (std::size_t off = 0; off < good.size(); off += 7) {
      byte_buffer bad = good;
      bad[off] ^= std::byte{0x80};
      auto v = decode_value(as_cached(bad));
      CAPTURE(off);
      CHECK_FALSE(v);
    }
  }
  SUBCASE("a record whose field is not a tensor") {
    format::record_builder b;
    REQUIRE(b.add_text("caption", "a cat", 0));
    auto rec = b.finish();
    REQUIRE(rec);
    auto v = decode_value(as_cached(*rec));
    CHECK(v.code() == errc::corrupt_data);
    CHECK(v.error().message.find("'caption' is of kind text, not tensor") != std::string::npos);
  }
  SUBCASE("limits apply") {
    decode_limits lim;
    lim.max_record_bytes = 512;
    CHECK(decode_value(as_cached(good), lim).code() == errc::limit_exceeded);
  }
  SUBCASE("missing tensor name") {
    auto v = decode_value(as_cached(good));
    REQUIRE(v);
    CHECK(v->tensor("nope").code() == errc::not_found);
    CHECK_FALSE(v->contains("nope"));
    CHECK(v->contains("emb"));
  }
}
