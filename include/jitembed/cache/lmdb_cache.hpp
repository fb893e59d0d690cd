// lmdb_cache: the embedded cache store (default ./.jitembed/cache): one LMDB environment shared by the
// threads and processes of a loader, zero-copy reads, checksummed values, a growing map and a size cap.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/cache/detail/lmdb_store.hpp"
#include "jitembed/cache/lmdb_options.hpp"
#include "jitembed/cache/store.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::cache {

// The LMDB store. Models cache_store; all members are thread-safe, and several processes may open the
// same path (each process gets one MDB_env per path, shared by every lmdb_cache opened on it; the first
// opener's env settings - map sizes, max_readers, sync, reader_pool, resize_timeout - apply).
//
// A handle shared on purpose (docs/api.md rule 2.4): copies refer to the same open store (counters, LRU
// touches, last_error), so one open() serves every loader worker; the store closes with its last copy.
// A moved-from handle may only be destroyed or assigned to.
//
// Values are zero-copy: cached_value::bytes points into the read-only map and keep_alive holds the read
// transaction (snapshot) it came from, shared by all values read while nothing was committed. Consequences:
// a held value pins the pages of its snapshot (LMDB cannot reuse them, so the file grows while old values
// are held) and keeps one reader slot; and the map can only be resized while this process holds no value.
// Release values promptly (copy what must live long).
//
// Never throws from get/multi_get/put/contains/erase/stats: failures are counted in stats().errors and
// degrade to a miss / a dropped put; last_error() says what happened last.
class lmdb_cache {
 public:
  // Opens (creating the directory and the environment if needed) the store at opts.path; io_error when the
  // path cannot be created or LMDB refuses it.
  static result<lmdb_cache> open(const lmdb_options& opts = {}) {
    JITEMBED_ASSIGN_OR_RETURN(auto s, detail::lmdb_store::open(opts));
    return lmdb_cache(std::move(s));
  }

  std::optional<cached_value> get(const cache_key& k) { return s_->get(k); }
  // One read transaction for all keys.
  std::vector<std::optional<cached_value>> multi_get(std::span<const cache_key> keys) { return s_->multi_get(keys); }
  // Stores a copy of value (written straight into LMDB's page with MDB_RESERVE). An existing intact value
  // is left alone (content addressing); an existing corrupt one is replaced. With max_bytes set, the least
  // recently used values are evicted in the same transaction until the total is back under the cap.
  bool put(const cache_key& k, bytes_view value) { return s_->put(k, value); }
  // Presence with a header check (no checksum pass over the value; get() does that).
  bool contains(const cache_key& k) { return s_->contains(k); }
  bool erase(const cache_key& k) { return s_->erase(k); }
  // Counters of this store (all copies of the handle), plus entries / bytes_held of the whole environment
  // (all processes).
  cache_stats stats() { return s_->stats(); }
  // Writes the hits remembered for the LRU index now (puts do it anyway; so does a full touch buffer).
  bool flush_touches() { return s_->flush_touches(); }
  // Forces written data to disk (useful with sync = false).
  bool sync() { return s_->sync(); }

  std::size_t map_bytes() const noexcept { return s_->map_bytes(); }
  const std::string& path() const noexcept { return s_->path(); }  // canonical
  const lmdb_options& options() const noexcept { return s_->options(); }
  // The message of the most recent failure ("" if none), for logs.
  std::string last_error() const { return s_->last_error(); }

 private:
  explicit lmdb_cache(std::shared_ptr<detail::lmdb_store> s) noexcept : s_(std::move(s)) {}
  std::shared_ptr<detail::lmdb_store> s_;
};

static_assert(cache_store<lmdb_cache>);

}  // namespace jitembed::cache
