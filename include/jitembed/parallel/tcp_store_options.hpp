// tcp_store_options: limits and timeouts of the TCP rendezvous store, and its wire protocol.
#pragma once

#include <chrono>
#include <cstdint>

namespace jitembed::parallel {

// Wire protocol (every integer little-endian). A client sends one request, then waits for its reply before
// sending the next one.
//   request: op u8 | key_len u32 | key | value_len u64 | value
//     op 1 set:   value = the value (value_len <= max_value_bytes)
//     op 2 get:   value = u64 timeout in milliseconds (value_len 8); the server parks the request until the
//                 key is set or the timeout passes
//     op 3 check: no value (value_len 0)
//   reply:   status u8 | value_len u64 | value
//     status 0 ok:      set → empty; get → the value; check → one byte, 0 (absent) or 1 (present)
//     status 1 timeout: get only, the key was not set in time; empty
// key_len <= max_key_bytes. An unknown op, an over-limit or inconsistent length, bytes sent while a get is
// parked, or a request (or reply) stalling midway for longer than io_timeout makes the server close that
// connection; it keeps serving the others.
struct tcp_store_options {
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(30);  // connect(): retry this long
  // Client: a request's budget beyond a get's own timeout. Server: how long a request or a reply may stall
  // midway (an idle connection between requests is never timed out).
  std::chrono::milliseconds io_timeout = std::chrono::seconds(30);
  std::uint32_t max_key_bytes = 4096;
  std::uint64_t max_value_bytes = std::uint64_t{64} << 20;
};

}  // namespace jitembed::parallel
