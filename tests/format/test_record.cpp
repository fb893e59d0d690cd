// Records: round trips of every kind and dtype, zero-copy, gather == write, limits, malformed input,
// versioning.
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>

#include "format/format_test_util.hpp"

using namespace fmt_test;

namespace {

template <class T>
tensor iota_tensor(const shape& s) {
  tensor t = tensor::empty(s, dtype_of_v<T>);
  auto* p = t.data<T>();
  for (std::size_t i = 0; i < t.numel(); ++i) {
    if constexpr (std::is_same_v<T, float16>) p[i] = float16(static_cast<float>(i % 1000) * 0.25f);
    else if constexpr (std::is_same_v<T, bfloat16>) p[i] = bfloat16(static_cast<float>(i % 1000) * 0.5f);
    else if constexpr (std::is_same_v<T, bool>) p[i] = (i % 3) == 0;
    else p[i] = static_cast<T>((i * 7) % 101);
  }
  return t;
}

bool same_bytes(bytes_view a, bytes_view b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

// A small record with every kind: the subject of the truncation / bit-flip sweeps.
struct small_record {
  byte_buffer jpeg = random_bytes(100, 1);
  std::string caption = "a cat sitting on a mat, photographed from above";
  tensor tokens = iota_tensor<std::int32_t>({7});
  tensor latent = iota_tensor<float16>({2, 3, 4});
  byte_buffer buf;
  small_record() {
    record_builder b;
    b.add_image("jpg", jpeg).value();
    b.add_text("txt", caption, 0).value();
    b.add_tensor("tokens", tokens, tensor_encoding::zstd(3, 4)).value();
    b.add_tensor("latent", latent).value();
    b.add_json("json", R"({"w":4})").value();
    buf = b.finish().value();
  }
};

struct fake_image_codec {  // models codec::codec with id jpeg: "decodes" to a 2x2x3 u8 tensor
  static constexpr codec::codec_id id = codec::codec_id::jpeg;
  mutable const std::byte* seen = nullptr;
  result<std::size_t> max_encoded_size(const tensor_view& v) const { return v.nbytes(); }
  result<std::size_t> encode(const tensor_view& v, mutable_bytes out) const {
    std::memcpy(out.data(), v.data(), v.nbytes());
    return v.nbytes();
  }
  result<tensor> decode(bytes_view in, const decode_limits&) const {
    seen = in.data();
    if (in.size() != 12) return fail(errc::decode_failed, "fake: need 12 bytes");
    return tensor::copy_of(in, dtype::u8, {2, 2, 3});
  }
};
static_assert(codec::codec<fake_image_codec>);

}  // namespace

TEST_CASE_TEMPLATE("record round trip: every dtype, raw and zstd with shuffle", T, std::uint8_t, std::int8_t, std::int16_t,
                   std::int32_t, std::int64_t, float16, bfloat16, float, double, bool) {
  const tensor t = iota_tensor<T>({3, 5, 7});
  const std::uint8_t shuffle = element_size(dtype_of_v<T>) == 1 ? 0 : static_cast<std::uint8_t>(element_size(dtype_of_v<T>));
  record_builder b;
  REQUIRE(b.add_tensor("raw", t));
  REQUIRE(b.add_tensor("z", t, tensor_encoding::zstd(3)));
  REQUIRE(b.add_tensor("zs", t, tensor_encoding::zstd(1, shuffle)));
  const tensor scalar = iota_tensor<T>({}), empty = iota_tensor<T>({0, 4});  // referenced: must outlive finish()
  REQUIRE(b.add_tensor("scalar", scalar));
  REQUIRE(b.add_tensor("empty", empty));
  auto buf = b.finish().value();
  CHECK(buf.size() == b.encoded_size());
  auto r = record_view::parse(buf).value();
  REQUIRE(r.size() == 5);
  REQUIRE(r.verify());
  for (const auto& f : r) {
    CHECK(f.kind() == field_kind::tensor);
    CHECK(f.dtype() == dtype_of_v<T>);
    auto d = f.decode().value();
    CHECK(d.dtype() == dtype_of_v<T>);
    CHECK(d.shape() == f.shape());
  }
  CHECK(r.field(0).codec() == codec::codec_id::raw);
  CHECK(r.field(1).codec() == codec::codec_id::zstd);
  CHECK(r.field(2).shuffle() == shuffle);
  for (int i = 0; i < 3; ++i) {
    auto d = r.field(i).decode().value();
    CHECK(d.shape() == t.shape());
    CHECK(same_bytes(d.bytes(), t.bytes()));
  }
  CHECK(r.field(3).shape().size() == 0);
  CHECK(same_bytes(r.field(3).decode().value().bytes(), scalar.bytes()));
  CHECK(r.field(4).decode().value().numel() == 0);
}

TEST_CASE("add_text: compressed only when that saves a 64-byte block, a text of one block is never") {
  for (std::size_t n : {std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{65}, std::size_t{200}}) {
    const std::string text(n, 'a');  // as compressible as text gets
    record_builder b;
    REQUIRE(b.add_text("t", text));
    auto buf = b.finish().value();
    auto r = record_view::parse(buf).value();
    const auto& f = *r.find("t");
    CHECK(f.codec() == (n > 64 ? codec::codec_id::text : codec::codec_id::raw));
    CHECK(f.text().value() == text);
  }
}

TEST_CASE("record round trip: every field kind") {
  const byte_buffer jpeg = random_bytes(5000, 2), clip = random_bytes(7000, 3), blob = random_bytes(300, 4);
  std::string long_text;
  for (int i = 0; i < 200; ++i) long_text += "the quick brown fox jumps over the lazy dog, ünïcödé ✓ ";
  const std::string short_text = "a dog";
  const std::string json = R"({"width": 512, "height": 384, "tags": ["cat", "mat"]})";
  record_builder b;
  REQUIRE(b.add_image("jpg", jpeg));
  REQUIRE(b.add_video("mp4", clip));
  REQUIRE(b.add_text("caption", long_text));
  REQUIRE(b.add_text("short", short_text));
  REQUIRE(b.add_json("meta", json));
  REQUIRE(b.add_json("metaz", json, compression::zstd));
  REQUIRE(b.add_bytes("blob", blob));
  REQUIRE(b.add_bytes("blobz", blob, compression::zstd, 5));
  auto buf = b.finish().value();
  auto r = record_view::parse(buf).value();
  REQUIRE(r.size() == 8);
  CHECK(r.verify());
  CHECK(r.major() == 1);
  CHECK(r.minor() == 0);

  const auto& img = *r.find("jpg");
  CHECK(img.kind() == field_kind::image);
  CHECK(img.codec() == codec::codec_id::jpeg);
  CHECK(img.decoded_size() == 0);
  CHECK(same_bytes(img.payload(), jpeg));
  CHECK(img.decode().code() == errc::unsupported_codec);  // images go through decode_with
  const auto& vid = *r.find("mp4");
  CHECK(vid.kind() == field_kind::video);
  CHECK(vid.codec() == codec::codec_id::video);
  CHECK(same_bytes(vid.payload(), clip));

  const auto& cap = *r.find("caption");
  CHECK(cap.kind() == field_kind::text);
  CHECK(cap.codec() == codec::codec_id::text);  // compressible: stored with the text codec
  CHECK(cap.payload().size() < long_text.size());
  CHECK(cap.text().value() == long_text);
  CHECK(as_string_view(cap.decode().value().bytes()) == long_text);
  const auto& sh = *r.find("short");
  CHECK(sh.codec() == codec::codec_id::raw);  // 5 bytes do not compress: stored raw
  CHECK(sh.text().value() == short_text);
  CHECK(r.find("meta")->kind() == field_kind::json);
  CHECK(r.find("meta")->text().value() == json);
  CHECK(r.find("metaz")->codec() == codec::codec_id::zstd);
  CHECK(r.find("metaz")->text().value() == json);
  CHECK(same_bytes(r.find("blob")->decode().value().bytes(), blob));
  CHECK(same_bytes(r.find("blobz")->decode().value().bytes(), blob));
  CHECK(r.find("blob")->decode().value().shape() == shape{300});
  CHECK(r.find("nope") == nullptr);
  CHECK(r.get("nope").code() == errc::not_found);
  CHECK(r.find("blob")->text().code() == errc::invalid_utf8);  // random bytes are not UTF-8
}

TEST_CASE("decode_with any codec: codec id, declared shape, payload pointer") {
  byte_buffer px(12);
  for (std::size_t i = 0; i < 12; ++i) px[i] = static_cast<std::byte>(i);
  fake_image_codec c;
  record_builder b;
  REQUIRE(b.add_image("plain", px));
  encoded_info hint;
  hint.shape = {2, 2, 3};
  hint.decoded_size = 12;
  REQUIRE(b.add_encoded("hinted", field_kind::image, codec::codec_id::jpeg, px, hint));
  hint.shape = {3, 2, 2};
  REQUIRE(b.add_encoded("wrong_hint", field_kind::image, codec::codec_id::jpeg, px, hint));
  const tensor src = tensor::copy_of(px, dtype::u8, {2, 2, 3});
  REQUIRE(b.add_encoded_with("encoded", field_kind::image, c, src));
  REQUIRE(b.add_video("clip", px));
  auto buf = b.finish().value();
  auto r = record_view::parse(buf).value();
  auto t = r.find("plain")->decode_with(c).value();
  CHECK(c.seen == r.find("plain")->payload().data());
  CHECK(t.shape() == shape{2, 2, 3});
  CHECK(r.find("hinted")->decode_with(c).has_value());
  CHECK(r.find("wrong_hint")->decode_with(c).code() == errc::corrupt_data);
  CHECK(r.find("encoded")->shape() == shape{2, 2, 3});
  CHECK(same_bytes(r.find("encoded")->decode_with(c).value().bytes(), px));
  CHECK(r.find("clip")->decode_with(c).code() == errc::unsupported_codec);  // stored video, codec is jpeg
}

TEST_CASE("zero copy: payloads and raw tensors point into the record, keep_alive outlives the caller") {
  const tensor lat = iota_tensor<float>({4, 64, 64});
  record_builder b;
  REQUIRE(b.add_text("txt", "hello", 0));
  REQUIRE(b.add_tensor("latent", lat));
  auto owner = std::make_shared<byte_buffer>(b.finish().value());
  const std::byte* base = owner->data();
  std::weak_ptr<byte_buffer> weak = owner;
  tensor decoded;
  {
    auto r = record_view::parse(*owner, {}, owner).value();
    const auto& f = *r.find("latent");
    CHECK(reinterpret_cast<std::uintptr_t>(f.payload().data()) % 64 == 0);
    CHECK(f.payload().data() >= base);
    CHECK(f.payload().data() + f.payload().size() <= base + owner->size());
    CHECK(r.find("txt")->payload().data() == base + 64 * ((r.find("txt")->payload().data() - base) / 64));
    decoded = f.decode().value();
    CHECK(decoded.data() == f.payload().data());  // no copy
    CHECK(decoded.shape() == lat.shape());
    owner.reset();  // the caller drops its buffer; the record_view and the tensor keep it
    CHECK_FALSE(weak.expired());
  }
  CHECK_FALSE(weak.expired());  // the tensor alone keeps it
  CHECK(same_bytes(decoded.bytes(), lat.bytes()));
  decoded = tensor();
  CHECK(weak.expired());
}

TEST_CASE("raw payload views are referenced until write, gather() == write() == finish()") {
  byte_buffer big = random_bytes(100000, 5);
  const tensor tok = iota_tensor<std::int32_t>({77});
  record_builder b;
  REQUIRE(b.add_bytes("big", big));
  REQUIRE(b.add_tensor("tok", tok, tensor_encoding::zstd(3, 4)));
  REQUIRE(b.add_text("txt", "caption text", 0));
  const tensor empty = tensor::empty({0}, dtype::f32);
  REQUIRE(b.add_tensor("empty", empty));
  big[10] = std::byte{0x5a};  // changed after add: the record carries the new byte (referenced, not copied)
  auto g = b.gather().value();
  CHECK(g.size == b.encoded_size());
  bool references_big = false;
  for (auto p : g.pieces) references_big |= p.data() == big.data();
  CHECK(references_big);
  const auto joined = g.join();
  byte_buffer written(b.encoded_size() + 100, std::byte{0xee});
  CHECK(b.write(written).value() == b.encoded_size());
  CHECK(same_bytes(bytes_view(written).first(g.size), joined));
  CHECK(same_bytes(b.finish().value(), joined));
  auto r = record_view::parse(joined).value();
  CHECK(r.verify());
  CHECK(r.find("big")->payload()[10] == std::byte{0x5a});
  byte_buffer small(b.encoded_size() - 1);
  CHECK(b.write(small).code() == errc::buffer_too_small);
}

TEST_CASE("builder rejects bad input") {
  record_builder b;
  CHECK(b.add_bytes("", random_bytes(4, 1)).code() == errc::invalid_argument);
  REQUIRE(b.add_bytes("a", random_bytes(4, 1)));
  CHECK(b.add_bytes("a", random_bytes(4, 1)).code() == errc::invalid_argument);  // duplicate
  CHECK(b.add_text("t", "\xff\xfe").code() == errc::invalid_utf8);
  CHECK(b.add_tensor("s", iota_tensor<float>({8}), tensor_encoding{compression::zstd, 3, 3}).code() == errc::invalid_argument);
  const tensor t = iota_tensor<float>({4, 4});
  const tensor_view strided(t.data(), dtype::f32, {4, 2}, {4, 2}, device::cpu());
  CHECK(b.add_tensor("strided", strided).code() == errc::invalid_argument);
  encoded_info bad;
  bad.shape = {2, 2};
  bad.dtype = dtype::f32;
  bad.decoded_size = 99;  // != 16
  CHECK(b.add_encoded("x", field_kind::tensor, codec::codec_id::raw, random_bytes(16, 1), bad).code() == errc::corrupt_data);
  CHECK(b.add_encoded("y", field_kind::tensor, codec::codec_id::jpeg, random_bytes(16, 1)).code() == errc::unsupported_codec);
  CHECK(b.size() == 1);
}

TEST_CASE("layout matches docs/format.md byte for byte") {
  record_builder b;
  const tensor t = iota_tensor<std::int16_t>({2, 3});
  REQUIRE(b.add_tensor("ab", t));
  auto buf = b.finish().value();
  // header
  CHECK(rd<std::uint32_t>(buf, 0) == 0x524d454au);  // "JEMR"
  CHECK(std::memcmp(buf.data(), "JEMR", 4) == 0);
  CHECK(rd<std::uint16_t>(buf, 4) == 1);
  CHECK(rd<std::uint16_t>(buf, 6) == 0);
  CHECK(rd<std::uint16_t>(buf, 8) == 64);
  CHECK(rd<std::uint16_t>(buf, 10) == 48);
  CHECK(rd<std::uint32_t>(buf, 12) == 1);
  CHECK(rd<std::uint32_t>(buf, 16) == 0);
  CHECK(rd<std::uint32_t>(buf, 20) == 64 + 48 + 24);  // dims 2*8 + name 2 = 18 -> 24
  CHECK(rd<std::uint64_t>(buf, 24) == 256);           // meta 136 -> 192, payload 12 -> 64
  CHECK(buf.size() == 256);
  const auto h = detail::meta_checksum(buf.data(), 136);
  CHECK(rd<std::uint64_t>(buf, 48) == h.low);
  CHECK(rd<std::uint64_t>(buf, 56) == h.high);
  CHECK(h.low == xxh3_128(bytes_view(buf.data() + 64, 72), xxh3_64(bytes_view(buf.data(), 48))).low);
  // entry
  CHECK(rd<std::uint64_t>(buf, 64) == 192);  // payload at align64(meta)
  CHECK(rd<std::uint64_t>(buf, 72) == 12);
  CHECK(rd<std::uint64_t>(buf, 80) == 12);
  CHECK(rd<std::uint64_t>(buf, 88) == xxh3_64(t.bytes()));
  CHECK(rd<std::uint32_t>(buf, 96) == 112);
  CHECK(rd<std::uint16_t>(buf, 100) == 2);
  CHECK(static_cast<int>(buf[102]) == 4);  // kind tensor
  CHECK(static_cast<int>(buf[103]) == 0);  // codec raw
  CHECK(static_cast<int>(buf[104]) == 2);  // dtype i16
  CHECK(static_cast<int>(buf[105]) == 2);  // rank
  CHECK(rd<std::int64_t>(buf, 112) == 2);
  CHECK(rd<std::int64_t>(buf, 120) == 3);
  CHECK(std::memcmp(buf.data() + 128, "ab", 2) == 0);
  CHECK(detail::all_zero(buf.data() + 136, 192 - 136));
  CHECK(std::memcmp(buf.data() + 192, t.data(), 12) == 0);
  CHECK(detail::all_zero(buf.data() + 204, 256 - 204));
}

TEST_CASE("empty record") {
  record_builder b;
  auto buf = b.finish().value();
  CHECK(buf.size() == 64);
  auto r = record_view::parse(buf).value();
  CHECK(r.size() == 0);
  CHECK(r.verify());
}

TEST_CASE("limits: lying shapes, field counts and names are rejected before allocation") {
  record_builder b;
  const tensor four = iota_tensor<float>({4});  // referenced by the builder until finish()
  REQUIRE(b.add_tensor("t", four));
  const auto good = b.finish().value();
  const std::size_t e = entry_at(0);
  const std::size_t dims = rd<std::uint32_t>(good, e + detail::kEExtraOffset);

  SUBCASE("2^60 elements") {
    auto buf = good;
    wr<std::int64_t>(buf, dims, std::int64_t{1} << 60);
    reseal(buf);
    auto r = record_view::parse(buf);
    CHECK(r.code() == errc::limit_exceeded);
    CHECK(r.error().message.find("field 0") != std::string::npos);
    CHECK(r.error().message.find("max_elements") != std::string::npos);
  }
  SUBCASE("shape product overflows 64 bits") {
    auto buf = good;
    // rank 1 -> a product of 2^62 elements * 4 bytes overflows; allow the elements so the byte size check runs
    wr<std::int64_t>(buf, dims, std::int64_t{1} << 62);
    reseal(buf);
    decode_limits lim;
    lim.max_elements = ~std::uint64_t{0};
    CHECK(record_view::parse(buf, lim).code() == errc::shape_overflow);
  }
  SUBCASE("negative extent") {
    auto buf = good;
    wr<std::int64_t>(buf, dims, -4);
    reseal(buf);
    CHECK(record_view::parse(buf).code() == errc::corrupt_data);
  }
  SUBCASE("10^6 fields") {
    auto buf = good;
    wr<std::uint32_t>(buf, detail::kHFieldCount, 1000000);
    reseal(buf);
    auto r = record_view::parse(buf);
    CHECK(r.code() == errc::limit_exceeded);
    CHECK(r.error().message.find("max_fields") != std::string::npos);
  }
  SUBCASE("huge name") {
    auto buf = good;
    wr<std::uint16_t>(buf, e + detail::kENameSize, 60000);
    reseal(buf);
    auto r = record_view::parse(buf);
    CHECK(r.code() == errc::limit_exceeded);
    CHECK(r.error().message.find("max_name_bytes") != std::string::npos);
  }
  SUBCASE("name runs past the table") {
    auto buf = good;
    wr<std::uint16_t>(buf, e + detail::kENameSize, 200);
    reseal(buf);
    auto r = record_view::parse(buf);
    CHECK(r.code() == errc::corrupt_data);
    CHECK(r.error().message.find("past the table") != std::string::npos);
  }
  SUBCASE("rank above max_dims") {
    auto buf = good;
    buf[e + detail::kERank] = std::byte{9};
    reseal(buf);
    CHECK(record_view::parse(buf).code() == errc::limit_exceeded);
  }
  SUBCASE("record bigger than max_record_bytes") {
    decode_limits lim;
    lim.max_record_bytes = 128;
    CHECK(record_view::parse(good, lim).code() == errc::limit_exceeded);
  }
  SUBCASE("decode under stricter limits than parse") {
    auto r = record_view::parse(good).value();
    decode_limits lim;
    lim.max_decoded_bytes = 8;
    CHECK(r.field(0).decode(lim).code() == errc::limit_exceeded);
  }
}

TEST_CASE("malformed records: specific errors") {
  small_record s;
  const auto& good = s.buf;
  REQUIRE(record_view::parse(good));
  const std::size_t e1 = entry_at(1);

  SUBCASE("bad magic / random bytes") {
    auto buf = good;
    buf[0] = std::byte{'X'};
    CHECK(record_view::parse(buf).code() == errc::bad_magic);
    for (std::uint32_t seed = 0; seed < 50; ++seed) {
      auto rnd = random_bytes(64 + seed * 13, seed);
      CHECK(record_view::parse(rnd).code() == errc::bad_magic);
      std::memcpy(rnd.data(), "JEMR", 4);
      wr<std::uint16_t>(rnd, 4, 1);
      CHECK_FALSE(record_view::parse(rnd));
    }
  }
  SUBCASE("unknown major") {
    auto buf = good;
    wr<std::uint16_t>(buf, 4, 2);
    CHECK(record_view::parse(buf).code() == errc::unsupported_version);
  }
  SUBCASE("header checksum") {
    auto buf = good;
    buf[entry_at(0) + detail::kEDecodedSize] ^= std::byte{1};
    auto r = record_view::parse(buf);
    CHECK(r.code() == errc::checksum_mismatch);
    CHECK(r.error().message.find("offset 48") != std::string::npos);
  }
  SUBCASE("lying payload length") {
    auto buf = good;
    wr<std::uint64_t>(buf, e1 + detail::kEPayloadSize, 1u << 20);
    reseal(buf);
    auto r = record_view::parse(buf);
    CHECK(r.code() == errc::corrupt_data);
    CHECK(r.error().message.find("field 1") != std::string::npos);
  }
  SUBCASE("misaligned payload offset") {
    auto buf = good;
    wr<std::uint64_t>(buf, e1, rd<std::uint64_t>(buf, e1) + 8);
    reseal(buf);
    auto r = record_view::parse(buf);
    CHECK(r.code() == errc::corrupt_data);
    CHECK(r.error().message.find("multiple of 64") != std::string::npos);
  }
  SUBCASE("overlapping payloads") {
    auto buf = good;
    wr<std::uint64_t>(buf, e1, rd<std::uint64_t>(buf, entry_at(0)));
    reseal(buf);
    auto r = record_view::parse(buf);
    CHECK(r.code() == errc::corrupt_data);
    CHECK(r.error().message.find("overlaps") != std::string::npos);
  }
  SUBCASE("bad kind / codec / dtype bytes") {
    auto buf = good;
    buf[e1 + detail::kEKind] = std::byte{77};
    reseal(buf);
    CHECK(record_view::parse(buf).code() == errc::corrupt_data);
    buf = good;
    buf[e1 + detail::kECodec] = std::byte{77};
    reseal(buf);
    CHECK(record_view::parse(buf).code() == errc::unsupported_codec);
    buf = good;
    buf[entry_at(3) + detail::kEDtype] = std::byte{77};
    reseal(buf);
    CHECK(record_view::parse(buf).code() == errc::corrupt_data);
  }
  SUBCASE("duplicate names") {
    auto buf = good;
    const auto n0 = rd<std::uint32_t>(buf, entry_at(0) + detail::kEExtraOffset);
    const auto n1 = rd<std::uint32_t>(buf, entry_at(1) + detail::kEExtraOffset);
    std::memcpy(buf.data() + n1, buf.data() + n0, 3);  // "txt" -> "jpg"
    reseal(buf);
    auto r = record_view::parse(buf);
    CHECK(r.code() == errc::corrupt_data);
    CHECK(r.error().message.find("share the name") != std::string::npos);
  }
  SUBCASE("trailing bytes") {
    auto buf = good;
    buf.resize(buf.size() + 64);
    CHECK(record_view::parse(buf).code() == errc::corrupt_data);
  }
  SUBCASE("corrupt payload: lazy checksum") {
    auto buf = good;
    auto r0 = record_view::parse(good).value();
    const auto off = static_cast<std::size_t>(r0.find("latent")->payload().data() - good.data());
    buf[off + 3] ^= std::byte{0x10};
    auto r = record_view::parse(buf).value();  // parse does not hash payloads
    CHECK(r.verify().code() == errc::checksum_mismatch);
    CHECK(r.find("latent")->decode().code() == errc::checksum_mismatch);
    CHECK(r.find("latent")->checked_payload().code() == errc::checksum_mismatch);
    CHECK(r.find("latent")->decode({}, checksum_policy::skip).has_value());
    CHECK(r.find("txt")->decode().has_value());  // other fields are fine
  }
  SUBCASE("invalid UTF-8 in a raw text field") {
    auto buf = good;
    auto r0 = record_view::parse(good).value();
    const auto off = static_cast<std::size_t>(r0.find("txt")->payload().data() - good.data());
    buf[off] = std::byte{0xff};
    wr<std::uint64_t>(buf, entry_at(1) + detail::kEChecksum, xxh3_64(bytes_view(buf.data() + off, s.caption.size())));
    reseal(buf);
    auto r = record_view::parse(buf).value();
    CHECK(r.find("txt")->text().code() == errc::invalid_utf8);
  }
}

TEST_CASE("truncated at every offset") {
  small_record s;
  for (std::size_t n = 0; n < s.buf.size(); ++n) {
    auto r = record_view::parse(bytes_view(s.buf.data(), n));
    CHECK_MESSAGE(r.code() == errc::truncated, "prefix of " << n << " bytes");
  }
}

TEST_CASE("every single-bit flip is detected by parse or verify") {
  small_record s;
  byte_buffer buf = s.buf;
  int parse_errors = 0, verify_errors = 0;
  for (std::size_t i = 0; i < buf.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      buf[i] ^= std::byte(1u << bit);
      auto r = record_view::parse(buf);
      if (!r) {
        ++parse_errors;
      } else {
        auto v = r->verify();
        if (!v) ++verify_errors;
        else FAIL_CHECK("flip of bit " << bit << " at offset " << i << " went unnoticed");
        for (const auto& f : *r) (void)f.decode();  // must not crash either way
      }
      buf[i] ^= std::byte(1u << bit);
    }
  }
  CHECK(parse_errors > 0);
  CHECK(verify_errors > 0);
  CHECK(parse_errors + verify_errors == static_cast<int>(buf.size() * 8));
}

