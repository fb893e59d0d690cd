// Batches and shards: round trips, zero-copy through the mapping, truncated and lying footers.
#include <doctest/doctest.h>

#include <fstream>

#include "format/format_test_util.hpp"

using namespace fmt_test;

namespace {

record_builder sample_builder(int i, const byte_buffer& img, const tensor& lat) {
  record_builder b;
  b.add_image("jpg", img).value();
  b.add_text("txt", "sample number " + std::to_string(i), 0).value();
  b.add_tensor("latent", lat).value();
  return b;
}

byte_buffer read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> v((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  byte_buffer b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size());
  return b;
}

void write_file(const std::filesystem::path& p, bytes_view b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace

TEST_CASE("batch: builders and encoded records, write == gather, parse") {
  const byte_buffer img = random_bytes(3000, 1);
  const tensor lat = tensor::zeros({4, 8, 8}, dtype::f16);
  record_builder b0 = sample_builder(0, img, lat);
  const auto encoded1 = sample_builder(1, img, lat).finish().value();
  batch_builder bb;
  REQUIRE(bb.append(b0));
  REQUIRE(bb.append(bytes_view(encoded1)));
  REQUIRE(bb.append(sample_builder(2, img, lat)));
  REQUIRE(bb.append(record_builder{}));
  CHECK(bb.append(bytes_view(encoded1).first(100)).code() == errc::corrupt_data);
  CHECK(bb.size() == 4);
  auto buf = bb.finish().value();
  CHECK(buf.size() == bb.encoded_size());
  CHECK(bb.gather().value().join() == buf);
  auto owner = std::make_shared<byte_buffer>(buf);
  auto v = batch_view::parse(*owner, {}, owner).value();
  REQUIRE(v.size() == 4);
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& r = v.record(i);
    CHECK(reinterpret_cast<std::uintptr_t>(r.bytes().data()) % 64 == 0);
    CHECK(r.find("txt")->text().value() == "sample number " + std::to_string(i));
    CHECK(r.verify());
    CHECK(r.keep_alive() == owner);
  }
  CHECK(v.record(3).size() == 0);
  // The records of a batch are the records a builder writes.
  CHECK(std::equal(v.record(1).bytes().begin(), v.record(1).bytes().end(), encoded1.begin(), encoded1.end()));

  SUBCASE("truncated batch") {
    for (std::size_t n : {std::size_t{0}, std::size_t{63}, std::size_t{64}, buf.size() / 2, buf.size() - 1})
      CHECK(batch_view::parse(bytes_view(buf.data(), n)).code() == errc::truncated);
  }
  SUBCASE("lying offset table") {
    auto bad = buf;
    wr<std::uint64_t>(bad, 64 + 16, rd<std::uint64_t>(bad, 64 + 16) + 64);
    detail::store_checksum(bad.data(), 64 + 16 * 4);
    auto r = batch_view::parse(bad);
    CHECK(r.code() == errc::corrupt_data);
    CHECK(r.error().message.find("record 1") != std::string::npos);
    bad = buf;
    wr<std::uint32_t>(bad, detail::kBCount, 1u << 30);
    detail::store_checksum(bad.data(), 64);  // cannot cover the claimed table: the size check fires first
    CHECK(batch_view::parse(bad).code() == errc::corrupt_data);
  }
  SUBCASE("corrupt record inside") {
    auto bad = buf;
    const auto off = static_cast<std::size_t>(v.record(2).bytes().data() - owner->data());
    bad[off + 64 + 16] ^= std::byte{1};  // decoded_size of field 0
    auto r = batch_view::parse(bad);
    CHECK(r.code() == errc::checksum_mismatch);
    CHECK(r.error().message.find("batch: record 2") != std::string::npos);
  }
  SUBCASE("table checksum") {
    auto bad = buf;
    bad[70] ^= std::byte{1};
    CHECK(batch_view::parse(bad).code() == errc::checksum_mismatch);
  }
}

TEST_CASE("shard: write, random access through the mapping, keys, keep_alive") {
  temp_dir dir;
  const auto path = (dir.path / "a.jems").string();
  const byte_buffer img = random_bytes(5000, 7);
  std::vector<tensor> lats;
  for (int i = 0; i < 20; ++i) {
    tensor t = tensor::empty({16, 16}, dtype::f32);
    for (std::size_t k = 0; k < 256; ++k) t.data<float>()[k] = static_cast<float>(i * 1000 + static_cast<int>(k));
    lats.push_back(t);
  }
  {
    auto w = shard_writer::create(path).value();
    for (int i = 0; i < 20; ++i) {
      if (i % 2) {
        REQUIRE(w.append(sample_builder(i, img, lats[static_cast<std::size_t>(i)]), "key" + std::to_string(i)));
      } else {
        const auto rec = sample_builder(i, img, lats[static_cast<std::size_t>(i)]).finish().value();
        REQUIRE(w.append(bytes_view(rec), i == 4 ? "" : "key" + std::to_string(i)));
      }
    }
    CHECK(w.append(random_bytes(128, 3)).code() == errc::bad_magic);
    CHECK(w.size() == 20);
    REQUIRE(w.close());
    CHECK(w.close());  // idempotent
    CHECK(w.append(random_bytes(128, 3)).code() == errc::invalid_argument);
  }
  tensor kept;
  std::weak_ptr<const void> mapping;
  {
    auto r = shard_reader::open(path).value();
    REQUIRE(r.size() == 20);
    mapping = r.keep_alive();
    for (int i : {13, 0, 19, 4, 7}) {
      auto rec = r.record(static_cast<std::size_t>(i)).value();
      CHECK(reinterpret_cast<std::uintptr_t>(rec.bytes().data()) % 64 == 0);
      CHECK(rec.find("txt")->text().value() == "sample number " + std::to_string(i));
      auto t = rec.find("latent")->decode().value();
      CHECK(t.data() == rec.find("latent")->payload().data());  // zero-copy into the mapping
      CHECK(t.data<float>()[5] == static_cast<float>(i * 1000 + 5));
      CHECK(r.key(static_cast<std::size_t>(i)) == (i == 4 ? "" : "key" + std::to_string(i)));
      if (i == 7) kept = t;
    }
    CHECK(r.record(20).code() == errc::not_found);
  }
  CHECK_FALSE(mapping.expired());  // the tensor keeps the mapping
  CHECK(kept.data<float>()[255] == 7255.0f);
  kept = tensor();
  CHECK(mapping.expired());

  const byte_buffer whole = read_file(path);
  SUBCASE("truncated shard") {
    for (std::size_t n : {std::size_t{0}, std::size_t{10}, std::size_t{64}, whole.size() / 2, whole.size() - 64, whole.size() - 1}) {
      write_file(dir.path / "t.jems", bytes_view(whole.data(), n));
      auto r = shard_reader::open((dir.path / "t.jems").string());
      CHECK_MESSAGE(r.code() == errc::truncated, "size " << n << ": " << (r ? "" : r.error().message));
    }
    auto r = shard_reader::parse(bytes_view(whole.data(), whole.size() - 64));
    CHECK(r.code() == errc::truncated);
    CHECK(r.error().message.find("not closed") != std::string::npos);
  }
  SUBCASE("lying footer") {
    auto bad = whole;
    const std::size_t t = bad.size() - 64;
    wr<std::uint64_t>(bad, t + detail::kTIndexOffset, rd<std::uint64_t>(bad, t + detail::kTIndexOffset) + 64);
    wr<std::uint64_t>(bad, t + detail::kTChecksum, xxh3_64(bytes_view(bad.data() + t, 56)));
    CHECK(shard_reader::parse(bad).code() == errc::corrupt_data);
    bad = whole;
    wr<std::uint64_t>(bad, t + detail::kTCount, 1u << 30);
    wr<std::uint64_t>(bad, t + detail::kTChecksum, xxh3_64(bytes_view(bad.data() + t, 56)));
    CHECK(shard_reader::parse(bad).code() == errc::corrupt_data);
    bad = whole;
    wr<std::uint64_t>(bad, t + detail::kTCount, 3);  // not even the trailer checksum fixed
    CHECK(shard_reader::parse(bad).code() == errc::checksum_mismatch);
  }
  SUBCASE("corrupt index and records") {
    auto bad = whole;
    const std::size_t t = bad.size() - 64;
    const auto idx = rd<std::uint64_t>(bad, t + detail::kTIndexOffset);
    bad[idx + 3] ^= std::byte{1};
    CHECK(shard_reader::parse(bad).code() == errc::checksum_mismatch);
    bad = whole;
    bad[200] ^= std::byte{1};  // inside record 0's header / table
    auto r = shard_reader::parse(bad).value();
    CHECK(r.record(0).code() == errc::checksum_mismatch);
    CHECK(r.record(1).has_value());
  }
  SUBCASE("limits") {
    decode_limits lim;
    lim.max_record_bytes = 1024;
    CHECK(shard_reader::parse(whole, lim).code() == errc::limit_exceeded);
  }
}

TEST_CASE("shard: empty, and the destructor closes") {
  temp_dir dir;
  const auto p = (dir.path / "e.jems").string();
  { auto w = shard_writer::create(p).value(); }
  auto r = shard_reader::open(p).value();
  CHECK(r.size() == 0);
  CHECK(shard_reader::open((dir.path / "missing").string()).code() == errc::io_error);
}
