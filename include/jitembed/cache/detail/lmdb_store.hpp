// The LMDB store behind the lmdb_cache handle (cache/lmdb_cache.hpp): one object per open(), shared by
// the handle's copies.
#pragma once

#include <lmdb.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/cache/detail/lmdb_env.hpp"
#include "jitembed/cache/detail/lmdb_record.hpp"
#include "jitembed/cache/lmdb_options.hpp"
#include "jitembed/cache/store.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::cache::detail {

class lmdb_store {
 public:
  static result<std::shared_ptr<lmdb_store>> open(const lmdb_options& opts = {}) {
    try {
      lmdb_env_config cfg;
      cfg.path = opts.path;
      cfg.initial_map_bytes = opts.initial_map_bytes;
      cfg.max_map_bytes = std::max(opts.max_map_bytes, opts.initial_map_bytes);
      cfg.max_readers = opts.max_readers;
      cfg.sync = opts.sync;
      cfg.reader_pool = opts.reader_pool;
      cfg.resize_timeout = opts.resize_timeout;
      JITEMBED_ASSIGN_OR_RETURN(auto env, lmdb_env::open(cfg));
      return std::make_shared<lmdb_store>(std::move(env), opts);
    } catch (const std::exception& e) {
      return fail(errc::io_error, std::string("lmdb: open('") + opts.path + "'): " + e.what());
    }
  }

  lmdb_store(std::shared_ptr<lmdb_env> env, lmdb_options opts) : env_(std::move(env)), opts_(std::move(opts)) {}
  lmdb_store(const lmdb_store&) = delete;
  lmdb_store& operator=(const lmdb_store&) = delete;
  ~lmdb_store() { (void)flush_touches(); }

  std::optional<cached_value> get(const cache_key& k) {
    try {
      auto snap = env_->snapshot();
      if (!snap) return failed_miss(snap.error());
      const auto kb = k.bytes();
      bool corrupt = false;
      auto v = lookup(*snap, kb, corrupt);
      if (corrupt) {
        *snap = nullptr;
        erase_corrupt(kb);
      }
      return v;
    } catch (...) {
      return failed_miss(fail(errc::internal, "lmdb: get: exception"));
    }
  }

  // One read transaction for all keys.
  std::vector<std::optional<cached_value>> multi_get(std::span<const cache_key> keys) {
    std::vector<std::optional<cached_value>> out;
    try {
      out.resize(keys.size());
      auto snap = env_->snapshot();
      if (!snap) {
        for (std::size_t i = 0; i < keys.size(); ++i) failed_miss(snap.error());
        return out;
      }
      std::vector<lmdb_key_bytes> bad;
      for (std::size_t i = 0; i < keys.size(); ++i) {
        const auto kb = keys[i].bytes();
        bool corrupt = false;
        out[i] = lookup(*snap, kb, corrupt);
        if (corrupt) bad.push_back(kb);
      }
      *snap = nullptr;
      for (const auto& kb : bad) erase_corrupt(kb);
    } catch (...) {
      note_error(fail(errc::internal, "lmdb: multi_get: exception"));
    }
    return out;
  }

