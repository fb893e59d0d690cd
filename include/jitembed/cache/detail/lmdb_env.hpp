// One MDB_env per process and path (a process-wide registry), shared read snapshots that keep zero-copy
// values alive, and write transactions that grow the map on MDB_MAP_FULL / adopt another process's map.
#pragma once

#include <lmdb.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jitembed/cache/detail/lmdb_txn_gate.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::cache::detail {

// Env-wide settings; the first opener of a path in a process chooses them.
struct lmdb_env_config {
  std::string path;
  std::size_t initial_map_bytes = std::size_t{256} << 20;
  std::size_t max_map_bytes = std::size_t{1} << 40;
  unsigned max_readers = 256;
  bool sync = true;
  unsigned reader_pool = 8;
  std::chrono::milliseconds resize_timeout{1000};
};

inline std::string lmdb_strerror(int rc) { return std::string(mdb_strerror(rc)) + " (" + std::to_string(rc) + ")"; }

class lmdb_env;

// A read transaction shared by every value read from it; reset and returned to the pool when the last
// value (or the last user) lets go.
struct lmdb_snapshot {
  lmdb_snapshot(MDB_txn* t, std::shared_ptr<lmdb_env> e) noexcept
      : txn(t), txnid(static_cast<std::uint64_t>(mdb_txn_id(t))), env(std::move(e)) {}
  lmdb_snapshot(const lmdb_snapshot&) = delete;
  lmdb_snapshot& operator=(const lmdb_snapshot&) = delete;
  inline ~lmdb_snapshot();

  MDB_txn* txn;
  std::uint64_t txnid;
  std::shared_ptr<lmdb_env> env;
};

// Returned by a write body to abort without error (nothing to change).
inline constexpr int kLmdbNoCommit = -1;

class lmdb_env : public std::enable_shared_from_this<lmdb_env> {
 public:
  // The process's env for cfg.path (created with its directory on first use).
  static result<std::shared_ptr<lmdb_env>> open(const lmdb_env_config& cfg);

  lmdb_env(const lmdb_env&) = delete;
  lmdb_env& operator=(const lmdb_env&) = delete;

  // Values (16-byte keys) and the counters record (a longer key) live in LMDB's main DB, which - unlike a
  // named DB - needs no per-transaction root refresh, so concurrent reads never write to a shared read
  // transaction. The access-order index is in the named DBs "meta" and "lru", used by write transactions only.
  MDB_dbi values_dbi() const noexcept { return values_; }
  MDB_dbi meta_dbi() const noexcept { return meta_; }
  MDB_dbi lru_dbi() const noexcept { return lru_; }
  std::size_t page_bytes() const noexcept { return page_bytes_; }
  std::size_t map_bytes() const noexcept { return map_bytes_.load(std::memory_order_relaxed); }
  const std::string& path() const noexcept { return cfg_.path; }
  const lmdb_env_config& config() const noexcept { return cfg_; }
  MDB_env* handle() const noexcept { return env_; }

