// lmdb_cache in one process: round trip, zero-copy, value lifetime, map growth, size cap + LRU eviction,
// corruption handling, errors degrading to misses, threads.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <csignal>
#include <fstream>
#include <thread>

#include "lmdb/lmdb_test_util.hpp"

using namespace lmdb_test;
using jitembed::errc;
using jitembed::cache::cache_store;
using jitembed::cache::cached_value;
using jitembed::cache::lmdb_cache;
using jitembed::cache::lmdb_options;

static_assert(cache_store<lmdb_cache>);

TEST_CASE("lmdb_cache: put/get/contains/erase round trip and counters") {
  temp_dir dir("roundtrip");
  auto c = lmdb_cache::open(options_for(dir.path)).value();
  CHECK(fs::exists(dir.path / "data.mdb"));

  for (std::uint64_t i = 0; i < 40; ++i) REQUIRE(c.put(key_of(i), view(value_of(i, size_of(i)))));
  std::uint64_t bytes = 0;
  for (std::uint64_t i = 0; i < 40; ++i) {
    auto v = c.get(key_of(i));
    REQUIRE(v.has_value());
    CHECK(equal(v->bytes, value_of(i, size_of(i))));
    CHECK(c.contains(key_of(i)));
    bytes += size_of(i);
  }
  CHECK_FALSE(c.get(key_of(1000)).has_value());
  CHECK_FALSE(c.contains(key_of(1000)));

  // A second put of the same key is accepted and changes nothing (content addressing).
  CHECK(c.put(key_of(3), view(value_of(3, size_of(3)))));

  auto s = c.stats();
  CHECK(s.puts == 40);
  CHECK(s.hits == 40);
  CHECK(s.misses == 1);
  CHECK(s.errors == 0);
  CHECK(s.bytes_read == bytes);
  CHECK(s.bytes_written == bytes);
  CHECK(s.entries == 40);
  CHECK(s.bytes_held > bytes);

  CHECK(c.erase(key_of(5)));
  CHECK_FALSE(c.erase(key_of(5)));
  CHECK_FALSE(c.get(key_of(5)).has_value());
  CHECK(c.stats().entries == 39);

  // multi_get: one snapshot, hits and misses in key order.
  std::vector<cache_key> keys{key_of(0), key_of(5), key_of(7), key_of(999), key_of(6)};
  auto got = c.multi_get(keys);
  REQUIRE(got.size() == 5);
  CHECK(got[0].has_value());
  CHECK_FALSE(got[1].has_value());
  CHECK(equal(got[2]->bytes, value_of(7, size_of(7))));
  CHECK_FALSE(got[3].has_value());
  CHECK(equal(got[4]->bytes, value_of(6, size_of(6))));
  CHECK(got[0]->keep_alive == got[2]->keep_alive);  // one read transaction for all

  // Reopening after close sees the same data and counters.
  got.clear();
  { lmdb_cache closing = std::move(c); }  // the last copy of the handle: the store closes
  auto c2 = lmdb_cache::open(options_for(dir.path)).value();
  CHECK(c2.stats().entries == 39);
  CHECK(equal(c2.get(key_of(39))->bytes, value_of(39, size_of(39))));
}

TEST_CASE("lmdb_cache: one env per path in a process") {
  temp_dir dir("shared");
  auto a = lmdb_cache::open(options_for(dir.path)).value();
  auto o = options_for(dir.path / "." / "");
  auto b = lmdb_cache::open(o).value();  // same directory, spelled differently
  CHECK(a.path() == b.path());
  REQUIRE(a.put(key_of(1), view(value_of(1, 100))));
  auto v = b.get(key_of(1));
  REQUIRE(v.has_value());
  CHECK(equal(v->bytes, value_of(1, 100)));
  CHECK(a.stats().puts == 1);  // counters are per object
  CHECK(b.stats().hits == 1);
}

TEST_CASE("lmdb_cache: values are zero-copy views into the map, large ones 64-byte aligned") {
  temp_dir dir("zerocopy");
  auto c = lmdb_cache::open(options_for(dir.path)).value();
  for (std::uint64_t i = 0; i < 8; ++i) REQUIRE(c.put(key_of(i), view(value_of(i, 4096 * (i + 1)))));
  REQUIRE(c.put(key_of(100), view(value_of(100, 50))));
  auto [lo, hi] = mapping_of(dir.path / "data.mdb");
  REQUIRE(lo != 0);
  for (std::uint64_t i = 0; i < 8; ++i) {
    auto v = c.get(key_of(i));
    REQUIRE(v);
    const auto p = reinterpret_cast<std::uintptr_t>(v->bytes.data());
    CHECK(p >= lo);
    CHECK(p + v->bytes.size() <= hi);
    CHECK(p % 64 == 0);
  }
  auto small = c.get(key_of(100));
  REQUIRE(small);
  const auto p = reinterpret_cast<std::uintptr_t>(small->bytes.data());
  CHECK((p >= lo && p + 50 <= hi));
  // Two gets with nothing committed in between share one read transaction and see the same bytes.
  auto again = c.get(key_of(100));
  CHECK(again->bytes.data() == small->bytes.data());
  CHECK(again->keep_alive == small->keep_alive);
}