  // Stores a copy of value (written straight into LMDB's page with MDB_RESERVE). An existing intact value
  // is left alone (content addressing); an existing corrupt one is replaced. With max_bytes set, the least
  // recently used values are evicted in the same transaction until the total is back under the cap.
  bool put(const cache_key& k, bytes_view value) {
    try {
      if (value.size() > kLmdbMaxValueBytes) return false;
      const std::size_t rec = kLmdbHeaderBytes + value.size();
      const std::uint64_t cost = lmdb_record_cost(rec, env_->page_bytes());
      if (opts_.max_bytes != 0 && cost > opts_.max_bytes) return false;  // larger than the whole budget
      env_->maybe_grow_early(rec);
      const auto kb = k.bytes();
      auto touches = take_touches();
      std::uint64_t evicted = 0;
      bool existed = false;
      const int rc = env_->write([&](MDB_txn* txn) -> int {
        evicted = 0;
        existed = false;
        info_state info;
        int r = load_info(txn, info);
        if (r != MDB_SUCCESS) return r;
        if ((r = apply_touches(txn, touches, info)) != MDB_SUCCESS) return r;
        MDB_val key{kb.size(), const_cast<std::byte*>(kb.data())};
        MDB_val data{rec, nullptr};
        r = mdb_put(txn, env_->values_dbi(), &key, &data, MDB_NOOVERWRITE | MDB_RESERVE);
        if (r == MDB_KEYEXIST) {
          const bytes_view old(static_cast<const std::byte*>(data.mv_data), data.mv_size);
          if (verify_lmdb_record(old, kb)) {
            existed = true;
            if (touches.empty()) return kLmdbNoCommit;
            return store_info(txn, info);
          }
          if ((r = remove_entry(txn, kb, info)) != MDB_SUCCESS) return r;
          data = MDB_val{rec, nullptr};
          r = mdb_put(txn, env_->values_dbi(), &key, &data, MDB_NOOVERWRITE | MDB_RESERVE);
        }
        if (r != MDB_SUCCESS) return r;
        write_lmdb_record(static_cast<std::byte*>(data.mv_data), kb, value);
        const std::uint64_t tick = ++info.tick;
        if ((r = put_meta(txn, kb, tick, cost)) != MDB_SUCCESS) return r;
        info.bytes += cost;
        info.entries += 1;
        if (opts_.max_bytes != 0 && (r = evict(txn, info, kb, evicted)) != MDB_SUCCESS) return r;
        return store_info(txn, info);
      });
      if (rc == MDB_SUCCESS || rc == kLmdbNoCommit) {
        if (!existed) {
          stats_.puts.fetch_add(1, std::memory_order_relaxed);
          stats_.bytes_written.fetch_add(value.size(), std::memory_order_relaxed);
        }
        stats_.evictions.fetch_add(evicted, std::memory_order_relaxed);
        return true;
      }
      note_error(fail(errc::io_error, "lmdb: put of " + std::to_string(value.size()) + " bytes (key " + k.to_hex() +
                                          ") into '" + env_->path() + "': " + lmdb_strerror(rc)));
      return false;
    } catch (...) {
      note_error(fail(errc::internal, "lmdb: put: exception"));
      return false;
    }
  }

  // Presence with a header check (no checksum pass over the value; get() does that).
  bool contains(const cache_key& k) {
    try {
      auto snap = env_->snapshot();
      if (!snap) {
        note_error(snap.error());
        return false;
      }
      const auto kb = k.bytes();
      MDB_val key{kb.size(), const_cast<std::byte*>(kb.data())}, data{};
      const int rc = mdb_get((*snap)->txn, env_->values_dbi(), &key, &data);
      if (rc == MDB_NOTFOUND) return false;
      if (rc != MDB_SUCCESS) {
        note_error(fail(errc::io_error, "lmdb: contains: " + lmdb_strerror(rc)));
        return false;
      }
      return static_cast<bool>(
          verify_lmdb_record(bytes_view(static_cast<const std::byte*>(data.mv_data), data.mv_size), kb, false));
    } catch (...) {
      note_error(fail(errc::internal, "lmdb: contains: exception"));
      return false;
    }
  }

  bool erase(const cache_key& k) {
    try {
      const auto kb = k.bytes();
      bool removed = false;
      const int rc = env_->write([&](MDB_txn* txn) -> int {
        info_state info;
        int r = load_info(txn, info);
        if (r != MDB_SUCCESS) return r;
        removed = false;
        if ((r = remove_entry(txn, kb, info, &removed)) != MDB_SUCCESS) return r;
        return removed ? store_info(txn, info) : kLmdbNoCommit;
      });
      if (rc == MDB_SUCCESS) return true;
      if (rc == kLmdbNoCommit) return false;
      note_error(fail(errc::io_error, "lmdb: erase: " + lmdb_strerror(rc)));
      return false;
    } catch (...) {
      note_error(fail(errc::internal, "lmdb: erase: exception"));
      return false;
    }
  }

  // Counters of this store (shared by the copies of its lmdb_cache handle), plus entries / bytes_held of
  // the whole environment (all processes).
  cache_stats stats() {
    cache_stats s = stats_.snapshot();
    try {
      auto snap = env_->snapshot();
      if (snap) {
        info_state info;
        if (load_info((*snap)->txn, info) == MDB_SUCCESS) {
          s.entries = info.entries;
          s.bytes_held = info.bytes;
        }
      }
    } catch (...) {
    }
    return s;
  }

