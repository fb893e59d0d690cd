// format::dataset: every source kind built from real JPEG / MP4 bytes in a temp dir, ids stable across
// reopening, same-stem caption pairing, random access == sequential order, concurrent get(), zero-copy
// fields of mapped shards and tars, bad files (errors at open, or skipped and counted), bad samples.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <random>
#include <thread>

#include "format/format_test_util.hpp"
#include "jitembed/format/dataset.hpp"
#if defined(JITEMBED_HAS_JPEG)
#include "jitembed/codec/jpeg.hpp"
#endif
#if defined(JITEMBED_HAS_VIDEO)
#include "jitembed/codec/video.hpp"
#endif

using namespace fmt_test;
namespace fs = std::filesystem;

namespace {


std::string str(bytes_view b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

tensor gradient(int h, int w, int seed) {
  tensor t = tensor::empty({h, w, 3}, dtype::u8);
  auto* p = t.data<std::uint8_t>();
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) p[(y * w + x) * 3 + c] = static_cast<std::uint8_t>((x * 7 + y * 3 + c * 50 + seed * 31) & 0xff);
  return t;
}

// A real JPEG (or, built without the jpeg component, stand-in bytes: the data set never decodes).
byte_buffer make_jpeg(int seed) {
#if defined(JITEMBED_HAS_JPEG)
  return codec::encode_jpeg(gradient(24, 32, seed), {}).value();
#else
  return random_bytes(2000, static_cast<std::uint32_t>(seed));
#endif
}

byte_buffer make_mp4(int seed) {
#if defined(JITEMBED_HAS_VIDEO)
  tensor clip = tensor::empty({4, 32, 32, 3}, dtype::u8);
  for (int t = 0; t < 4; ++t) {
    tensor f = gradient(32, 32, seed + t);
    std::memcpy(clip.data<std::uint8_t>() + t * f.nbytes(), f.data(), f.nbytes());
  }
  return codec::encode_video(clip, {.fps = 24.0}).value();
#else
  return random_bytes(5000, static_cast<std::uint32_t>(seed));
#endif
}

// A minimal ustar archive of (path, bytes) members.
byte_buffer make_ustar(const std::vector<std::pair<std::string, byte_buffer>>& members) {
  byte_buffer t;
  for (const auto& [path, data] : members) {
    const std::size_t at = t.size();
    t.resize(at + 512);
    char* h = reinterpret_cast<char*>(t.data() + at);
    std::memcpy(h, path.data(), std::min<std::size_t>(path.size(), 100));
    std::snprintf(h + 100, 8, "%07o", 0644);
    std::snprintf(h + 108, 8, "%07o", 0);
    std::snprintf(h + 116, 8, "%07o", 0);
    std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(data.size()));
    std::snprintf(h + 136, 12, "%011o", 0);
    h[156] = '0';
    std::memcpy(h + 257, "ustar", 6);
    std::memcpy(h + 263, "00", 2);
    unsigned sum = 0;
    for (std::size_t i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    std::snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
    t.insert(t.end(), data.begin(), data.end());
    t.resize(align_up(t.size(), 512));
  }
  t.resize(t.size() + 1024);
  return t;
}

byte_buffer bytes_of(std::string_view s) {
  const auto b = as_bytes_view(s);
  return byte_buffer(b.begin(), b.end());
}

const std::string kLongCaption =
    "a long caption that compresses well: a red car, a red car, a red car, a red car, a red car, a red car, "
    "a red car, a red car, a red car, a red car, a red car, a red car, a red car, a red car, a red car.";

// A data set of every source kind under root: dir/ (loose media + captions + an ignored file), s.jems
// (3 records: JPEG, zstd caption, raw tensor), w.tar (2 WebDataset samples), r.jemr.
struct fixture {
  temp_dir d;
  fs::path dir, shard, tar, rec;
  byte_buffer jpg_a, jpg_d, jpg_e, mp4_b, jpg_s[3], jpg_w[2];
  std::vector<float> latent{1, 2, 3, 4, 5, 6};