  // A read snapshot of the current state: the live one if nothing was committed since it began, else a
  // new one (a pooled transaction renewed).
  //
  // When another process grew the data past this process's map (MDB_MAP_RESIZED) while values are held
  // here, the map cannot be adopted until they are released: the live snapshot is returned instead (an
  // older consistent view: newer values read as misses), rather than waiting or failing.
  result<std::shared_ptr<const lmdb_snapshot>> snapshot() {
    if (forked()) return fail(errc::invalid_argument, "lmdb: env of '" + cfg_.path + "' used after fork(); open it again in the child");
    std::lock_guard lk(snap_mu_);
    std::shared_ptr<const lmdb_snapshot> stale = current_.lock();
    if (stale) {
      MDB_envinfo info;  // safe: the live snapshot keeps the gate entered, so the map cannot move
      if (mdb_env_info(env_, &info) == MDB_SUCCESS && info.me_last_txnid == stale->txnid) return stale;
    }
    for (int attempt = 0; attempt < 8; ++attempt) {
      if (broken_.load()) return fail(errc::io_error, "lmdb: env of '" + cfg_.path + "' is unusable after a failed remap");
      MDB_txn* txn = gate_.enter_and_take();
      int rc = txn ? mdb_txn_renew(txn) : mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn);
      if (rc == MDB_SUCCESS) {
        std::shared_ptr<const lmdb_snapshot> s;
        try {
          s = std::make_shared<const lmdb_snapshot>(txn, shared_from_this());
        } catch (...) {
          mdb_txn_abort(txn);
          gate_.leave();
          throw;
        }
        current_ = s;
        return s;
      }
      if (txn) mdb_txn_abort(txn);  // a failed renew leaves the handle; a failed begin frees it (txn stays null)
      gate_.leave();
      if (rc == MDB_MAP_RESIZED) {
        const bool had_stale = static_cast<bool>(stale);
        stale.reset();  // our own reference would block the adoption
        if (adopt_map(had_stale ? std::chrono::milliseconds(0) : cfg_.resize_timeout)) continue;
        if (had_stale && (stale = current_.lock())) return stale;
        if (had_stale && adopt_map(cfg_.resize_timeout)) continue;
      }
      return fail(errc::io_error, "lmdb: read transaction on '" + cfg_.path + "': " + lmdb_strerror(rc));
    }
    return fail(errc::io_error, "lmdb: read transaction on '" + cfg_.path + "': map kept changing");
  }

  // Runs body(MDB_txn*) -> int in a write transaction and commits when it returns 0 (aborts otherwise).
  // On MDB_MAP_FULL the map grows and on MDB_MAP_RESIZED it adopts the size another process set, then the
  // body runs again from scratch. Returns the LMDB code (0, kLmdbNoCommit, or an error).
  template <class F>
  int write(F&& body) {
    if (forked() || broken_.load()) return EINVAL;
    for (int attempt = 0; attempt < 16; ++attempt) {
      const std::size_t seen = map_bytes();
      gate_.enter();
      MDB_txn* txn = nullptr;
      int rc = mdb_txn_begin(env_, nullptr, 0, &txn);
      if (rc == MDB_SUCCESS) {
        rc = body(txn);
        if (rc == MDB_SUCCESS)
          rc = mdb_txn_commit(txn);
        else
          mdb_txn_abort(txn);
      }
      gate_.leave();
      if (rc == MDB_MAP_RESIZED) {
        if (!adopt_map(cfg_.resize_timeout)) return rc;
        continue;
      }
      if (rc == MDB_MAP_FULL) {
        int dead = 0;  // a crashed process's reader slot pins old pages: freeing it may make room
        if (attempt == 0 && mdb_reader_check(env_, &dead) == MDB_SUCCESS && dead > 0) continue;
        if (!grow(seen)) return rc;
        continue;
      }
      return rc;
    }
    return MDB_MAP_FULL;
  }

  // Grows the map ahead of need when it is more than 3/4 used, but only if no transaction is active in
  // this process right now (never waits).
  void maybe_grow_early(std::size_t incoming_bytes) {
    if (forked() || broken_.load()) return;
    MDB_envinfo info;
    gate_.enter();  // me_mapsize is only stable while the gate is entered
    const bool ok = mdb_env_info(env_, &info) == MDB_SUCCESS;
    gate_.leave();
    if (!ok) return;
    const std::size_t used = (static_cast<std::size_t>(info.me_last_pgno) + 1) * page_bytes_ + 2 * incoming_bytes;
    if (used * 4 > info.me_mapsize * 3) resize_locked(info.me_mapsize, std::chrono::milliseconds(0), incoming_bytes);
  }

  ~lmdb_env() = default;

 private:
  explicit lmdb_env(lmdb_env_config cfg)
      : cfg_(std::move(cfg)), pid_(getpid()), fork_generation_((lmdb_install_fork_hook(), lmdb_fork_generation().load())) {}

  bool forked() const noexcept { return lmdb_fork_generation().load(std::memory_order_relaxed) != fork_generation_; }
  friend struct lmdb_snapshot;

  struct registry_entry {
    std::weak_ptr<lmdb_env> env;
    const lmdb_env* raw = nullptr;
    pid_t pid = 0;
    bool closed = false;
  };
  struct registry {
    std::mutex mu;
    std::condition_variable cv;
    std::unordered_map<std::string, registry_entry> map;
  };
  static registry& the_registry() {
    static registry* r = new registry();  // never destroyed: envs may close during static destruction
    return *r;
  }

  result<void> init() {
    int rc = mdb_env_create(&env_);
    if (rc != MDB_SUCCESS) return fail(errc::io_error, "lmdb: mdb_env_create: " + lmdb_strerror(rc));
    const std::size_t map = std::max<std::size_t>(cfg_.initial_map_bytes, std::size_t{64} << 10);
    if ((rc = mdb_env_set_maxreaders(env_, std::max(cfg_.max_readers, 8u))) != MDB_SUCCESS ||
        (rc = mdb_env_set_maxdbs(env_, 8)) != MDB_SUCCESS || (rc = mdb_env_set_mapsize(env_, map)) != MDB_SUCCESS)
      return fail(errc::invalid_argument, "lmdb: env settings for '" + cfg_.path + "': " + lmdb_strerror(rc));
    const unsigned flags = MDB_NOTLS | (cfg_.sync ? 0u : MDB_NOSYNC);
    rc = mdb_env_open(env_, cfg_.path.c_str(), flags, 0664);
    if (rc != MDB_SUCCESS) {
      const errc code = (rc == MDB_INVALID || rc == MDB_CORRUPTED || rc == MDB_VERSION_MISMATCH) ? errc::corrupt_data : errc::io_error;
      return fail(code, "lmdb: mdb_env_open('" + cfg_.path + "'): " + lmdb_strerror(rc));
    }
    int dead = 0;
    (void)mdb_reader_check(env_, &dead);  // free reader slots of processes that died holding them
    MDB_envinfo info;
    MDB_stat st;
    mdb_env_info(env_, &info);
    mdb_env_stat(env_, &st);
    map_bytes_ = info.me_mapsize;
    page_bytes_ = st.ms_psize;
    for (int attempt = 0;; ++attempt) {
      MDB_txn* txn = nullptr;
      rc = mdb_txn_begin(env_, nullptr, 0, &txn);
      if (rc == MDB_SUCCESS) {
        if ((rc = mdb_dbi_open(txn, nullptr, 0, &values_)) == MDB_SUCCESS &&
            (rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &meta_)) == MDB_SUCCESS &&
            (rc = mdb_dbi_open(txn, "lru", MDB_CREATE, &lru_)) == MDB_SUCCESS)
          rc = mdb_txn_commit(txn);
        else
          mdb_txn_abort(txn);
      }
      if (rc == MDB_MAP_RESIZED && attempt < 4) {
        mdb_env_set_mapsize(env_, 0);  // no transaction exists yet
        continue;
      }
      if (rc == MDB_MAP_FULL && attempt < 4) {
        mdb_env_set_mapsize(env_, map_bytes_ * 2);
        mdb_env_info(env_, &info);
        map_bytes_ = info.me_mapsize;
        continue;
      }
      break;
    }
    if (rc != MDB_SUCCESS) return fail(errc::io_error, "lmdb: opening the databases of '" + cfg_.path + "': " + lmdb_strerror(rc));
    mdb_env_info(env_, &info);
    map_bytes_ = info.me_mapsize;
    return {};
  }

  void close() noexcept {
    for (MDB_txn* t : gate_.drain_pool()) mdb_txn_abort(t);
    if (env_) mdb_env_close(env_);
    env_ = nullptr;
  }

  void release_read(MDB_txn* txn) noexcept {
    if (forked()) return;  // inherited through fork(): the slot belongs to the parent
    mdb_txn_reset(txn);
    if (!gate_.give_and_leave(txn, cfg_.reader_pool)) {
      mdb_txn_abort(txn);
      gate_.leave();
    }
  }

  bool adopt_map(std::chrono::milliseconds timeout) {
    if (!gate_.enter_exclusive(timeout)) return false;
    const int rc = mdb_env_set_mapsize(env_, 0);  // the size the other process recorded in the meta page
    finish_resize(rc);
    return rc == MDB_SUCCESS;
  }

  bool grow(std::size_t seen) { return resize_locked(seen, cfg_.resize_timeout, 0); }

  // Doubles the map (at least +incoming, at most max_map_bytes) unless someone grew it past `seen` already.
  bool resize_locked(std::size_t seen, std::chrono::milliseconds timeout, std::size_t incoming) {
    if (!gate_.enter_exclusive(timeout)) return false;
    MDB_envinfo info;
    mdb_env_info(env_, &info);
    const std::size_t now = info.me_mapsize;
    if (now > seen) {
      gate_.leave_exclusive();
      return true;
    }
    if (now >= cfg_.max_map_bytes) {
      gate_.leave_exclusive();
      return false;
    }
    std::size_t want = std::max(now * 2, now + 2 * incoming);
    want = std::min(want, cfg_.max_map_bytes);
    want = (want + page_bytes_ - 1) / page_bytes_ * page_bytes_;
    const int rc = mdb_env_set_mapsize(env_, want);
    finish_resize(rc);
    return rc == MDB_SUCCESS;
  }

  void finish_resize(int rc) {
    if (rc != MDB_SUCCESS) broken_ = true;  // mdb_env_map failed: the env has no mapping any more
    MDB_envinfo info;
    if (rc == MDB_SUCCESS && mdb_env_info(env_, &info) == MDB_SUCCESS) map_bytes_ = info.me_mapsize;
    gate_.leave_exclusive();
  }

  lmdb_env_config cfg_;
  pid_t pid_;
  unsigned fork_generation_;
  MDB_env* env_ = nullptr;
  MDB_dbi values_ = 0, meta_ = 0, lru_ = 0;
  std::size_t page_bytes_ = 4096;
  std::atomic<std::size_t> map_bytes_{0};
  std::atomic<bool> broken_{false};
  lmdb_txn_gate gate_;
  std::mutex snap_mu_;
  std::weak_ptr<const lmdb_snapshot> current_;
};

