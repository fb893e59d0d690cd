// Core: errors, dtypes (fp16/bf16 conversions), tensors and ownership, DLPack, hashing, thread pool.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>

#include "jitembed/core.hpp"

using namespace jitembed;

TEST_CASE("errc names are stable and result carries errors") {
  CHECK(to_string(errc::truncated) == "truncated");
  CHECK(to_string(errc::limit_exceeded) == "limit_exceeded");
  result<int> ok = 3;
  CHECK(ok.has_value());
  CHECK(*ok == 3);
  result<int> bad = fail(errc::corrupt_data, "field 2 offset 64 out of range");
  CHECK_FALSE(bad);
  CHECK(bad.code() == errc::corrupt_data);
  try {
    (void)bad.value();
    FAIL("value() of an error must throw");
  } catch (const error& e) {
    CHECK(e.code() == errc::corrupt_data);
    CHECK(std::string(e.what()) == "corrupt_data: field 2 offset 64 out of range");
  }
  result<void> v;
  CHECK(v.has_value());
  result<void> verr = fail(errc::io_error, "x");
  CHECK(verr.code() == errc::io_error);
}

TEST_CASE("dtype table") {
  CHECK(element_size(dtype::bf16) == 2);
  CHECK(element_size(dtype::i64) == 8);
  CHECK(element_size(dtype::boolean) == 1);
  for (int i = 0; i < kDtypeCount; ++i) {
    auto t = static_cast<dtype>(i);
    CHECK(dtype_from_string(to_string(t)) == t);
  }
  CHECK_FALSE(is_valid(static_cast<dtype>(200)));
}

TEST_CASE("float16 round trips every finite half exactly and rounds to nearest even") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = float16::from_bits(static_cast<std::uint16_t>(b));
    const float f = static_cast<float>(h);
    if (std::isnan(f)) continue;
    CHECK_MESSAGE(float16(f).bits == h.bits, "bits " << b);
  }
  CHECK(float16(1.0f).bits == 0x3c00);
  CHECK(float16(65504.0f).bits == 0x7bff);
  CHECK(float16(1e6f).bits == 0x7c00);               // overflow to inf
  CHECK(float16(1.0f + 1.0f / 2048).bits == 0x3c00); // tie goes to even
  CHECK(std::isnan(static_cast<float>(float16(NAN))));
}

TEST_CASE("bfloat16 rounds to nearest even") {
  CHECK(bfloat16(1.0f).bits == 0x3f80);
  CHECK(static_cast<float>(bfloat16(3.0f)) == 3.0f);
  const float tie = std::bit_cast<float>(0x3f808000u);  // halfway between 0x3f80 and 0x3f81
  CHECK(bfloat16(tie).bits == 0x3f80);
  CHECK(std::isnan(static_cast<float>(bfloat16(NAN))));
}

TEST_CASE("tensor storage is 64-byte aligned and shared") {
  tensor t = tensor::zeros({3, 5}, dtype::f32);
  CHECK(reinterpret_cast<std::uintptr_t>(t.data()) % 64 == 0);
  CHECK(t.numel() == 15);
  CHECK(t.nbytes() == 60);
  CHECK(t.is_contiguous());
  CHECK(t.strides() == shape{5, 1});
  tensor u = t;
  u.data<float>()[7] = 2.5f;
  CHECK(t.data<float>()[7] == 2.5f);
  auto r = t.reinterpret(dtype::u8, {60});
  REQUIRE(r);
  CHECK(r->data() == t.data());
  CHECK(t.reinterpret(dtype::u8, {61}).code() == errc::corrupt_data);
  CHECK_THROWS_AS(tensor::empty({-1, 3}, dtype::u8), error);
  CHECK_THROWS_AS(tensor::empty({1ll << 40, 1ll << 40}, dtype::f32), error);
}

