// redis_options: which Redis server the cache talks to, its namespace, timeouts and pool size.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace jitembed::cache {

struct redis_options {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string unix_socket;                      // non-empty: connect to this Unix socket instead of host:port
  std::string prefix = "jitembed:";             // namespace: every key is prefix + 32 hex digits
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds io_timeout{500};    // bounds each socket send / receive and the wait for a pooled connection
  std::chrono::seconds ttl{0};                  // 0: values never expire
  std::size_t pool_size = 4;                    // connections at most (one opened by open(), the rest lazily)
  std::size_t max_value_bytes = std::size_t{64} << 20;  // larger puts are not stored; larger stored values are misses
  std::string password;                         // non-empty: AUTH on connect
  int db = 0;                                   // non-zero: SELECT on connect
  std::chrono::milliseconds retry_after{1000};  // back-off after a transport failure: calls fail fast meanwhile
};

}  // namespace jitembed::cache