  fixture() {
    dir = d.path / "dir";
    jpg_a = make_jpeg(1);
    jpg_d = make_jpeg(2);
    jpg_e = make_jpeg(3);
    mp4_b = make_mp4(4);
    put(dir / "a.jpg", jpg_a);
    put(dir / "a.txt", "caption of a");
    put(dir / "b.mp4", mp4_b);
    put(dir / "b.txt", "caption of b");
    put(dir / "c.txt", "text only");
    put(dir / "d.JPEG", jpg_d);
    put(dir / "sub/e.jpg", jpg_e);
    put(dir / "sub/e.caption", "caption of e");
    put(dir / "sub/e.json", "{}");  // not a data file: ignored
    put(dir / "README", "ignored");

    shard = d.path / "s.jems";
    {
      auto w = shard_writer::create(shard.string()).value();
      for (int i = 0; i < 3; ++i) {
        jpg_s[i] = make_jpeg(10 + i);
        record_builder b;
        REQUIRE(b.add_image("image", jpg_s[i]));
        REQUIRE(b.add_text("caption", kLongCaption + std::to_string(i)));
        REQUIRE(b.add_tensor("latent", tensor_view(latent.data(), dtype::f32, {2, 3})));
        REQUIRE(w.append(b, "k" + std::to_string(i)));
      }
      REQUIRE(w.close());
    }
    tar = d.path / "w.tar";
    jpg_w[0] = make_jpeg(20);
    jpg_w[1] = make_jpeg(21);
    put(tar, make_ustar({{"000001.png", bytes_of("not decoded")}, {"000001.jpg", jpg_w[0]}, {"000001.txt", bytes_of("tar caption 1")},
                         {"000002.jpg", jpg_w[1]}, {"000002.txt", bytes_of("tar caption 2")}}));
    rec = d.path / "r.jemr";
    record_builder b;
    REQUIRE(b.add_text("caption", "record file caption"));
    put(rec, b.finish().value());
  }

  std::vector<std::string> all() const { return {dir.string(), shard.string(), tar.string(), rec.string()}; }
};

// What a sample holds, as plain values (compared across reads and threads).
struct flat {
  std::string id;
  std::vector<std::string> fields;  // "name kind codec <bytes>"
  bool operator==(const flat&) const = default;
};

flat flatten(const sample& s) {
  flat f{s.id, {}};
  for (const auto& x : s.fields)
    f.fields.push_back(x.name + " " + std::string(to_string(x.kind)) + " " + std::string(codec::to_string(x.codec)) + " " + str(x.bytes));
  return f;
}

}  // namespace

TEST_CASE("dataset: directory samples pair media with same-stem captions") {
  fixture fx;
  auto ds = dataset::open(fx.dir.string()).value();
  REQUIRE(ds.size() == 5);
  CHECK(ds.file_count() == 8);
  CHECK(ds.ignored_files() == 2);
  CHECK(ds.errors().empty());
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < ds.size(); ++i) ids.push_back(ds.id(i).value());
  CHECK(ids == std::vector<std::string>{"a", "b", "c", "d", "sub/e"});

  const auto a = ds.get(0).value();
  CHECK(a.id == "a");
  CHECK_FALSE(a.is_record());
  REQUIRE(a.fields.size() == 2);
  CHECK(a.fields[0].name == "jpg");
  CHECK(a.fields[0].kind == field_kind::image);
  CHECK(a.fields[0].codec == codec::codec_id::jpeg);
  CHECK(str(a.fields[0].bytes) == str(fx.jpg_a));
  CHECK(a.fields[0].keep_alive != nullptr);
  CHECK(a.fields[1].name == "txt");
  CHECK(a.fields[1].kind == field_kind::text);
  CHECK(a.fields[1].codec == codec::codec_id::raw);
  CHECK(a.fields[1].text().value() == "caption of a");
  CHECK(a.first(field_kind::text) == &a.fields[1]);
  CHECK(a.find("jpg") == &a.fields[0]);
  CHECK(a.find("mp4") == nullptr);