inline result<std::shared_ptr<lmdb_env>> lmdb_env::open(const lmdb_env_config& cfg_in) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(cfg_in.path, ec);
  if (ec) return fail(errc::io_error, "lmdb: cannot create directory '" + cfg_in.path + "': " + ec.message());
  const fs::path canon = fs::canonical(cfg_in.path, ec);
  if (ec) return fail(errc::io_error, "lmdb: cannot resolve '" + cfg_in.path + "': " + ec.message());
  if (!fs::is_directory(canon, ec)) return fail(errc::io_error, "lmdb: '" + cfg_in.path + "' is not a directory");

  registry& reg = the_registry();
  std::unique_lock lk(reg.mu);
  const std::string key = canon.string();
  for (;;) {
    auto it = reg.map.find(key);
    if (it == reg.map.end() || it->second.pid != getpid() || it->second.closed) break;
    if (auto live = it->second.env.lock()) return live;
    reg.cv.wait(lk);  // the last user is closing it: LMDB forbids two envs on one path in a process
  }
  lmdb_env_config cfg = cfg_in;
  cfg.path = key;
  std::shared_ptr<lmdb_env> env(new lmdb_env(std::move(cfg)), [](lmdb_env* e) {
    if (e->forked()) return;  // inherited through fork(): closing would free the parent's reader slots
    registry& r = the_registry();
    {
      std::lock_guard g(r.mu);
      e->close();
      auto it = r.map.find(e->cfg_.path);
      if (it != r.map.end() && it->second.raw == e) it->second.closed = true;
    }
    r.cv.notify_all();
    delete e;
  });
  if (auto r = env->init(); !r) {
    env->close();  // here, under the registry lock; the deleter then finds nothing to close
    lk.unlock();
    return r.error();
  }
  reg.map[key] = registry_entry{env, env.get(), getpid(), false};
  return env;
}

inline lmdb_snapshot::~lmdb_snapshot() { env->release_read(txn); }

}  // namespace jitembed::cache::detail