TEST_CASE("checked_numel rejects overflow and negatives with specific codes") {
  const std::int64_t big[] = {1ll << 31, 1ll << 31, 1ll << 31};
  CHECK(checked_numel(big).code() == errc::shape_overflow);
  const std::int64_t neg[] = {2, -1};
  CHECK(checked_numel(neg).code() == errc::invalid_argument);
  const std::int64_t ok[] = {2, 3, 4};
  CHECK(*checked_numel(ok) == 24);
  const std::int64_t el[] = {1ll << 62};
  CHECK(checked_nbytes(el, dtype::f32).code() == errc::shape_overflow);
  // Exact and order-free: a zero extent does not hide the others (docs/format.md, field rule 2).
  const std::int64_t zero_last[] = {1ll << 40, 1ll << 40, 0};
  const std::int64_t zero_first[] = {0, 1ll << 40, 1ll << 40};
  CHECK(checked_numel(zero_last).code() == errc::shape_overflow);
  CHECK(checked_numel(zero_first).code() == errc::shape_overflow);
  CHECK(checked_numel(zero_first).error().message == "shape product overflows at dim 2");
  const std::int64_t zero_ok[] = {0, 1ll << 31, 1ll << 31};
  CHECK(*checked_numel(zero_ok) == 0);
  CHECK(*checked_nbytes(zero_ok, dtype::u8) == 0);
  CHECK(checked_nbytes(zero_ok, dtype::f32).code() == errc::shape_overflow);  // 2^62 * 4 byte strides
  const std::int64_t signed_edge[] = {1ll << 62, 2};
  CHECK(checked_numel(signed_edge).code() == errc::shape_overflow);  // 2^63: past int64
  const std::int64_t max_ok[] = {(1ll << 62) - 1, 2};
  CHECK(*checked_numel(max_ok) == (std::uint64_t{1} << 63) - 2);
  const std::int64_t neg_late[] = {1ll << 40, 1ll << 40, -1};
  CHECK(checked_numel(neg_late).code() == errc::invalid_argument);  // every extent is checked before the product
  const extent_product p = product_of_extents(zero_ok);
  CHECK(p.has_zero);
  CHECK(p.nonzero == std::uint64_t{1} << 62);
  CHECK(p.numel() == 0);
}

TEST_CASE("custom keep-alive runs its deleter when the last tensor goes") {
  static int freed = 0;
  freed = 0;
  {
    auto* raw = new float[4]{1, 2, 3, 4};
    std::shared_ptr<float> owner(raw, [](float* p) { delete[] p; ++freed; });
    tensor t = tensor::wrap(owner, tensor_view(raw, dtype::f32, {4}));
    owner.reset();
    CHECK(freed == 0);
    tensor copy = t;
    t = tensor();
    CHECK(freed == 0);
    CHECK(copy.data<float>()[3] == 4.0f);
  }
  CHECK(freed == 1);
}

TEST_CASE("strided views and clone") {
  tensor t = tensor::empty({2, 3}, dtype::i32);
  std::iota(t.data<std::int32_t>(), t.data<std::int32_t>() + 6, 0);
  // transpose view: shape [3,2], strides [1,3]
  tensor tt = tensor::wrap(t.owner(), tensor_view(t.data(), dtype::i32, {3, 2}, {1, 3}, device::cpu()));
  CHECK_FALSE(tt.is_contiguous());
  CHECK_THROWS_AS((void)tt.bytes(), error);
  tensor c = tt.clone();
  CHECK(c.is_contiguous());
  const std::int32_t expect[] = {0, 3, 1, 4, 2, 5};
  CHECK(std::memcmp(c.data(), expect, sizeof expect) == 0);
}

