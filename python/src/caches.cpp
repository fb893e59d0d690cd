// Bindings of the caches: MemoryCache, LmdbCache, RedisCache and TieredCache, all jitembed.Cache (a shared
// any_store handle, so a cache can be a tier and a Loader's cache at once). get() hands out the value's
// tensors zero copy (they share the store's buffer: the memory store's value, LMDB's read transaction).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <vector>

#include "caches.hpp"
#include "common.hpp"
#include "jitembed/cache.hpp"
#include "jitembed/cache/lmdb_cache.hpp"
#include "jitembed/cache/redis_cache.hpp"

namespace jitembed::python {

using namespace jitembed::cache;

cache_key key_from(nb::handle k) {
  cache_key key;
  std::array<std::byte, 16> b{};
  if (nb::isinstance<nb::str>(k)) {
    const auto hex = nb::cast<std::string>(k);
    if (hex.size() != 32) raise(errc::invalid_argument, "cache key: hex string of " + std::to_string(hex.size()) + " characters, expected 32");
    auto nibble = [&](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      raise(errc::invalid_argument, "cache key: '" + hex + "' is not hex");
    };
    // to_hex() prints high then low, most significant nibble first
    std::uint64_t hi = 0, lo = 0;
    for (int i = 0; i < 16; ++i) hi = hi << 4 | static_cast<std::uint64_t>(nibble(hex[i]));
    for (int i = 16; i < 32; ++i) lo = lo << 4 | static_cast<std::uint64_t>(nibble(hex[i]));
    key.hash.high = hi;
    key.hash.low = lo;
    return key;
  }
  auto buf = get_buffer(k);
  if (buf->bytes().size() != 16) raise(errc::invalid_argument, "cache key: " + std::to_string(buf->bytes().size()) + " bytes, expected 16");
  std::memcpy(b.data(), buf->bytes().data(), 16);
  for (int i = 0; i < 8; ++i) {
    key.hash.low |= static_cast<std::uint64_t>(b[i]) << (8 * i);
    key.hash.high |= static_cast<std::uint64_t>(b[8 + i]) << (8 * i);
  }
  return key;
}

nb::bytes key_bytes(const cache_key& k) {
  const auto b = k.bytes();
  return to_bytes(bytes_view(b.data(), b.size()));
}

namespace {

nb::dict stats_dict(const cache_stats& s) {
  nb::dict d;
  d["hits"] = s.hits;
  d["misses"] = s.misses;
  d["puts"] = s.puts;
  d["evictions"] = s.evictions;
  d["errors"] = s.errors;
  d["bytes_read"] = s.bytes_read;
  d["bytes_written"] = s.bytes_written;
  d["entries"] = s.entries;
  d["bytes_held"] = s.bytes_held;
  return d;
}

struct py_memory_cache : py_cache {};
struct py_lmdb_cache : py_cache {};
struct py_redis_cache : py_cache {};
struct py_tiered_cache : py_cache {};

}  // namespace

void register_caches(nb::module_& m) {
  m.def(
      "cache_key",
      [](std::string_view model, std::string_view version, std::string_view preprocess, nb::handle content) {
        auto buf = get_buffer(content);
        return key_bytes(make_key(key_inputs{model, version, preprocess, buf->bytes()}));
      },
      nb::arg("model"), nb::arg("version"), nb::arg("preprocess"), nb::arg("content"),
      "The 16-byte content address of an embedding (XXH3-128 of model, version, preprocessing, content; docs/cache.md).");

  nb::class_<py_cache>(m, "Cache",
                       "A cache store: content-addressed keys (16 bytes, or 32 hex digits) to embedding values. A store "
                       "failure never raises: get() degrades to a miss, put() to False, both counted in stats()['errors'].")
      .def("get",
           [](py_cache& c, nb::handle key, bool verify) -> std::optional<nb::dict> {
             const cache_key k = key_from(key);
             std::optional<cached_value> v;
             result<embedding_value> ev = fail(errc::not_found, "");
             std::vector<std::pair<std::string, tensor>> tensors;
             {
               nb::gil_scoped_release nogil;
               v = c.s.get(k);
               if (v) ev = decode_value(*v, {}, verify ? format::checksum_policy::verify : format::checksum_policy::skip);
             }
             if (!v) return std::nullopt;
             const embedding_value val = unwrap(std::move(ev));
             auto ts = unwrap(val.tensors());
             nb::dict d;
             for (auto& [name, t] : ts) {
               const bool shared = t.owner().get() == v->keep_alive.get();
               d[nb::str(name.c_str())] = to_numpy(t, shared);
             }
             return d;
           },
           nb::arg("key"), nb::arg("verify") = true,
           "The named tensors stored under `key`, or None on a miss. Raw tensors point into the store's buffer "
           "(read-only, no copy); a value that fails its checks raises (e.g. ChecksumMismatchError).")
      .def("put",
           [](py_cache& c, nb::handle key, nb::dict tensors, std::string_view compression_name, int level) {
             const cache_key k = key_from(key);
             std::vector<std::string> names;
             std::vector<array_in> arrays;
             for (auto [n, a] : tensors) {
               names.push_back(nb::cast<std::string>(n));
               arrays.push_back(nb::cast<array_in>(a));
             }
             std::vector<named_tensor> nt;
             for (std::size_t i = 0; i < names.size(); ++i) nt.emplace_back(names[i], to_view(arrays[i]));
             value_options o;
             if (compression_name == "zstd") o.compression = format::compression::zstd;
             else if (compression_name != "raw") raise(errc::invalid_argument, "compression '" + std::string(compression_name) + "' is not raw or zstd");
             o.level = level;
             nb::gil_scoped_release nogil;
             const byte_buffer value = unwrap(encode_value(nt, o));
             return c.s.put(k, value);
           },
           nb::arg("key"), nb::arg("tensors"), nb::arg("compression") = "raw", nb::arg("level") = 3,
           "Stores {name: array} under `key` as one value (raw, or shuffle+zstd); False when the store did not take it.")
      .def("get_bytes",
           [](py_cache& c, nb::handle key) -> std::optional<nb::bytes> {
             const cache_key k = key_from(key);
             std::optional<cached_value> v;
             {
               nb::gil_scoped_release nogil;
               v = c.s.get(k);
             }
             if (!v) return std::nullopt;
             return to_bytes(v->bytes);
           },
           nb::arg("key"), "The raw value bytes (an encoded record), or None.")
      .def("put_bytes",
           [](py_cache& c, nb::handle key, nb::handle value) {
             const cache_key k = key_from(key);
             auto buf = get_buffer(value);
             nb::gil_scoped_release nogil;
             return c.s.put(k, buf->bytes());
           },
           nb::arg("key"), nb::arg("value"), "Stores raw value bytes.")
      .def("contains",
           [](py_cache& c, nb::handle key) {
             const cache_key k = key_from(key);
             nb::gil_scoped_release nogil;
             return c.s.contains(k);
           }, nb::arg("key"))
      .def("__contains__",
           [](py_cache& c, nb::handle key) {
             const cache_key k = key_from(key);
             nb::gil_scoped_release nogil;
             return c.s.contains(k);
           }, nb::arg("key"))
      .def("erase",
           [](py_cache& c, nb::handle key) {
             const cache_key k = key_from(key);
             nb::gil_scoped_release nogil;
             return c.s.erase(k);
           }, nb::arg("key"))
      .def("stats", [](const py_cache& c) { return stats_dict(c.s.stats()); }, "Counters (a snapshot).");

  nb::class_<py_memory_cache, py_cache>(m, "MemoryCache", "In-process LRU store with a byte budget (sharded, thread-safe).")
      .def(
          "__init__",
          [](py_memory_cache* self, std::size_t byte_budget, std::size_t shards) {
            new (self) py_memory_cache{};
            self->s = any_store(std::in_place_type<memory_cache>, byte_budget, shards);
          },
          nb::arg("byte_budget") = std::size_t{1} << 30, nb::arg("shards") = 16);

  nb::class_<py_lmdb_cache, py_cache>(m, "LmdbCache", "The embedded LMDB store (a directory; zero-copy reads).")
      .def(
          "__init__",
          [](py_lmdb_cache* self, std::string path, std::size_t max_bytes, bool sync, std::size_t initial_map_bytes,
             std::size_t max_map_bytes) {
            lmdb_options o;
            o.path = std::move(path);
            o.max_bytes = max_bytes;
            o.sync = sync;
            if (initial_map_bytes) o.initial_map_bytes = initial_map_bytes;
            if (max_map_bytes) o.max_map_bytes = max_map_bytes;
            result<lmdb_cache> r = fail(errc::internal, "");
            {
              nb::gil_scoped_release nogil;
              r = lmdb_cache::open(o);
            }
            auto c = unwrap(std::move(r));
            new (self) py_lmdb_cache{};
            self->s = any_store(std::move(c));
          },
          nb::arg("path"), nb::arg("max_bytes") = 0, nb::arg("sync") = true, nb::arg("initial_map_bytes") = 0,
          nb::arg("max_map_bytes") = 0, "Opens (creating) the LMDB environment in directory `path`.");

  nb::class_<py_redis_cache, py_cache>(m, "RedisCache", "A shared Redis store (hiredis; pooled connections).")
      .def(
          "__init__",
          [](py_redis_cache* self, std::string host, int port, std::string prefix, std::string unix_socket, std::int64_t ttl_s,
             int db, std::string password, std::int64_t connect_timeout_ms, std::int64_t io_timeout_ms, std::size_t pool_size) {
            redis_options o;
            o.host = std::move(host);
            o.port = port;
            o.prefix = std::move(prefix);
            o.unix_socket = std::move(unix_socket);
            o.ttl = std::chrono::seconds(ttl_s);
            o.db = db;
            o.password = std::move(password);
            o.connect_timeout = std::chrono::milliseconds(connect_timeout_ms);
            o.io_timeout = std::chrono::milliseconds(io_timeout_ms);
            o.pool_size = pool_size;
            result<redis_cache> r = fail(errc::internal, "");
            {
              nb::gil_scoped_release nogil;
              r = redis_cache::open(std::move(o));
            }
            auto c = unwrap(std::move(r));
            new (self) py_redis_cache{};
            self->s = any_store(std::move(c));
          },
          nb::arg("host") = "127.0.0.1", nb::arg("port") = 6379, nb::arg("prefix") = "jitembed:", nb::arg("unix_socket") = "",
          nb::arg("ttl_s") = 0, nb::arg("db") = 0, nb::arg("password") = "", nb::arg("connect_timeout_ms") = 200,
          nb::arg("io_timeout_ms") = 500, nb::arg("pool_size") = 4,
          "Connects and PINGs the server (IoError when it does not answer).");

  nb::class_<py_tiered_cache, py_cache>(m, "TieredCache", "Tiers of caches, fastest first (memory -> LMDB -> Redis).")
      .def(
          "__init__",
          [](py_tiered_cache* self, const std::vector<const py_cache*>& tiers, bool promote_on_hit, bool write_through) {
            std::vector<any_store> t;
            for (const auto* c : tiers) t.push_back(c->s);
            tiered_options o;
            o.promote_on_hit = promote_on_hit;
            o.write_through = write_through;
            new (self) py_tiered_cache{};
            self->s = any_store(std::in_place_type<tiered_cache>, std::move(t), o);
          },
          nb::arg("tiers"), nb::arg("promote_on_hit") = true, nb::arg("write_through") = true,
          "The tiers share their stores with the Cache objects given (copies of the same handle).")
      .def("tier_stats", [](const py_tiered_cache& c) {
        nb::list l;
        if (auto* t = c.s.target<tiered_cache>())
          for (const auto& s : t->tier_stats()) l.append(stats_dict(s));
        return l;
      });
}

}  // namespace jitembed::python