  // Writes the hits remembered for the LRU index now (puts do it anyway; so does a full touch buffer).
  bool flush_touches() {
    try {
      auto touches = take_touches();
      if (touches.empty()) return true;
      const int rc = env_->write([&](MDB_txn* txn) -> int {
        info_state info;
        int r = load_info(txn, info);
        if (r != MDB_SUCCESS) return r;
        if ((r = apply_touches(txn, touches, info)) != MDB_SUCCESS) return r;
        return store_info(txn, info);
      });
      if (rc == MDB_SUCCESS) return true;
      note_error(fail(errc::io_error, "lmdb: writing access order: " + lmdb_strerror(rc)));
    } catch (...) {
      note_error(fail(errc::internal, "lmdb: flush_touches: exception"));
    }
    return false;
  }

  // Forces written data to disk (useful with sync = false).
  bool sync() {
    const int rc = mdb_env_sync(env_->handle(), 1);
    if (rc == MDB_SUCCESS) return true;
    note_error(fail(errc::io_error, "lmdb: sync: " + lmdb_strerror(rc)));
    return false;
  }

  std::size_t map_bytes() const noexcept { return env_->map_bytes(); }
  const std::string& path() const noexcept { return env_->path(); }  // canonical
  const lmdb_options& options() const noexcept { return opts_; }
  std::string last_error() const {
    std::lock_guard lk(error_mu_);
    return last_error_;
  }

 private:
  // Environment-wide counters, one record in the "info" DB, updated in every write transaction.
  struct info_state {
    std::uint64_t bytes = 0, entries = 0, tick = 0;
  };
  static constexpr char kInfoKey[] = "jitembed:state";  // in the main DB; never 16 bytes long like a value key


  std::optional<cached_value> failed_miss(const error_info& e) {
    note_error(e);
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }

  void note_error(const error_info& e) noexcept {
    stats_.errors.fetch_add(1, std::memory_order_relaxed);
    try {
      std::lock_guard lk(error_mu_);
      last_error_ = e.message;
    } catch (...) {
    }
  }

