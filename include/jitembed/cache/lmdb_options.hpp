// lmdb_options: where the LMDB cache lives and how its environment is sized and synced.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace jitembed::cache {

struct lmdb_options {
  std::string path = ".jitembed/cache";            // directory holding data.mdb + lock.mdb (created)
  std::size_t initial_map_bytes = std::size_t{256} << 20;  // address space first mapped; the file grows as written
  std::size_t max_map_bytes = std::size_t{1} << 40;       // hard cap on map growth: a put beyond it fails (counted)
  std::size_t max_bytes = 0;                       // cap on stored bytes (approximate, see lmdb_record_cost); 0 = none
  unsigned max_readers = 256;                      // reader slots, shared by all processes on the path
  bool sync = true;                                // false: MDB_NOSYNC (a process crash is still safe, an OS crash may lose puts)
  unsigned reader_pool = 8;                        // reset read transactions kept for reuse
  std::chrono::milliseconds resize_timeout{1000};  // how long a map resize waits for held values to be released
  std::size_t touch_batch = 4096;                  // with max_bytes: hits remembered for the LRU index between writes
};

}  // namespace jitembed::cache
