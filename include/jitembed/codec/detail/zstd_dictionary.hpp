// What a codec::zstd_dictionary handle refers to (codec/zstd.hpp is the API).
#pragma once

#include <zstd.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "jitembed/core/buffer.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::codec {

namespace detail {
struct ddict_deleter {
  void operator()(ZSTD_DDict* d) const noexcept { ZSTD_freeDDict(d); }
};
struct cdict_deleter {
  void operator()(ZSTD_CDict* d) const noexcept { ZSTD_freeCDict(d); }
};

// What a zstd_dictionary handle refers to: the bytes, the digested decompression dictionary and one digested
// compression dictionary per level, built on first use.
class zstd_dictionary_state {
 public:
  zstd_dictionary_state(byte_buffer bytes, std::unique_ptr<ZSTD_DDict, ddict_deleter> dd, unsigned id)
      : bytes_(std::move(bytes)), ddict_(std::move(dd)), id_(id) {}

  bytes_view bytes() const noexcept { return bytes_; }
  unsigned id() const noexcept { return id_; }
  const ZSTD_DDict* ddict() const noexcept { return ddict_.get(); }

  result<const ZSTD_CDict*> cdict(int level) const {
    std::lock_guard lock(mu_);
    auto it = cdicts_.find(level);
    if (it != cdicts_.end()) return static_cast<const ZSTD_CDict*>(it->second.get());
    std::unique_ptr<ZSTD_CDict, cdict_deleter> cd(ZSTD_createCDict(bytes_.data(), bytes_.size(), level));
    if (!cd) return fail(errc::encode_failed, "zstd dictionary: cannot build compression dictionary at level " + std::to_string(level));
    const ZSTD_CDict* p = cd.get();
    cdicts_.emplace(level, std::move(cd));
    return p;
  }

 private:
  byte_buffer bytes_;
  std::unique_ptr<ZSTD_DDict, ddict_deleter> ddict_;
  unsigned id_ = 0;
  mutable std::mutex mu_;
  mutable std::map<int, std::unique_ptr<ZSTD_CDict, cdict_deleter>> cdicts_;
};
}  // namespace detail

}  // namespace jitembed::codec