TEST_CASE("versioning: a newer minor parses (unknown kinds kept as bytes), an unknown major does not") {
  // Hand-crafted v1.1 record: 128-byte header, 64-byte entries, field 0 a known raw tensor, field 1 of an
  // unknown kind (9) with an unknown codec (7), field 2 of an unknown kind stored raw.
  const tensor t = iota_tensor<float>({2, 2});
  const byte_buffer mystery = random_bytes(70, 9);
  const byte_buffer extra = random_bytes(10, 10);
  struct spec {
    std::string name;
    std::uint8_t kind, codec, dtype;
    std::vector<std::int64_t> dims;
    bytes_view payload;
    std::uint64_t decoded;
  };
  const std::vector<spec> fields = {{"t", 4, 0, 7, {2, 2}, t.bytes(), 16},
                                    {"future", 9, 7, 0, {}, mystery, 123},
                                    {"later", 12, 0, 0, {}, extra, 10}};
  const std::size_t hs = 128, es = 64;
  std::size_t extra_pos = hs + es * fields.size();
  std::vector<std::size_t> extra_at;
  for (const auto& f : fields) {
    extra_at.push_back(extra_pos);
    extra_pos = align_up(extra_pos + 8 * f.dims.size() + f.name.size(), 8);
  }
  const std::size_t meta = extra_pos;
  std::size_t pos = align_up(meta);
  std::vector<std::size_t> payload_at;
  for (const auto& f : fields) {
    payload_at.push_back(pos);
    pos = align_up(pos + f.payload.size());
  }
  byte_buffer buf(pos);
  std::memcpy(buf.data(), "JEMR", 4);
  wr<std::uint16_t>(buf, 4, 1);
  wr<std::uint16_t>(buf, 6, 1);  // minor 1
  wr<std::uint16_t>(buf, 8, hs);
  wr<std::uint16_t>(buf, 10, es);
  wr<std::uint32_t>(buf, 12, 3);
  wr<std::uint32_t>(buf, 16, 0x5);  // optional flags unknown to 1.0: ignored
  wr<std::uint32_t>(buf, 20, static_cast<std::uint32_t>(meta));
  wr<std::uint64_t>(buf, 24, pos);
  for (std::size_t k = 64; k < hs; ++k) buf[k] = std::byte{0xab};  // header bytes a 1.1 writer added
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& f = fields[i];
    const std::size_t e = hs + i * es;
    wr<std::uint64_t>(buf, e, payload_at[i]);
    wr<std::uint64_t>(buf, e + 8, f.payload.size());
    wr<std::uint64_t>(buf, e + 16, f.decoded);
    wr<std::uint64_t>(buf, e + 24, xxh3_64(f.payload));
    wr<std::uint32_t>(buf, e + 32, static_cast<std::uint32_t>(extra_at[i]));
    wr<std::uint16_t>(buf, e + 36, static_cast<std::uint16_t>(f.name.size()));
    buf[e + 38] = std::byte{f.kind};
    buf[e + 39] = std::byte{f.codec};
    buf[e + 40] = std::byte{f.dtype};
    buf[e + 41] = std::byte(static_cast<std::uint8_t>(f.dims.size()));
    for (std::size_t k = 48; k < es; ++k) buf[e + k] = std::byte{0xcd};  // entry bytes a 1.1 writer added
    for (std::size_t d = 0; d < f.dims.size(); ++d) wr<std::int64_t>(buf, extra_at[i] + 8 * d, f.dims[d]);
    std::memcpy(buf.data() + extra_at[i] + 8 * f.dims.size(), f.name.data(), f.name.size());
    std::memcpy(buf.data() + payload_at[i], f.payload.data(), f.payload.size());
  }
  reseal(buf);

  auto r = record_view::parse(buf).value();
  CHECK(r.minor() == 1);
  REQUIRE(r.size() == 3);
  CHECK(r.verify());
  CHECK(r.field(0).is_known());
  CHECK(same_bytes(r.field(0).decode().value().bytes(), t.bytes()));
  const auto& fut = *r.find("future");
  CHECK_FALSE(fut.is_known());
  CHECK(static_cast<int>(fut.kind()) == 9);
  CHECK(same_bytes(fut.payload(), mystery));
  CHECK(fut.checked_payload().has_value());
  CHECK(fut.decode().code() == errc::unsupported_codec);
  const auto& later = *r.find("later");
  CHECK_FALSE(later.is_known());
  CHECK(same_bytes(later.decode().value().bytes(), extra));  // unknown kind, raw codec: decodes as bytes

  // The same bytes claiming 1.0 are rejected (sizes and bytes 1.0 does not allow), and major 2 is refused.
  auto v10 = buf;
  wr<std::uint16_t>(v10, 6, 0);
  reseal(v10);
  CHECK(record_view::parse(v10).code() == errc::corrupt_data);
  auto v2 = buf;
  wr<std::uint16_t>(v2, 4, 2);
  reseal(v2);
  CHECK(record_view::parse(v2).code() == errc::unsupported_version);
  auto required = buf;
  wr<std::uint32_t>(required, 16, 0x10000);
  reseal(required);
  CHECK(record_view::parse(required).code() == errc::unsupported_version);
}

TEST_CASE("add_field re-batches a parsed field without hashing or copying") {
  small_record s;
  auto r = record_view::parse(s.buf).value();
  record_builder b;
  for (const auto& f : r) REQUIRE(b.add_field(f));
  auto g = b.gather().value();
  CHECK(same_bytes(g.join(), s.buf));  // identical record
}
