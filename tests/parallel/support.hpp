// Test support for the parallel tests: ranks as threads of this process, each with a Gloo communicator.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "jitembed/parallel/gloo.hpp"
#include "jitembed/parallel/store.hpp"

namespace jitembed::parallel::testing {

// Tolerance of the parallel layers' results against their single-process references.
inline constexpr double kTol = 1e-5;

inline std::string as_string(const std::vector<std::byte>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size());
}

// Runs fn(comm) on n threads, rank r on thread r, connected through one hash_store. The first exception
// a rank throws is rethrown here after every thread has finished (a rank that throws destroys its
// communicator, so the others fail instead of waiting).
template <class F>
void run_ranks(int n, F fn, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto st = shared_store(hash_store());
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr first;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        gloo_options opt;
        opt.timeout = timeout;
        auto comm = gloo_communicator::create(st, r, n, opt).value();
        fn(comm);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

// Runs fn(rank) in n forked child processes; fn's return value is the child's exit code (an exception
// gives 3). Returns each child's wait status, in rank order, after all have ended.
template <class F>
std::vector<int> fork_ranks(int n, F fn) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      int code = 3;
      try {
        code = fn(r);
      } catch (...) {
      }
      std::_Exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> statuses;
  for (pid_t pid : pids) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) status = -1;
    statuses.push_back(status);
  }
  return statuses;
}

// A float tensor of the given shape filled from N(0, 1) with a seed (equal seeds give equal tensors on
// every rank: use that for replicated inputs).
inline tensor randn(const shape& s, std::uint64_t seed) {
  tensor t = tensor::empty(s, dtype::f32);
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  auto* p = t.view().data<float>();
  for (std::uint64_t i = 0; i < t.numel(); ++i) p[i] = d(gen);
  return t;
}

// max|a − b| / max(max|b|, 1e-6): the relative error the parallel tests bound by 1e-5.
inline double rel_error(const tensor_view& a, const tensor_view& b) {
  if (a.numel() != b.numel()) return 1e30;
  const auto* x = a.data<const float>();
  const auto* y = b.data<const float>();
  double diff = 0, scale = 1e-6;
  for (std::uint64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(x[i] - y[i])));
    scale = std::max(scale, static_cast<double>(std::abs(y[i])));
  }
  return diff / scale;
}

// The jitembed::error f() throws, or one with errc::ok when it returns normally.
template <class F>
jitembed::error error_of(F&& f) {
  try {
    f();
  } catch (const jitembed::error& e) {
    return e;
  }
  return jitembed::error(errc::ok, "no error");
}

// The error a result carries (errc::ok "no error" for a value): for the functions that return result<T>
// and, by docs/api.md rule 1.1, never throw.
template <class R>
jitembed::error result_error(const R& r) {
  if (r.has_value()) return jitembed::error(errc::ok, "no error");
  return jitembed::error(r.error());
}

}  // namespace jitembed::parallel::testing
