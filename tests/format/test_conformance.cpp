// The committed conformance vectors seen from the library: the writers re-encode the valid ones byte for
// byte, every single-bit flip of a small shard is detected, and the writers refuse what the reader refuses.
#include <doctest/doctest.h>

#include <fstream>

#include "format/format_test_util.hpp"

using namespace fmt_test;

namespace {

const std::filesystem::path kVectors = std::filesystem::path(JITEMBED_TEST_DATA_DIR) / ".." / "conformance" / "vectors";

byte_buffer read_vector(const std::string& rel) {
  std::ifstream in(kVectors / rel, std::ios::binary);
  REQUIRE_MESSAGE(in, "missing conformance vector " << rel);
  std::vector<char> v((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  byte_buffer b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size());
  return b;
}

bool same(bytes_view a, bytes_view b) { return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0; }

record_builder rebuild(const record_view& r) {
  record_builder b;
  for (const auto& f : r) REQUIRE(b.add_field(f));
  return b;
}

// parse / open, then for every record: parse, verify, decode the raw / zstd / text fields (the procedure
// of docs/format.md#conformance-vectors). Returns the first error, ok if none.
errc read_shard_fully(bytes_view shard) {
  auto s = shard_reader::parse(shard);
  if (!s) return s.code();
  for (std::size_t i = 0; i < s->size(); ++i) {
    auto r = s->record(i);
    if (!r) return r.code();
    if (auto v = r->verify(); !v) return v.code();
    for (const auto& f : *r) {
      const auto c = f.codec();
      if (c != codec::codec_id::raw && c != codec::codec_id::zstd && c != codec::codec_id::text) continue;
      if (auto t = f.decode(); !t) return t.code();
    }
  }
  return errc::ok;
}

}  // namespace

TEST_CASE("conformance: record_builder re-encodes the valid 1.0 records byte for byte") {
  for (const char* name : {"record/basic.jemr", "record/empty.jemr", "record/shuffle.jemr", "record/frames.jemr"}) {
    CAPTURE(name);
    const byte_buffer v = read_vector(name);
    auto r = record_view::parse(v).value();
    CHECK(r.verify());
    CHECK(same(rebuild(r).finish().value(), v));
  }
}

TEST_CASE("conformance: batch_builder and shard_writer re-encode the valid batch and shard") {
  const byte_buffer batch = read_vector("batch/two.jemb");
  auto bv = batch_view::parse(batch).value();
  batch_builder bb;
  std::vector<record_builder> builders;
  builders.reserve(bv.size());
  for (const auto& r : bv) builders.push_back(rebuild(r));
  for (const auto& b : builders) REQUIRE(bb.append(b));
  CHECK(same(bb.finish().value(), batch));

  temp_dir dir;
  const auto path = (dir.path / "three.jems").string();
  const byte_buffer shard = read_vector("shard/three.jems");
  auto sr = shard_reader::parse(shard).value();
  {
    auto w = shard_writer::create(path).value();
    for (std::size_t i = 0; i < sr.size(); ++i) REQUIRE(w.append(rebuild(sr.record(i).value()), sr.key(i)));
    REQUIRE(w.close());
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<char> written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(same(as_bytes_view(std::string_view(written.data(), written.size())), shard));
}

TEST_CASE("every single-bit flip of a small shard is detected by open, record, verify or decode") {
  const byte_buffer good = read_vector("shard/three.jems");
  REQUIRE(read_shard_fully(good) == errc::ok);
  byte_buffer buf = good;
  std::map<errc, int> by_code;
  for (std::size_t i = 0; i < buf.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      buf[i] ^= std::byte(1u << bit);
      const errc e = read_shard_fully(buf);
      if (e == errc::ok) FAIL_CHECK("flip of bit " << bit << " at offset " << i << " went unnoticed");
      ++by_code[e];
      buf[i] ^= std::byte(1u << bit);
    }
  }
  int total = 0;
  for (const auto& [code, n] : by_code) {
    MESSAGE(to_string(code) << ": " << n);
    total += n;
  }
  CHECK(total == static_cast<int>(good.size() * 8));
  CHECK(by_code[errc::checksum_mismatch] > 0);
  CHECK(by_code[errc::corrupt_data] > 0);  // file header and index padding: checked byte by byte
}

TEST_CASE("writers refuse what the reader refuses: non-UTF-8 names and keys, ranked bytes/text/json") {
  record_builder b;
  CHECK(b.add_bytes("bad\xff", as_bytes_view(std::string_view("x"))).code() == errc::invalid_utf8);
  encoded_info info;
  info.shape = shape{3};
  info.decoded_size = 3;
  const byte_buffer three = random_bytes(3, 1);
  CHECK(b.add_encoded("ranked", field_kind::bytes, codec::codec_id::raw, three, info).code() == errc::corrupt_data);
  CHECK(b.add_encoded("ranked", field_kind::json, codec::codec_id::raw, three, info).code() == errc::corrupt_data);
  CHECK(b.add_encoded("img", field_kind::image, codec::codec_id::raw, three, info));  // images may declare a shape
  CHECK(b.add_bytes("ok", three));

  temp_dir dir;
  auto w = shard_writer::create((dir.path / "k.jems").string()).value();
  CHECK(w.append(b, "key\xc3").code() == errc::invalid_utf8);
  CHECK(w.append(b, "cl\xc3\xa9"));
  REQUIRE(w.close());
  auto r = shard_reader::open((dir.path / "k.jems").string()).value();
  CHECK(r.size() == 1);
  CHECK(r.key(0) == "cl\xc3\xa9");
}

TEST_CASE("decode: UTF-8 of text and json whatever the codec, zstd size mismatch is corrupt_data") {
  record_builder b;
  REQUIRE(b.add_json("j", "{\"a\":\"\xc3\xa9\"}", compression::zstd));
  REQUIRE(b.add_text("t", "plain", 0));
  const byte_buffer good = b.finish().value();
  auto r = record_view::parse(good).value();
  CHECK(r.find("j")->decode());
  CHECK(r.find("t")->decode());
  for (const char* name : {"record/field.utf8.raw_text.jemr", "record/field.utf8.raw_json.jemr",
                           "record/field.utf8.zstd_json.jemr", "record/field.utf8.text_codec.jemr"}) {
    CAPTURE(name);
    auto bad = record_view::parse(read_vector(name)).value();
    CHECK(bad.field(0).decode().code() == errc::invalid_utf8);
    CHECK(bad.field(0).text().code() == errc::invalid_utf8);
    CHECK(bad.field(0).decode({}, checksum_policy::skip).code() == errc::invalid_utf8);
  }
  auto more = record_view::parse(read_vector("record/field.zstd.size.more.jemr")).value();
  CHECK(more.field(0).decode().code() == errc::corrupt_data);
  CHECK(more.field(0).text().code() == errc::corrupt_data);
}