  std::optional<cached_value> lookup(const std::shared_ptr<const lmdb_snapshot>& snap,
                                     const lmdb_key_bytes& kb, bool& corrupt) {
    MDB_val key{kb.size(), const_cast<std::byte*>(kb.data())}, data{};
    const int rc = mdb_get(snap->txn, env_->values_dbi(), &key, &data);
    if (rc == MDB_NOTFOUND) {
      stats_.misses.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    if (rc != MDB_SUCCESS) return failed_miss(fail(errc::io_error, "lmdb: get: " + lmdb_strerror(rc)));
    auto v = verify_lmdb_record(bytes_view(static_cast<const std::byte*>(data.mv_data), data.mv_size), kb);
    if (!v) {
      corrupt = true;
      return failed_miss(v.error());
    }
    stats_.hits.fetch_add(1, std::memory_order_relaxed);
    stats_.bytes_read.fetch_add(v->size(), std::memory_order_relaxed);
    touch(kb);
    return cached_value{*v, jitembed::keep_alive(snap, snap.get())};
  }

  // Removes a value that failed its check, unless it was replaced by an intact one meanwhile.
  void erase_corrupt(const lmdb_key_bytes& kb) {
    (void)env_->write([&](MDB_txn* txn) -> int {
      MDB_val key{kb.size(), const_cast<std::byte*>(kb.data())}, data{};
      int r = mdb_get(txn, env_->values_dbi(), &key, &data);
      if (r == MDB_NOTFOUND) return kLmdbNoCommit;
      if (r != MDB_SUCCESS) return r;
      if (verify_lmdb_record(bytes_view(static_cast<const std::byte*>(data.mv_data), data.mv_size), kb))
        return kLmdbNoCommit;
      info_state info;
      if ((r = load_info(txn, info)) != MDB_SUCCESS) return r;
      if ((r = remove_entry(txn, kb, info)) != MDB_SUCCESS) return r;
      return store_info(txn, info);
    });
  }

  void touch(const lmdb_key_bytes& kb) {
    if (opts_.max_bytes == 0) return;  // the access order only matters for eviction
    bool full = false;
    {
      std::lock_guard lk(touch_mu_);
      if (touches_.size() < opts_.touch_batch) touches_.push_back(kb);
      full = touches_.size() >= opts_.touch_batch;
    }
    if (full) (void)flush_touches();
  }

  std::vector<lmdb_key_bytes> take_touches() {
    std::vector<lmdb_key_bytes> t;
    std::lock_guard lk(touch_mu_);
    t.swap(touches_);
    return t;
  }

  int load_info(MDB_txn* txn, info_state& info) const {
    MDB_val key{sizeof kInfoKey - 1, const_cast<char*>(kInfoKey)}, data{};
    const int rc = mdb_get(txn, env_->values_dbi(), &key, &data);
    info = {};
    if (rc == MDB_NOTFOUND) return MDB_SUCCESS;
    if (rc != MDB_SUCCESS) return rc;
    if (data.mv_size == 24) {  // anything else: counters restart from zero (they are approximate anyway)
      const auto* p = static_cast<const std::byte*>(data.mv_data);
      info.bytes = load_le<std::uint64_t>(p);
      info.entries = load_le<std::uint64_t>(p + 8);
      info.tick = load_le<std::uint64_t>(p + 16);
    }
    return MDB_SUCCESS;
  }

  int store_info(MDB_txn* txn, const info_state& info) const {
    std::byte buf[24];
    store_le<std::uint64_t>(buf, info.bytes);
    store_le<std::uint64_t>(buf + 8, info.entries);
    store_le<std::uint64_t>(buf + 16, info.tick);
    MDB_val key{sizeof kInfoKey - 1, const_cast<char*>(kInfoKey)}, data{sizeof buf, buf};
    return mdb_put(txn, env_->values_dbi(), &key, &data, 0);
  }

  static std::array<std::byte, 8 + kLmdbKeyBytes> lru_key(std::uint64_t tick, const lmdb_key_bytes& kb) {
    std::array<std::byte, 8 + kLmdbKeyBytes> k{};
    for (int i = 0; i < 8; ++i) k[i] = static_cast<std::byte>(tick >> (56 - 8 * i));  // big-endian: sorts by tick
    std::copy(kb.begin(), kb.end(), k.begin() + 8);
    return k;
  }

  // meta: key -> (tick, cost); lru: (tick, key) -> empty. Replaces an older lru entry of the key.
  int put_meta(MDB_txn* txn, const lmdb_key_bytes& kb, std::uint64_t tick, std::uint64_t cost) {
    std::byte m[16];
    store_le<std::uint64_t>(m, tick);
    store_le<std::uint64_t>(m + 8, cost);
    MDB_val key{kb.size(), const_cast<std::byte*>(kb.data())}, data{sizeof m, m};
    int rc = mdb_put(txn, env_->meta_dbi(), &key, &data, 0);
    if (rc != MDB_SUCCESS) return rc;
    auto lk = lru_key(tick, kb);
    MDB_val lkey{lk.size(), lk.data()}, empty{0, nullptr};
    return mdb_put(txn, env_->lru_dbi(), &lkey, &empty, 0);
  }

  int apply_touches(MDB_txn* txn, std::vector<lmdb_key_bytes>& touches, info_state& info) {
    if (touches.empty()) return MDB_SUCCESS;
    std::sort(touches.begin(), touches.end());
    touches.erase(std::unique(touches.begin(), touches.end()), touches.end());
    for (const auto& kb : touches) {
      MDB_val key{kb.size(), const_cast<std::byte*>(kb.data())}, data{};
      int rc = mdb_get(txn, env_->meta_dbi(), &key, &data);
      if (rc == MDB_NOTFOUND) continue;  // evicted or erased since
      if (rc != MDB_SUCCESS) return rc;
      if (data.mv_size != 16) continue;
      const auto* p = static_cast<const std::byte*>(data.mv_data);
      const std::uint64_t old_tick = load_le<std::uint64_t>(p), cost = load_le<std::uint64_t>(p + 8);
      auto old = lru_key(old_tick, kb);
      MDB_val okey{old.size(), old.data()};
      rc = mdb_del(txn, env_->lru_dbi(), &okey, nullptr);
      if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) return rc;
      if ((rc = put_meta(txn, kb, ++info.tick, cost)) != MDB_SUCCESS) return rc;
    }
    return MDB_SUCCESS;
  }