#if defined(JITEMBED_HAS_JPEG)
  CHECK(codec::decode_jpeg(a.fields[0].bytes, {}, {}).value().shape() == shape{24, 32, 3});
#endif

  const auto b = ds.get(1).value();
  REQUIRE(b.fields.size() == 2);
  CHECK(b.fields[0].name == "mp4");
  CHECK(b.fields[0].kind == field_kind::video);
  CHECK(b.fields[0].codec == codec::codec_id::video);
  CHECK(str(b.fields[0].bytes) == str(fx.mp4_b));
#if defined(JITEMBED_HAS_VIDEO)
  CHECK(codec::probe_video(b.fields[0].bytes, {}).value().frame_count == 4);
#endif
  CHECK(b.fields[1].text().value() == "caption of b");

  const auto c = ds.get(2).value();  // a caption without media: a text-only sample
  REQUIRE(c.fields.size() == 1);
  CHECK(c.fields[0].name == "txt");
  CHECK(c.fields[0].text().value() == "text only");

  const auto d = ds.get(3).value();  // extensions are case-insensitive; the field name is lowercased
  REQUIRE(d.fields.size() == 1);
  CHECK(d.fields[0].name == "jpeg");
  CHECK(d.fields[0].kind == field_kind::image);

  const auto e = ds.get(4).value();
  REQUIRE(e.fields.size() == 2);
  CHECK(e.fields[0].name == "caption");
  CHECK(e.fields[0].text().value() == "caption of e");
  CHECK(e.fields[1].name == "jpg");

  // A loose sample turned into a record keeps its fields.
  const auto recbytes = a.to_record().value().finish().value();
  auto rv = record_view::parse(recbytes).value();
  REQUIRE(rv.size() == 2);
  CHECK(rv[0].name() == "jpg");
  CHECK(rv[0].codec() == codec::codec_id::jpeg);
  CHECK(rv[1].text().value() == "caption of a");
}

TEST_CASE("dataset: a media or text file given by itself is a one-field sample") {
  fixture fx;
  auto ds = dataset::open({(fx.dir / "a.jpg").string(), (fx.dir / "c.txt").string()}).value();
  REQUIRE(ds.size() == 2);
  const auto a = ds.get(0).value();
  CHECK(a.id == "a");
  REQUIRE(a.fields.size() == 1);  // no caption pairing for a file given by itself
  CHECK(a.fields[0].name == "jpg");
  CHECK(ds.get(1).value().fields[0].text().value() == "text only");
}