TEST_CASE("lmdb_cache: a held value stays valid across writes, erase and closing the cache") {
  temp_dir dir("lifetime");
  auto c = lmdb_cache::open(options_for(dir.path)).value();
  const auto want = value_of(7, 20000);
  REQUIRE(c.put(key_of(7), view(want)));
  auto held = c.get(key_of(7));
  REQUIRE(held);
  for (std::uint64_t i = 100; i < 300; ++i) REQUIRE(c.put(key_of(i), view(value_of(i, 5000))));
  CHECK(c.erase(key_of(7)));
  CHECK_FALSE(c.get(key_of(7)).has_value());  // a new snapshot no longer has it...
  CHECK(equal(held->bytes, want));              // ...the held one still does
  { lmdb_cache closing = std::move(c); }        // the value keeps the environment open
  CHECK(equal(held->bytes, want));
  held.reset();
  // Everything released: the env is closed and can be opened again.
  auto c2 = lmdb_cache::open(options_for(dir.path)).value();
  CHECK(c2.contains(key_of(299)));
}

TEST_CASE("lmdb_cache: the map grows from a tiny initial size") {
  temp_dir dir("growth");
  auto o = options_for(dir.path);
  o.initial_map_bytes = 128 << 10;
  auto c = lmdb_cache::open(o).value();
  const std::size_t initial = c.map_bytes();
  CHECK(initial <= (256u << 10));
  for (std::uint64_t i = 0; i < 200; ++i) REQUIRE(c.put(key_of(i), view(value_of(i, 20000 + i))));
  CHECK(c.map_bytes() > 10 * initial);
  CHECK(c.stats().errors == 0);
  for (std::uint64_t i = 0; i < 200; ++i) {
    auto v = c.get(key_of(i));
    REQUIRE(v);
    CHECK(equal(v->bytes, value_of(i, 20000 + i)));
  }
}

TEST_CASE("lmdb_cache: the map cannot move while this process holds a value, the put degrades") {
  temp_dir dir("heldresize");
  auto o = options_for(dir.path);
  o.initial_map_bytes = 256 << 10;
  o.resize_timeout = std::chrono::milliseconds(30);
  auto c = lmdb_cache::open(o).value();
  REQUIRE(c.put(key_of(0), view(value_of(0, 1000))));
  auto held = c.get(key_of(0));
  REQUIRE(held);
  const std::size_t map = c.map_bytes();
  bool failed = false;
  std::uint64_t i = 1;
  for (; i < 200 && !failed; ++i) failed = !c.put(key_of(i), view(value_of(i, 16000)));
  CHECK(failed);
  CHECK(c.map_bytes() == map);
  CHECK(c.stats().errors == 1);
  CHECK(c.last_error().find("MDB_MAP_FULL") != std::string::npos);
  CHECK(equal(held->bytes, value_of(0, 1000)));
  held.reset();
  CHECK(c.put(key_of(i - 1), view(value_of(i - 1, 16000))));  // now the map can grow
  CHECK(c.map_bytes() > map);
}

TEST_CASE("lmdb_cache: max_map_bytes is a hard cap, puts beyond it fail and are counted") {
  temp_dir dir("hardcap");
  auto o = options_for(dir.path);
  o.initial_map_bytes = 256 << 10;
  o.max_map_bytes = 1 << 20;
  auto c = lmdb_cache::open(o).value();
  std::uint64_t stored = 0, failed = 0;
  for (std::uint64_t i = 0; i < 100; ++i) (c.put(key_of(i), view(value_of(i, 30000))) ? stored : failed)++;
  CHECK(stored > 10);
  CHECK(failed > 0);
  CHECK(c.stats().errors == failed);
  CHECK(c.map_bytes() <= (1u << 20));
  for (std::uint64_t i = 0; i < stored; ++i) CHECK(equal(c.get(key_of(i))->bytes, value_of(i, 30000)));
}