TEST_CASE("DLPack export/import shares storage and releases it") {
  tensor t = tensor::empty({2, 4}, dtype::bf16);
  DLManagedTensor* m = to_dlpack(t);
  CHECK(m->dl_tensor.data == t.data());
  CHECK(m->dl_tensor.dtype.code == kDLBfloat);
  CHECK(m->dl_tensor.ndim == 2);
  const void* p = t.data();
  t = tensor();  // the DLManagedTensor keeps the storage alive
  tensor back = from_dlpack(m);
  CHECK(back.data() == p);
  CHECK(back.dtype() == dtype::bf16);
  CHECK(back.shape() == shape{2, 4});

  // Foreign producer with null strides, byte_offset and its own deleter.
  static bool deleted = false;
  deleted = false;
  auto* storage = new std::int64_t[6]{0, 1, 2, 3, 4, 5};
  auto* foreign = new DLManagedTensor{};
  static std::int64_t fshape[] = {5};
  foreign->dl_tensor = DLTensor{storage, DLDevice{kDLCPU, 0}, 1, DLDataType{kDLInt, 64, 1}, fshape, nullptr, 8};
  foreign->manager_ctx = storage;
  foreign->deleter = [](DLManagedTensor* self) {
    delete[] static_cast<std::int64_t*>(self->manager_ctx);
    delete self;
    deleted = true;
  };
  {
    tensor f = from_dlpack(foreign);
    CHECK(f.data<std::int64_t>()[0] == 1);
    CHECK(f.is_contiguous());
  }
  CHECK(deleted);

  auto* bad = new DLManagedTensor{};
  bad->dl_tensor = DLTensor{nullptr, DLDevice{kDLCPU, 0}, 1, DLDataType{kDLFloat, 8, 1}, fshape, nullptr, 0};
  bad->deleter = [](DLManagedTensor* self) { delete self; };
  CHECK(try_from_dlpack(bad).code() == errc::dtype_mismatch);
}

TEST_CASE("XXH3-128: one-shot equals streaming, known vector") {
  const std::string s = "jitembed content address";
  const auto a = xxh3_128(as_bytes_view(s));
  hasher128 h;
  h.update(as_bytes_view(s.substr(0, 7))).update(as_bytes_view(s.substr(7)));
  CHECK(h.digest() == a);
  CHECK(a.to_hex().size() == 32);
  CHECK(xxh3_128(as_bytes_view("")).to_hex() == "99aa06d3014798d86001c324468d497f");
  CHECK_FALSE(xxh3_128(as_bytes_view("a")) == xxh3_128(as_bytes_view("b")));
}

TEST_CASE("thread pool runs every index once and propagates exceptions") {
  thread_pool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(hits.size(), [&](std::size_t i) { hits[i]++; });
  for (auto& h : hits) CHECK(h.load() == 1);
  auto f = pool.submit([] { return 42; });
  CHECK(f.get() == 42);
  CHECK_THROWS_AS(pool.parallel_for(10, [](std::size_t i) { if (i == 5) throw std::runtime_error("x"); }), std::runtime_error);
}

TEST_CASE("stack: rows into one [N, ...] tensor, mismatches named") {
  tensor a = tensor::empty(shape{2, 3}, dtype::f32), b = tensor::empty(shape{2, 3}, dtype::f32);
  for (int i = 0; i < 6; ++i) {
    a.data<float>()[i] = static_cast<float>(i);
    b.data<float>()[i] = static_cast<float>(10 + i);
  }
  const tensor* rows[] = {&a, &b};
  auto s = stack(rows);
  REQUIRE(s.has_value());
  CHECK(s->shape() == shape{2, 2, 3});
  CHECK(s->data<float>()[0] == 0.f);
  CHECK(s->data<float>()[6] == 10.f);
  CHECK(s->data<float>()[11] == 15.f);
  // a strided row is gathered
  tensor t = tensor::wrap(a.owner(), tensor_view(a.data(), dtype::f32, shape{2, 3}, shape{1, 2}, device::cpu()));
  const tensor* strided[] = {&a, &t};
  auto g = stack(strided);
  REQUIRE(g.has_value());
  CHECK(g->data<float>()[6] == 0.f);
  CHECK(g->data<float>()[7] == 2.f);
  tensor c = tensor::empty(shape{3, 2}, dtype::f32);
  const tensor* bad[] = {&a, &c};
  auto e = stack(bad);
  CHECK(e.code() == errc::invalid_argument);
  CHECK(e.error().message == "stack: row 1 is f32[3,2], row 0 is f32[2,3]");
  CHECK(stack(std::span<const tensor* const>{}).code() == errc::invalid_argument);
  const tensor* none[] = {&a, nullptr};
  CHECK(stack(none).code() == errc::invalid_argument);
}