  // Deletes the value and its access-order entries; adjusts the counters.
  int remove_entry(MDB_txn* txn, const lmdb_key_bytes& kb, info_state& info, bool* removed = nullptr) {
    MDB_val key{kb.size(), const_cast<std::byte*>(kb.data())}, data{};
    std::uint64_t cost = 0;
    bool had_meta = false, had_value = false;
    int rc = mdb_get(txn, env_->meta_dbi(), &key, &data);
    if (rc == MDB_SUCCESS) {
      had_meta = true;
      if (data.mv_size == 16) {
        const auto* p = static_cast<const std::byte*>(data.mv_data);
        cost = load_le<std::uint64_t>(p + 8);
        auto lk = lru_key(load_le<std::uint64_t>(p), kb);
        MDB_val lkey{lk.size(), lk.data()};
        rc = mdb_del(txn, env_->lru_dbi(), &lkey, nullptr);
        if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) return rc;
      }
      if ((rc = mdb_del(txn, env_->meta_dbi(), &key, nullptr)) != MDB_SUCCESS) return rc;
    } else if (rc != MDB_NOTFOUND) {
      return rc;
    }
    rc = mdb_get(txn, env_->values_dbi(), &key, &data);
    if (rc == MDB_SUCCESS) {
      had_value = true;
      if (!had_meta) cost = lmdb_record_cost(data.mv_size, env_->page_bytes());
      if ((rc = mdb_del(txn, env_->values_dbi(), &key, nullptr)) != MDB_SUCCESS) return rc;
    } else if (rc != MDB_NOTFOUND) {
      return rc;
    }
    if (had_meta || had_value) info.bytes -= std::min(info.bytes, cost);
    if (had_value && info.entries > 0) info.entries -= 1;
    if (removed) *removed = had_value;
    return MDB_SUCCESS;
  }

  // Evicts the oldest entries (lowest tick) until the counted bytes are under max_bytes; never `keep`.
  int evict(MDB_txn* txn, info_state& info, const lmdb_key_bytes& keep, std::uint64_t& evicted) {
    if (info.bytes <= opts_.max_bytes) return MDB_SUCCESS;
    MDB_cursor* cur = nullptr;
    int rc = mdb_cursor_open(txn, env_->lru_dbi(), &cur);
    if (rc != MDB_SUCCESS) return rc;
    while (info.bytes > opts_.max_bytes) {
      MDB_val lkey{}, ldata{};
      rc = mdb_cursor_get(cur, &lkey, &ldata, MDB_FIRST);
      if (rc == MDB_NOTFOUND) {
        rc = MDB_SUCCESS;  // counters drifted above what the index knows: nothing left to evict
        break;
      }
      if (rc != MDB_SUCCESS) break;
      std::array<std::byte, 8 + kLmdbKeyBytes> lk{};
      if (lkey.mv_size != lk.size()) {
        if ((rc = mdb_cursor_del(cur, 0)) != MDB_SUCCESS) break;
        continue;
      }
      std::memcpy(lk.data(), lkey.mv_data, lk.size());
      lmdb_key_bytes kb{};
      std::copy(lk.begin() + 8, lk.end(), kb.begin());
      if (kb == keep) break;
      bool removed = false;
      if ((rc = remove_entry(txn, kb, info, &removed)) != MDB_SUCCESS) break;
      MDB_val again{lk.size(), lk.data()};
      rc = mdb_del(txn, env_->lru_dbi(), &again, nullptr);  // in case meta pointed elsewhere
      if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) break;
      rc = MDB_SUCCESS;
      if (removed) ++evicted;
    }
    mdb_cursor_close(cur);
    return rc;
  }

  std::shared_ptr<lmdb_env> env_;
  lmdb_options opts_;
  stats_counters stats_;
  std::mutex touch_mu_;
  std::vector<lmdb_key_bytes> touches_;
  mutable std::mutex error_mu_;
  std::string last_error_;
};

static_assert(cache_store<lmdb_store>);

}  // namespace jitembed::cache::detail