TEST_CASE("lmdb_cache: size cap evicts least recently used values") {
  temp_dir dir("cap");
  auto o = options_for(dir.path);
  o.max_bytes = 1 << 20;
  auto c = lmdb_cache::open(o).value();
  constexpr std::size_t n = 16384;
  for (std::uint64_t i = 0; i < 30; ++i) REQUIRE(c.put(key_of(i), view(value_of(i, n))));
  CHECK(c.stats().evictions == 0);
  for (int round = 0; round < 2; ++round)
    for (std::uint64_t i = 0; i < 10; ++i) REQUIRE(c.get(key_of(i)));  // recently used
  for (std::uint64_t i = 30; i < 130; ++i) {
    REQUIRE(c.put(key_of(i), view(value_of(i, n))));
    CHECK(c.stats().bytes_held <= o.max_bytes);
    if (i % 10 == 0)
      for (std::uint64_t k = 0; k < 10; ++k) REQUIRE(c.get(key_of(k)));  // keep them recent
  }
  const auto s = c.stats();
  CHECK(s.evictions > 50);
  CHECK(s.bytes_held <= o.max_bytes);
  CHECK(s.bytes_held > o.max_bytes / 2);
  CHECK(s.entries + s.evictions == 130);
  for (std::uint64_t i = 0; i < 10; ++i) CHECK(c.contains(key_of(i)));         // survived
  for (std::uint64_t i = 10; i < 30; ++i) CHECK_FALSE(c.contains(key_of(i)));  // oldest, evicted
  for (std::uint64_t i = 120; i < 130; ++i) CHECK(c.contains(key_of(i)));      // newest
  // The file stays near the cap: freed pages are reused (allow LMDB's page overhead and free lists).
  CHECK(fs::file_size(dir.path / "data.mdb") < 3 * o.max_bytes);
  // A value larger than the whole budget is simply not stored (not an error).
  CHECK_FALSE(c.put(key_of(5000), view(value_of(5000, 2 << 20))));
  CHECK(c.stats().errors == 0);
}

namespace {
// Offsets of every copy of `needle` in the file (LMDB's copy-on-write leaves old copies of rewritten
// leaf pages in free pages; only the live one matters, so all are flipped).
std::vector<std::size_t> find_in_file(const fs::path& file, const std::vector<std::byte>& needle) {
  std::ifstream in(file, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string n(reinterpret_cast<const char*>(needle.data()), needle.size());
  std::vector<std::size_t> at;
  for (std::size_t p = data.find(n); p != std::string::npos; p = data.find(n, p + 1)) at.push_back(p);
  return at;
}
void flip_byte(const fs::path& file, std::size_t offset) {
  std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
  f.seekg(static_cast<std::streamoff>(offset));
  char b = 0;
  f.read(&b, 1);
  b = static_cast<char>(b ^ 0x5A);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&b, 1);
}
}  // namespace

TEST_CASE("lmdb_cache: a corrupt value is a counted miss and is removed, never returned") {
  struct variant {
    const char* name;
    std::size_t size;
    std::ptrdiff_t flip;  // relative to the value's first byte
    const char* message;
  };
  const variant variants[] = {
      {"large value, payload byte", 40000, 20000, "checksum"},
      {"small value, payload byte", 200, 100, "checksum"},
      {"large value, header magic", 40000, -48, "magic"},
      {"small value, header length", 200, -40, "value length"},
  };
  for (const auto& var : variants) {
    CAPTURE(var.name);
    temp_dir dir("corrupt");
    const auto bad = value_of(1, var.size);
    {
      auto c = lmdb_cache::open(options_for(dir.path)).value();
      for (std::uint64_t i = 0; i < 20; ++i) REQUIRE(c.put(key_of(i), view(value_of(i, var.size))));
    }  // closed
    const auto at = find_in_file(dir.path / "data.mdb", bad);
    REQUIRE(!at.empty());
    for (std::size_t a : at) flip_byte(dir.path / "data.mdb", static_cast<std::size_t>(static_cast<std::ptrdiff_t>(a) + var.flip));

    auto c = lmdb_cache::open(options_for(dir.path)).value();
    CHECK_FALSE(c.get(key_of(1)).has_value());
    auto s = c.stats();
    CHECK(s.errors == 1);
    CHECK(s.misses == 1);
    CHECK(s.entries == 19);
    CHECK(c.last_error().find(key_of(1).to_hex()) != std::string::npos);
    CHECK(c.last_error().find(var.message) != std::string::npos);
    CHECK_FALSE(c.contains(key_of(1)));  // removed
    auto r = jitembed::cache::detail::verify_lmdb_record(bytes_view{}, key_of(1).bytes());
    CHECK(r.code() == errc::truncated);
    for (std::uint64_t i = 0; i < 20; ++i)
      if (i != 1) CHECK(equal(c.get(key_of(i))->bytes, value_of(i, var.size)));
    // The slot can be written again.
    CHECK(c.put(key_of(1), view(bad)));
    CHECK(equal(c.get(key_of(1))->bytes, bad));
    CHECK(c.stats().errors == 1);
  }
}