TEST_CASE("dataset: shard records are zero-copy views of the mapping") {
  fixture fx;
  auto ds = dataset::open(fx.shard.string()).value();
  REQUIRE(ds.size() == 3);
  const auto s0 = ds.get(0).value();
  const auto s0_again = ds.get(0).value();
  const auto s2 = ds.get(2).value();
  CHECK(s0.id == "s.jems#k0");
  CHECK(s2.id == "s.jems#k2");
  CHECK(s0.is_record());
  REQUIRE(s0.fields.size() == 3);
  CHECK(s0.fields[0].name == "image");
  CHECK(s0.fields[0].kind == field_kind::image);
  CHECK(str(s0.fields[0].bytes) == str(fx.jpg_s[0]));
  // Zero-copy: every get() hands out the same mapped bytes, inside the record, at the file's offsets.
  CHECK(s0.fields[0].bytes.data() == s0_again.fields[0].bytes.data());
  CHECK(s0.fields[0].bytes.data() >= s0.record.bytes().data());
  CHECK(s0.fields[0].bytes.data() + s0.fields[0].bytes.size() <= s0.record.bytes().data() + s0.record.bytes().size());
  CHECK(s0.fields[0].keep_alive == s0.record.keep_alive());
  auto reader = shard_reader::open(fx.shard.string()).value();
  CHECK(s2.record.bytes().data() - s0.record.bytes().data() == reader.record_bytes(2).data() - reader.record_bytes(0).data());
  CHECK(s2.fields[0].bytes.data() - s0.fields[0].bytes.data() ==
        reader.record(2).value()[0].payload().data() - reader.record(0).value()[0].payload().data());
  // The record itself can be sent as is.
  CHECK(s0.record.bytes().size() == reader.record_bytes(0).size());

  // A compressed caption is exposed as stored (codec text); text() gives the UTF-8.
  const auto& cap = s0.fields[1];
  CHECK(cap.kind == field_kind::text);
  CHECK(cap.codec == codec::codec_id::text);
  CHECK(cap.bytes.size() < kLongCaption.size());
  CHECK(cap.text().value() == kLongCaption + "0");
  CHECK(s0.fields[2].kind == field_kind::tensor);
  CHECK(s0.fields[2].dtype == dtype::f32);
  CHECK(s0.fields[2].shape == shape{2, 3});
  CHECK(s0.fields[2].text().code() == errc::invalid_argument);

  // The mapping outlives the data set while a field holds it.
  bytes_view kept;
  std::shared_ptr<const void> owner;
  {
    auto tmp = dataset::open(fx.shard.string()).value();
    auto s = tmp.get(1).value();
    kept = s.fields[0].bytes;
    owner = s.fields[0].keep_alive;
  }
  CHECK(str(kept) == str(fx.jpg_s[1]));

  // to_record() of a record sample reproduces the record byte for byte.
  CHECK(str(s2.to_record().value().finish().value()) == str(s2.record.bytes()));
}

TEST_CASE("dataset: WebDataset tar samples, members as fields, zero-copy") {
  fixture fx;
  auto ds = dataset::open(fx.tar.string()).value();
  REQUIRE(ds.size() == 2);
  const auto s = ds.get(1).value();
  CHECK(s.id == "w.tar#000002");
  CHECK_FALSE(s.is_record());
  REQUIRE(s.fields.size() == 2);
  CHECK(s.fields[0].name == "jpg");
  CHECK(s.fields[0].kind == field_kind::image);
  CHECK(s.fields[0].codec == codec::codec_id::jpeg);
  CHECK(str(s.fields[0].bytes) == str(fx.jpg_w[1]));
  CHECK(s.find("txt")->text().value() == "tar caption 2");
  CHECK(ds.get(1).value().fields[0].bytes.data() == s.fields[0].bytes.data());
  const auto s0 = ds.get(0).value();  // png, jpg, txt
  REQUIRE(s0.fields.size() == 3);
  CHECK(s0.first(field_kind::image) == &s0.fields[0]);
  CHECK(s0.fields[0].codec == codec::codec_id::raw);
  CHECK(s0.first(field_kind::image, codec::codec_id::jpeg) == &s0.fields[1]);
  CHECK(s0.first(field_kind::video, codec::codec_id::video) == nullptr);
  auto wds = webdataset_reader::open(fx.tar.string()).value();
  CHECK(s.fields[0].bytes.data() - s0.fields[1].bytes.data() == wds[1].members[0].data.data() - wds[0].members[1].data.data());
}

