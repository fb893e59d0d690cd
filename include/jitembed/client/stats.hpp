// Counters of the JIT client, per client and per endpoint (a snapshot; see jit_client::stats()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace jitembed::client {

struct endpoint_stats {
  std::string url;
  std::uint64_t requests = 0;        // attempts sent to it
  std::uint64_t successes = 0;
  std::uint64_t failures = 0;        // retryable failures (connection, 5xx, timeout)
  std::uint64_t outstanding = 0;     // attempts in flight now
  double ewma_latency_ms = 0;
  bool draining = false;             // removed from the list; in-flight attempts finish
  bool circuit_open = false;
  std::uint64_t connections_opened = 0;
  bool shared_memory = false;        // a shared-memory region is registered with it (client_options.shared_memory)
};

struct client_stats {
  std::uint64_t requests = 0;        // embed() calls accepted
  std::uint64_t completed = 0;       // with a value
  std::uint64_t failed = 0;          // with an error (cancelled included)
  std::uint64_t cancelled = 0;
  std::uint64_t in_flight = 0;
  std::uint64_t attempts = 0;        // HTTP attempts sent (first tries, retries, hedges, row splits)
  std::uint64_t retries = 0;
  std::uint64_t hedges = 0;
  std::uint64_t hedge_wins = 0;      // hedges that answered first
  std::uint64_t budget_exhausted = 0;  // retries or hedges refused by the retry budget
  std::uint64_t coalesced = 0;       // requests answered by another request with the same coalesce_key
  std::uint64_t row_splits = 0;      // multi-row requests resent row by row after a 4xx
  std::uint64_t endpoint_updates = 0;  // endpoint list changes applied
  std::uint64_t tls_failures = 0;      // TLS handshakes refused (certificate not verified, peer not speaking TLS)
  std::uint64_t shared_memory_attempts = 0;   // attempts whose rows and outputs went through shared memory
  std::uint64_t shared_memory_fallbacks = 0;  // shared-memory attempts refused by the server, resent over the socket
  double latency_p50_ms = 0, latency_p95_ms = 0, latency_p99_ms = 0;  // per successful attempt
  std::vector<endpoint_stats> endpoints;
};

}  // namespace jitembed::client