TEST_CASE("lmdb_cache: record check reports specific errors") {
  using namespace jitembed::cache::detail;
  const auto k = key_of(3).bytes();
  const auto v = value_of(3, 100);
  std::vector<std::byte> rec(kLmdbHeaderBytes + v.size(), std::byte{0xEE});
  REQUIRE(rec.size() == 148);
  write_lmdb_record(rec.data(), k, view(v));
  auto ok = verify_lmdb_record(view(rec), k);
  REQUIRE(ok);
  CHECK(equal(*ok, v));
  CHECK(verify_lmdb_record(view(rec), key_of(4).bytes()).code() == errc::checksum_mismatch);  // wrong key
  auto shorter = rec;
  shorter.pop_back();
  CHECK(verify_lmdb_record(view(shorter), k).code() == errc::corrupt_data);
  auto version = rec;
  version[4] = std::byte{9};
  CHECK(verify_lmdb_record(view(version), k).code() == errc::unsupported_version);
  auto reserved = rec;
  reserved[30] = std::byte{1};
  CHECK(verify_lmdb_record(view(reserved), k).error().message.find("offset 30") != std::string::npos);
}

TEST_CASE("lmdb_cache: an unusable path fails open() with io_error") {
  temp_dir dir("badpath");
  std::ofstream(dir.path / "file") << "x";
  auto o = options_for(dir.path / "file" / "cache");
  auto r = lmdb_cache::open(o);
  REQUIRE_FALSE(r);
  CHECK(r.code() == errc::io_error);
  CHECK(r.error().message.find((dir.path / "file" / "cache").string()) != std::string::npos);
  // A file where data.mdb's directory should be.
  auto r2 = lmdb_cache::open(options_for(dir.path / "file"));
  REQUIRE_FALSE(r2);
  CHECK(r2.code() == errc::io_error);
}

TEST_CASE("lmdb_cache: a full disk degrades puts to counted errors, reads keep working") {
  temp_dir dir("diskfull");
  // In a child: RLIMIT_FSIZE makes writes past 2 MiB fail with EFBIG, like a full disk.
  const pid_t pid = spawn([&]() -> int {
    std::signal(SIGXFSZ, SIG_IGN);
    auto c = lmdb_cache::open(options_for(dir.path)).value();
    for (std::uint64_t i = 0; i < 10; ++i)
      if (!c.put(key_of(i), view(value_of(i, 50000)))) return 1;
    rlimit lim{2 << 20, 2 << 20};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return 2;
    std::uint64_t failed = 0;
    for (std::uint64_t i = 10; i < 100; ++i)
      if (!c.put(key_of(i), view(value_of(i, 50000)))) ++failed;
    if (failed == 0) return 3;
    if (c.stats().errors != failed) return 4;
    for (std::uint64_t i = 0; i < 10; ++i) {
      auto v = c.get(key_of(i));
      if (!v || !equal(v->bytes, value_of(i, 50000))) return 5;
    }
    return 0;
  });
  CHECK(wait_status(pid) == 0);
  // The environment is intact afterwards.
  auto c = lmdb_cache::open(options_for(dir.path)).value();
  for (std::uint64_t i = 0; i < 10; ++i) CHECK(equal(c.get(key_of(i))->bytes, value_of(i, 50000)));
  CHECK(c.put(key_of(500), view(value_of(500, 10))));
}

TEST_CASE("lmdb_cache: threads reading and writing while the map grows") {
  temp_dir dir("threads");
  auto o = options_for(dir.path);
  o.initial_map_bytes = 256 << 10;
  auto c = lmdb_cache::open(o).value();
  constexpr int kThreads = 4;
  constexpr std::uint64_t kPer = 150;
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      std::uint64_t s = static_cast<std::uint64_t>(t) + 1;
      for (std::uint64_t n = 0; n < kPer; ++n) {
        const std::uint64_t mine = static_cast<std::uint64_t>(t) * 1000 + n;
        if (!c.put(key_of(mine), view(value_of(mine, size_of(mine) + 3000)))) bad++;
        // Read a random key written by anyone so far; a hit must be exact.
        const std::uint64_t other = (splitmix(s) % kThreads) * 1000 + splitmix(s) % (n + 1);
        if (auto v = c.get(key_of(other)); v && !equal(v->bytes, value_of(other, size_of(other) + 3000))) bad++;
      }
    });
  for (auto& t : ts) t.join();
  CHECK(bad == 0);
  CHECK(c.stats().errors == 0);
  CHECK(c.map_bytes() > o.initial_map_bytes);
  for (int t = 0; t < kThreads; ++t)
    for (std::uint64_t n = 0; n < kPer; ++n) {
      const std::uint64_t k = static_cast<std::uint64_t>(t) * 1000 + n;
      auto v = c.get(key_of(k));
      REQUIRE(v);
      CHECK(equal(v->bytes, value_of(k, size_of(k) + 3000)));
    }
}