TEST_CASE("dataset: sources concatenate, ids stable across reopen, random access == sequential") {
  fixture fx;
  auto ds = dataset::open(fx.all()).value();
  REQUIRE(ds.size() == 5 + 3 + 2 + 1);
  CHECK(ds.file_count() == 8 + 3);
  std::vector<flat> seq;
  for (std::size_t i = 0; i < ds.size(); ++i) seq.push_back(flatten(ds.get(i).value()));
  std::vector<std::string> ids;
  for (const auto& f : seq) ids.push_back(f.id);
  CHECK(ids == std::vector<std::string>{"a", "b", "c", "d", "sub/e", "s.jems#k0", "s.jems#k1", "s.jems#k2", "w.tar#000001",
                                        "w.tar#000002", "r.jemr"});
  const auto r = ds.get(10).value();
  CHECK(r.is_record());
  CHECK(r.fields[0].text().value() == "record file caption");

  auto again = dataset::open(fx.all()).value();
  REQUIRE(again.size() == ds.size());
  for (std::size_t i = 0; i < ds.size(); ++i) CHECK(flatten(again.get(i).value()) == seq[i]);

  std::vector<std::size_t> order(ds.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(42));
  for (std::size_t i : order) {
    CHECK(flatten(ds.get(i).value()) == seq[i]);
    CHECK(ds.id(i).value() == seq[i].id);
  }
  CHECK(ds.get(ds.size()).code() == errc::not_found);
  CHECK(ds.id(ds.size()).code() == errc::not_found);
  CHECK(dataset().get(0).code() == errc::not_found);
  CHECK(dataset().size() == 0);

  // Containers inside a directory are sources of it, in id order.
  fs::copy_file(fx.shard, fx.dir / "m.jems");
  fs::copy_file(fx.tar, fx.dir / "sub/t.tar");
  auto nested = dataset::open(fx.dir.string()).value();
  ids.clear();
  for (std::size_t i = 0; i < nested.size(); ++i) ids.push_back(nested.id(i).value());
  CHECK(ids == std::vector<std::string>{"a", "b", "c", "d", "m.jems#k0", "m.jems#k1", "m.jems#k2", "sub/e", "sub/t.tar#000001",
                                        "sub/t.tar#000002"});
}

