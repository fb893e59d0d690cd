// How the hybrid_parallel example runs its ranks: threads of this process over one hash_store, or processes
// (--procs) over a tcp_store on 127.0.0.1 with a restart loop.
#pragma once

#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/parallel/local_launch.hpp"
#include "rank_io.hpp"
#include "report.hpp"
#if defined(JITEMBED_HAS_TCP_STORE)
#include "jitembed/parallel/tcp_store.hpp"
#include "jitembed/parallel/tcp_store_server.hpp"
#endif

namespace hybrid_app {

// (the names rank_io.hpp brings into hybrid_app)
// --- ranks as threads / processes ----------------------------------------------------------------------

// Runs fn(world, r) -> T on every rank as a thread over one hash_store; out[r] is rank r's value. 1 (the
// first error printed) when a rank threw.
template <class T, class F>
int on_thread_ranks(int world_size, std::vector<T>& out, F fn) {
  auto st = shared_store(hash_store());
  out.assign(static_cast<std::size_t>(world_size), T{});
  std::vector<std::thread> threads;
  std::mutex mu;
  std::string first_error;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto world = comm_t::create(st, r, world_size).value();
        out[static_cast<std::size_t>(r)] = fn(world, r);
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        if (first_error.empty()) first_error = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!first_error.empty()) {
    std::fprintf(stderr, "hybrid_parallel: %s\n", first_error.c_str());
    return 1;
  }
  return 0;
}

inline int run_threads(const run_config& rc, const hybrid::config& c, const tensors& params, const hybrid::batch& in,
                       const hybrid_plan& plan, outcome& res) {
  std::vector<rank_result> outs;
  const int rc_code = on_thread_ranks(rc.world, outs, [&](comm_t& world, int) {
    if (rc.device == "cpu") {
      hybrid::cpu_mode mode;
      return hybrid::run_step(world, c, params, in, plan, rc.so, mode);
    }
#if defined(JITEMBED_HAS_NCCL)
    JITEMBED_CUDA_CHECK(cudaSetDevice(0));  // every rank on GPU 0
    hybrid::cuda_mode mode;
    return hybrid::run_step(world, c, params, in, plan, rc.so, mode);
#else
    return rank_result{};  // main() refuses --device cuda without CUDA
#endif
  });
  if (rc_code != 0) return rc_code;
  for (auto& o : outs) merge(res, std::move(o));
  return 0;
}

#if defined(JITEMBED_HAS_TCP_STORE)
// A rank as a process (started by launch_ranks with --store): connect, run fn(world) -> json, put that in the
// store under the rank's key.
template <class F>
int as_process_rank(const std::string& store_address, F fn) {
  const launched_rank me = local_rank_of_this_process().value();
  try {
    auto st = shared_store(tcp_store::open(store_address).value());
    gloo_options opt;
    opt.timeout = std::chrono::seconds(30);
    auto world = comm_t::create(st, me.rank, me.world_size, opt).value();
    const json out = fn(world);
    world.barrier().value();  // no rank closes its connections while a peer still uses them
    st.set(result_key(me.rank), out.dump()).value();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hybrid_parallel: rank %d (pid %d): %s\n", me.rank, static_cast<int>(::getpid()), e.what());
    return 1;
  }
  return 0;
}

inline int run_child(const std::string& store_address, const hybrid::config& c, const tensors& params,
                     const hybrid::batch& in, const hybrid_plan& plan, const run_config& rc) {
  return as_process_rank(store_address, [&](comm_t& world) {
    hybrid::cpu_mode mode;
    return result_json(hybrid::run_step(world, c, params, in, plan, rc.so, mode));
  });
}

// The parent of --procs: a tcp_store server on 127.0.0.1 (an ephemeral port), one child process of this
// program per rank, a deadline, then every rank's result from the store (results[r]). When a rank fails and
// restarts are left, every rank is started again with --resume (the latest complete checkpoint) and without
// the test's --kill-rank / --kill-at-step.
inline int launch_ranks(const run_config& rc, int timeout_s, int max_restarts, std::vector<std::string> child_args,
                        std::vector<json>& results) {
  for (int attempt = 0;; ++attempt) {
    auto server = tcp_store_server::create({}).value();
    local_launch_options opt;
    opt.timeout = std::chrono::seconds(timeout_s);
    std::vector<std::string> args = child_args;
    args.insert(args.end(), {"--store", server.address()});
    auto ends = run_local_ranks(
        rc.world, [&](int) { return args; }, opt);
    if (!ends) {
      std::fprintf(stderr, "hybrid_parallel: %s\n", ends.error().message.c_str());
      return 1;
    }
    if (!all_ok(*ends)) {
      for (const auto& e : *ends) {
        if (!e.ok()) std::printf("hybrid_parallel: %s\n", e.to_string().c_str());
      }
      if (attempt >= max_restarts) return 1;
      std::printf("hybrid_parallel: restart %d of %d: every rank again with --resume\n", attempt + 1, max_restarts);
      std::vector<std::string> next;
      for (std::size_t i = 0; i < child_args.size(); ++i) {
        if (child_args[i] == "--kill-rank" || child_args[i] == "--kill-at-step") {
          ++i;
          continue;
        }
        if (child_args[i] != "--resume") next.push_back(child_args[i]);
      }
      next.push_back("--resume");
      child_args = std::move(next);
      continue;
    }
    auto st = tcp_store::open(server.address()).value();
    results.clear();
    for (int r = 0; r < rc.world; ++r) {
      auto got = st.get(result_key(r), std::chrono::seconds(5));
      if (!got) {
        std::fprintf(stderr, "hybrid_parallel: rank %d left no result: %s\n", r, got.error().message.c_str());
        return 1;
      }
      results.push_back(json::parse(got->begin(), got->end()));
    }
    return 0;
  }
}

inline int run_procs(const run_config& rc, int timeout_s, const std::vector<std::string>& child_args, outcome& res) {
  std::vector<json> results;
  if (const int code = launch_ranks(rc, timeout_s, /*max_restarts=*/0, child_args, results); code != 0) return code;
  for (const auto& j : results) merge(res, result_of(j));
  return 0;
}
#endif

}  // namespace hybrid_app
