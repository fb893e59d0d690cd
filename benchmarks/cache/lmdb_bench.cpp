// LMDB part of bench_cache: lmdb_cache hit path for 4 KiB values against raw LMDB (a read transaction and
// mdb_get per value), and zero-copy bandwidth for 1 MiB values against memcpy from memory.
#include <lmdb.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache_benches.hpp"
#include "jitembed/cache/lmdb_cache.hpp"

namespace jitembed::bench {
namespace {

namespace fs = std::filesystem;

struct bench_dir {
  fs::path path;
  explicit bench_dir(const std::string& name)
      : path(fs::temp_directory_path() / ("jitembed_bench_lmdb_" + name + "_" + std::to_string(getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~bench_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

cache::cache_key bench_key(std::uint64_t i) { return cache::cache_key{xxh3_128(bytes_view(reinterpret_cast<const std::byte*>(&i), sizeof i))}; }

void fill_value(std::vector<std::byte>& v, std::uint64_t i) {
  std::mt19937_64 g(i);
  for (std::size_t j = 0; j + 8 <= v.size(); j += 8) {
    const std::uint64_t x = g();
    std::memcpy(v.data() + j, &x, 8);
  }
}

void check(int rc, const char* what) {
  if (rc != MDB_SUCCESS) throw std::runtime_error(std::string("bench lmdb: ") + what + ": " + mdb_strerror(rc));
}

cache::lmdb_cache open_cache(const fs::path& dir, std::size_t map) {
  cache::lmdb_options o;
  o.path = dir.string();
  o.sync = false;
  o.initial_map_bytes = map;
  return cache::lmdb_cache::open(o).value();
}

// (1) 4 KiB values: gets/s of lmdb_cache::get (snapshot, checksum check, keep_alive) + copying the value
// out, against the raw LMDB minimum for a value that outlives the call: renew a read txn, mdb_get, copy,
// reset.
void small_values(reporter& r) {
  constexpr std::size_t kKeys = 20000, kSize = 4096;
  bench_dir dir("4k"), raw_dir("4k_raw");
  auto c = open_cache(dir.path, std::size_t{512} << 20);

  MDB_env* env = nullptr;
  MDB_dbi dbi = 0;
  check(mdb_env_create(&env), "create");
  check(mdb_env_set_mapsize(env, std::size_t{512} << 20), "mapsize");
  check(mdb_env_open(env, raw_dir.path.c_str(), MDB_NOTLS | MDB_NOSYNC, 0664), "open");
  {
    MDB_txn* txn = nullptr;
    check(mdb_txn_begin(env, nullptr, 0, &txn), "begin");
    check(mdb_dbi_open(txn, nullptr, 0, &dbi), "dbi");
    std::vector<std::byte> v(kSize);
    for (std::uint64_t i = 0; i < kKeys; ++i) {
      fill_value(v, i);
      if (!c.put(bench_key(i), bytes_view(v))) throw std::runtime_error("bench lmdb: put failed: " + c.last_error());
      auto kb = bench_key(i).bytes();
      MDB_val k{kb.size(), kb.data()}, d{v.size(), v.data()};
      check(mdb_put(txn, dbi, &k, &d, 0), "put");
    }
    check(mdb_txn_commit(txn), "commit");
  }
  std::vector<std::uint64_t> order(kKeys);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(42));
  std::vector<std::array<std::byte, 16>> keys(kKeys);
  for (std::size_t i = 0; i < kKeys; ++i) keys[i] = bench_key(order[i]).bytes();
  std::vector<cache::cache_key> ckeys(kKeys);
  for (std::size_t i = 0; i < kKeys; ++i) ckeys[i] = bench_key(order[i]);

  // The consumer copies each value into a batch slot (what a loader does with it), on both sides.
  byte_buffer dst(kSize);
  volatile std::uint64_t sink = 0;
  std::uint64_t misses = 0;
  auto ours = [&] {
    std::uint64_t acc = 0;
    for (const auto& k : ckeys) {
      auto v = c.get(k);
      if (!v) {
        ++misses;
        continue;
      }
      std::memcpy(dst.data(), v->bytes.data(), v->bytes.size());
      acc += static_cast<std::uint64_t>(dst[kSize - 1]);
    }
    sink = sink + acc;
  };
  MDB_txn* rtxn = nullptr;
  check(mdb_txn_begin(env, nullptr, MDB_RDONLY, &rtxn), "rbegin");
  mdb_txn_reset(rtxn);
  auto raw = [&] {
    std::uint64_t acc = 0;
    for (auto& kb : keys) {
      check(mdb_txn_renew(rtxn), "renew");
      MDB_val k{kb.size(), kb.data()}, d{};
      if (mdb_get(rtxn, dbi, &k, &d) == MDB_SUCCESS) {
        std::memcpy(dst.data(), d.mv_data, d.mv_size);
        acc += static_cast<std::uint64_t>(dst[kSize - 1]);
      }
      mdb_txn_reset(rtxn);
    }
    sink = sink + acc;
  };
  auto [t_ours, t_raw] = side_by_side(7, ours, raw);
  std::vector<std::optional<cache::cached_value>> batch;
  const double t_multi = best_seconds(5, [&] {
    std::uint64_t acc = 0;
    for (std::size_t i = 0; i < kKeys; i += 64) {
      batch = c.multi_get(std::span<const cache::cache_key>(ckeys).subspan(i, std::min<std::size_t>(64, kKeys - i)));
      for (auto& v : batch)
        if (v) acc += static_cast<std::uint64_t>(v->bytes[0]);
    }
    batch.clear();
    sink = sink + acc;
  });
  mdb_txn_abort(rtxn);
  mdb_env_close(env);
  if (misses) throw std::runtime_error("bench lmdb: unexpected misses");
  const double n = static_cast<double>(kKeys);
  r.add("lmdb_cache.get 4KiB (random, 20k keys)", "gets_per_s", n / t_ours, "1/s");
  r.add("raw LMDB renew+get+reset 4KiB", "gets_per_s", n / t_raw, "1/s");
  r.add("lmdb_cache.get / raw LMDB 4KiB", "ratio", t_raw / t_ours, "x",
        {{"note", "consumer memcpy; ours includes the XXH3 check of every value"}});
  r.add("lmdb_cache.multi_get(64) 4KiB", "gets_per_s", n / t_multi, "1/s");
}

// (2) 1 MiB values: get + memcpy of every byte into a destination, against memcpy of the same bytes from
// heap buffers (same count, same order), i.e. zero-copy read bandwidth including the checksum pass.
void large_values(reporter& r) {
  constexpr std::size_t kKeys = 48, kSize = std::size_t{1} << 20;
  bench_dir dir("1m");
  auto c = open_cache(dir.path, std::size_t{256} << 20);
  std::vector<byte_buffer> heap(kKeys, byte_buffer(kSize));
  std::vector<std::byte> v(kSize);
  for (std::uint64_t i = 0; i < kKeys; ++i) {
    fill_value(v, i);
    std::memcpy(heap[i].data(), v.data(), kSize);
    if (!c.put(bench_key(i), bytes_view(v))) throw std::runtime_error("bench lmdb: put failed: " + c.last_error());
  }
  std::vector<std::uint64_t> order(kKeys);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  byte_buffer dst(kSize);
  std::uint64_t misses = 0;
  auto ours = [&] {
    for (auto i : order) {
      auto val = c.get(bench_key(i));
      if (!val) {
        ++misses;
        continue;
      }
      std::memcpy(dst.data(), val->bytes.data(), val->bytes.size());
    }
  };
  auto base = [&] {
    for (auto i : order) std::memcpy(dst.data(), heap[i].data(), kSize);
  };
  auto [t_ours, t_base] = side_by_side(7, ours, base);
  auto ours_hash = [&] {
    std::uint64_t acc = 0;
    for (auto i : order)
      if (auto val = c.get(bench_key(i))) acc += xxh3_64(val->bytes);
    volatile std::uint64_t s = acc;
    (void)s;
  };
  auto base_hash = [&] {
    std::uint64_t acc = 0;
    for (auto i : order) acc += xxh3_64(bytes_view(heap[i].data(), kSize));
    volatile std::uint64_t s = acc;
    (void)s;
  };
  auto [t_ours_h, t_base_h] = side_by_side(7, ours_hash, base_hash);
  if (misses) throw std::runtime_error("bench lmdb: unexpected misses");
  const double bytes = static_cast<double>(kKeys * kSize);
  r.add("lmdb_cache.get+memcpy 1MiB", "GB_per_s", bytes / t_ours / 1e9, "GB/s");
  r.add("memcpy 1MiB from heap", "GB_per_s", bytes / t_base / 1e9, "GB/s");
  r.add("lmdb_cache 1MiB bandwidth vs memcpy", "ratio", t_base / t_ours, "x", {{"consumer", "memcpy"}}, 0.8);
  r.add("lmdb_cache 1MiB vs heap, XXH3 consumer", "ratio", t_base_h / t_ours_h, "x", {{"consumer", "xxh3_64"}});
}

}  // namespace

void run_lmdb_benchmarks(reporter& r) {
  small_values(r);
  large_values(r);
}

}  // namespace jitembed::bench
