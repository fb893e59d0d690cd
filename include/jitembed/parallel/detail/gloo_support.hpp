// Internals of parallel/gloo.hpp: the rendezvous store adapter, typed local reductions, SIGPIPE handling.
#pragma once

#include <signal.h>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include "jitembed/core/dtype.hpp"
#include "jitembed/parallel/communicator.hpp"
#include "jitembed/parallel/store.hpp"

namespace jitembed::parallel {

namespace detail {

// gloo::rendezvous::Store over a jitembed store (gloo waits, then gets).
class gloo_store_adapter final : public ::gloo::rendezvous::Store {
 public:
  gloo_store_adapter(shared_store s, std::chrono::milliseconds timeout)
      : store_(std::move(s)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, std::span<const std::byte>(reinterpret_cast<const std::byte*>(data.data()), data.size())).value();
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_.get(key, timeout_).value();
    std::vector<char> out(v.size());
    if (!v.empty()) std::memcpy(out.data(), v.data(), v.size());
    return out;
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& k : keys) (void)store_.get(k, timeout).value();
  }

 private:
  shared_store store_;
  std::chrono::milliseconds timeout_;
};

template <class T, reduce_op Op>
void gloo_reduce(void* out, const void* a, const void* b, std::size_t n) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
      const float fx = static_cast<float>(x[i]), fy = static_cast<float>(y[i]);
      o[i] = T(Op == reduce_op::sum ? fx + fy : std::max(fx, fy));
    } else if constexpr (std::is_same_v<T, bool>) {
      o[i] = x[i] || y[i];  // sum and max of booleans are both "any"
    } else {
      o[i] = Op == reduce_op::sum ? static_cast<T>(x[i] + y[i]) : std::max(x[i], y[i]);
    }
  }
}

template <class T>
::gloo::AllreduceOptions::Func gloo_reduce_fn(reduce_op op) {
  if (op == reduce_op::sum) return &gloo_reduce<T, reduce_op::sum>;
  return &gloo_reduce<T, reduce_op::max>;
}

// Calls f(T{}) with the C++ type of a dtype.
template <class F>
decltype(auto) visit_dtype(dtype t, F&& f) {
  switch (t) {
    case dtype::u8: return f(std::uint8_t{});
    case dtype::i8: return f(std::int8_t{});
    case dtype::i16: return f(std::int16_t{});
    case dtype::i32: return f(std::int32_t{});
    case dtype::i64: return f(std::int64_t{});
    case dtype::f16: return f(float16{});
    case dtype::bf16: return f(bfloat16{});
    case dtype::f32: return f(float{});
    case dtype::f64: return f(double{});
    case dtype::boolean: return f(bool{});
  }
  throw error(errc::dtype_mismatch, "unknown dtype");
}

inline void local_reduce_into(void* acc, const void* x, dtype t, std::size_t n, reduce_op op) {
  visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    gloo_reduce_fn<T>(op)(acc, acc, x, n);
  });
}

// Gloo's TCP transport writes to sockets without MSG_NOSIGNAL: a write to a peer that died raises SIGPIPE,
// whose default action kills this process instead of failing the collective. Ignore it, unless the
// application installed a handler of its own.
inline void ignore_sigpipe() {
  static const bool done = [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      ::sigemptyset(&ignore.sa_mask);
      ::sigaction(SIGPIPE, &ignore, nullptr);
    }
    return true;
  }();
  (void)done;
}

// A stable dummy for zero-byte buffers (gloo rejects null pointers).
inline std::byte* nonnull(void* p) {
  static std::byte dummy[64];
  return p ? static_cast<std::byte*>(p) : dummy;
}

}  // namespace detail

}  // namespace jitembed::parallel
