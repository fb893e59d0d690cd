// The client's policies, free of I/O so they are tested alone: retry budget (token bucket), backoff with
// full jitter, a latency window for percentiles (hedging), the balancer (power of two choices) and what an
// answer's fault (attempt_outcome, judged by its transport) leads to.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "jitembed/client/options.hpp"
#include "jitembed/client/request.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::client::detail {

using clock = std::chrono::steady_clock;

// Retries and hedges may add `ratio` of the requests plus `min_per_s` per second (Finagle/Envoy-style
// retry budget): every request deposits `ratio` tokens, time deposits `min_per_s` per second, a retry
// or hedge withdraws one. The balance is capped so a quiet period cannot bank a storm.
class retry_budget {
 public:
  explicit retry_budget(const retry_options& o = {}) : ratio_(o.budget_ratio), min_per_s_(o.budget_min_per_s) {
    tokens_ = cap();
  }
  void on_request() { tokens_ = std::min(cap(), tokens_ + ratio_); }
  bool try_spend(clock::time_point now = clock::now()) {
    refill(now);
    if (tokens_ < 1.0) return false;
    tokens_ -= 1.0;
    return true;
  }

 private:
  double cap() const noexcept { return std::max(10.0, min_per_s_ * 10.0); }
  void refill(clock::time_point now) {
    if (last_ != clock::time_point{}) {
      const double s = std::chrono::duration<double>(now - last_).count();
      tokens_ = std::min(cap(), tokens_ + std::max(0.0, s) * min_per_s_);
    }
    last_ = now;
  }
  double ratio_, min_per_s_;
  double tokens_ = 0;
  clock::time_point last_{};
};

// Exponential backoff with full jitter: uniform in [0, min(max, base * 2^(retry-1))].
inline std::chrono::microseconds backoff_delay(const retry_options& o, int retry, std::mt19937_64& rng) {
  const double base_us = std::chrono::duration<double, std::micro>(o.backoff_base).count();
  const double max_us = std::chrono::duration<double, std::micro>(o.backoff_max).count();
  const double ceiling = std::min(max_us, base_us * std::ldexp(1.0, std::clamp(retry - 1, 0, 30)));
  std::uniform_real_distribution<double> u(0.0, std::max(0.0, ceiling));
  return std::chrono::microseconds(static_cast<std::int64_t>(u(rng)));
}

// The last `capacity` latencies (ms); percentiles are recomputed every `every` samples.
class latency_window {
 public:
  explicit latency_window(std::size_t capacity = 2048) : ring_(capacity) {}
  void add(double ms) {
    ring_[next_ % ring_.size()] = ms;
    ++next_;
  }
  std::size_t size() const noexcept { return std::min<std::size_t>(next_, ring_.size()); }
  std::uint64_t total() const noexcept { return next_; }
  double percentile(double p) const {
    const std::size_t n = size();
    if (n == 0) return 0;
    std::vector<double> v(ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(n));
    const auto k = static_cast<std::size_t>(std::clamp(p, 0.0, 1.0) * static_cast<double>(n - 1) + 0.5);
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
  }

 private:
  std::vector<double> ring_;
  std::uint64_t next_ = 0;
};

// How an attempt that reached its endpoint ended, as its transport judged it in its protocol's terms (the
// HTTP statuses in http_transport.hpp, the gRPC codes in client_grpc.hpp): all the policy sees of an answer.
enum class attempt_fault : std::uint8_t {
  none,      // the endpoint answered: the result stands (embeddings, or an answer that could not be read)
  endpoint,  // the endpoint failed (5xx but 503/504, INTERNAL): counts against its circuit breaker
  request,   // the request failed on its own terms (4xx, INVALID_ARGUMENT, NOT_FOUND): not sent again as is
  busy,      // alive but not serving it now (503, 504, 408, 429, UNAVAILABLE, RESOURCE_EXHAUSTED): retried
};
struct attempt_outcome {
  attempt_fault fault = attempt_fault::none;
  result<embed_result> answer;  // with a fault: its errc and the server's message
};

// What the client does after an answer with a fault (attempt_outcome; no answer at all is retried elsewhere):
// - eject: the endpoint does not serve the model (not_found): ejected for it, another endpoint tried;
// - retry: busy, or an endpoint's fault with service_trouble: a retry after a backoff, within the budget;
// - split_rows: the caller's input in a multi-row request: each row resent alone, so one bad row fails alone;
// - fail: the caller's input, or an endpoint's failure that a retry does not fix.
enum class answer_action { eject, retry, split_rows, fail };

// The service's own trouble (overloaded, late, out of memory): another try may succeed.
inline bool service_trouble(errc c) {
  return c == errc::unavailable || c == errc::timeout || c == errc::resource_exhausted;
}

inline answer_action after_failed_answer(attempt_fault f, errc code, std::size_t n_rows) {
  if (code == errc::not_found) return answer_action::eject;
  if (f == attempt_fault::busy || (f == attempt_fault::endpoint && service_trouble(code))) return answer_action::retry;
  if (f == attempt_fault::request && n_rows > 1) return answer_action::split_rows;
  return answer_action::fail;
}

// The balancer: power of two choices on attempts in flight, ties to the clearly faster one (latency 20% lower).
// The latency EWMA halves every kLatencyHalfLife since its last sample, so one slow once is not starved forever.
inline constexpr std::chrono::milliseconds kLatencyHalfLife{1000};

template <class E>
double aged_latency_ms(const E& e, clock::time_point now) {
  if (!e.has_ewma) return 0;
  const double age = std::chrono::duration<double>(now - e.ewma_at).count();
  const double half = std::chrono::duration<double>(kLatencyHalfLife).count();
  return e.ewma_ms * std::exp2(-std::max(0.0, age) / half);
}

template <class E>
E* power_of_two(const std::vector<E*>& pool, std::mt19937_64& rng, clock::time_point now = clock::now()) {
  if (pool.empty()) return nullptr;
  if (pool.size() == 1) return pool[0];
  std::uniform_int_distribution<std::size_t> u(0, pool.size() - 1);
  const std::size_t i = u(rng);
  std::size_t j = u(rng);
  while (j == i) j = u(rng);
  E* a = pool[i];
  E* b = pool[j];
  if (a->outstanding != b->outstanding) return a->outstanding < b->outstanding ? a : b;
  return aged_latency_ms(*b, now) < 0.8 * aged_latency_ms(*a, now) ? b : a;
}

}  // namespace jitembed::client::detail