TEST_CASE("dataset: concurrent get() from several threads") {
  fixture fx;
  const auto ds = dataset::open(fx.all()).value();
  std::vector<flat> seq;
  for (std::size_t i = 0; i < ds.size(); ++i) seq.push_back(flatten(ds.get(i).value()));
  std::atomic<int> mismatches{0}, reads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::size_t> order(ds.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::mt19937 rng(static_cast<std::uint32_t>(t));
      for (int round = 0; round < 20; ++round) {
        std::shuffle(order.begin(), order.end(), rng);
        for (std::size_t i : order) {
          auto s = ds.get(i);
          ++reads;
          if (!s || !(flatten(*s) == seq[i])) ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(reads == 8 * 20 * static_cast<int>(ds.size()));
  CHECK(mismatches == 0);
}

TEST_CASE("dataset: bad sources fail open, or are skipped and counted") {
  fixture fx;
  const std::string missing = (fx.d.path / "missing").string();
  CHECK(dataset::open(missing).code() == errc::not_found);
  CHECK(dataset::open(std::string()).code() == errc::not_found);
  put(fx.d.path / "notes.bin", "x");
  auto unknown = dataset::open((fx.d.path / "notes.bin").string());
  CHECK(unknown.code() == errc::unsupported_format);
  CHECK(unknown.error().message.find("notes.bin") != std::string::npos);

  // A truncated shard and a tar that is not one.
  std::ifstream in(fx.shard, std::ios::binary);
  std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  put(fx.d.path / "cut.jems", std::string_view(whole).substr(0, whole.size() - 100));
  put(fx.d.path / "junk.tar", std::string(1024, 'j'));
  CHECK(dataset::open((fx.d.path / "cut.jems").string()).code() == errc::truncated);
  CHECK(dataset::open((fx.d.path / "junk.tar").string()).code() != errc::ok);

  std::vector<std::string> paths = fx.all();
  paths.insert(paths.begin() + 1, (fx.d.path / "cut.jems").string());
  paths.push_back(missing);
  CHECK(dataset::open(paths).code() == errc::truncated);  // the first bad source
  dataset_options o;
  o.skip_bad_sources = true;
  auto ds = dataset::open(paths, o).value();
  CHECK(ds.size() == 11);  // every good source is there
  REQUIRE(ds.errors().size() == 2);
  CHECK(ds.errors()[0].path == (fx.d.path / "cut.jems").string());
  CHECK(ds.errors()[0].error.code == errc::truncated);
  CHECK(ds.errors()[1].error.code == errc::not_found);

  // Inside a directory: a bad shard fails the open, or is skipped with the rest of the directory kept.
  fs::copy_file(fx.d.path / "cut.jems", fx.dir / "cut.jems");
  CHECK(dataset::open(fx.dir.string()).code() == errc::truncated);
  auto dir = dataset::open(fx.dir.string(), o).value();
  CHECK(dir.size() == 5);
  REQUIRE(dir.errors().size() == 1);
  CHECK(dir.errors()[0].path == (fx.dir / "cut.jems").string());
}

TEST_CASE("dataset: a bad sample fails only itself") {
  fixture fx;
  // Flip a byte of record 1's JPEG payload in a copy of the shard.
  std::ifstream in(fx.shard, std::ios::binary);
  std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  {
    auto reader = shard_reader::open(fx.shard.string()).value();
    const auto off = static_cast<std::size_t>(reader.record(1).value()[0].payload().data() - reader.bytes().data());
    whole[off + 10] = static_cast<char>(whole[off + 10] ^ 0x40);
  }
  put(fx.d.path / "flip.jems", whole);
  put(fx.d.path / "bad.jemr", "not a record");
  const std::vector<std::string> paths = {(fx.d.path / "flip.jems").string(), (fx.d.path / "bad.jemr").string(), fx.dir.string()};
  auto ds = dataset::open(paths).value();
  REQUIRE(ds.size() == 3 + 1 + 5);
  CHECK(ds.get(0));
  auto bad = ds.get(1);
  CHECK(bad.code() == errc::checksum_mismatch);
  CHECK(bad.error().message.find("flip.jems#k1") != std::string::npos);
  CHECK(ds.get(2));
  auto badrec = ds.get(3);
  CHECK(badrec.code() == errc::truncated);
  CHECK(badrec.error().message.find("bad.jemr") != std::string::npos);
  CHECK(ds.id(3).value() == "bad.jemr");

  // Without payload checks the flipped record reads (the consumer verifies).
  dataset_options skip;
  skip.payload_checks = checksum_policy::skip;
  CHECK(dataset::open(paths, skip).value().get(1));

  // A loose file gone after open fails its sample; the others read.
  fs::remove(fx.dir / "b.mp4");
  auto gone = ds.get(4 + 1);
  CHECK(gone.code() == errc::io_error);
  CHECK(gone.error().message.find("b.mp4") != std::string::npos);
  CHECK(ds.get(4));
  CHECK(ds.get(4 + 2));

  // Two files giving the same field (a.jpg, a.JPG): that sample fails, the directory opens.
  put(fx.dir / "a.JPG", make_jpeg(9));
  auto dup = dataset::open(fx.dir.string()).value();
  CHECK(dup.get(0).code() == errc::corrupt_data);
  CHECK(dup.get(0).error().message.find("'jpg' given twice") != std::string::npos);
  CHECK(dup.get(2));
  fs::remove(fx.dir / "a.JPG");

  // A loose file over max_record_bytes.
  dataset_options small;
  small.limits.max_record_bytes = 100;
  auto lim = dataset::open(fx.dir.string(), small).value();
  CHECK(lim.get(0).code() == errc::limit_exceeded);
  CHECK(lim.get(2).value().fields[0].text().value() == "text only");

  // Invalid UTF-8 in a caption: the sample reads (bytes as stored); text() and to_record() say so.
  put(fx.dir / "c.txt", "bad \xc3\x28 text");
  auto utf = dataset::open(fx.dir.string()).value().get(2).value();
  CHECK(utf.fields[0].text().code() == errc::invalid_utf8);
  CHECK(utf.to_record().code() == errc::invalid_utf8);
}
