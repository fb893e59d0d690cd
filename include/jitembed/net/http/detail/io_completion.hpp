// A move-only, type-erased completion `void(error_code, std::size_t)`: Beast's and Asio's operations on the HTTP
// client connection take it, so they are compiled once for every handler (Boost 1.74 has no
// any_completion_handler, C++20 no move_only_function).
#pragma once

#include <boost/asio/handler_continuation_hook.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

namespace jitembed::net::http::detail {

// No associated executor or allocator of its own: what it wraps must complete on the executor of the stream
// it is given to (client_connection checks it).
class io_completion {
 public:
  template <class Handler>
  requires(!std::is_same_v<std::decay_t<Handler>, io_completion>) explicit io_completion(Handler&& h)
      : continuation_(is_continuation(h)),
        f_(std::make_unique<holder<std::decay_t<Handler>>>(std::forward<Handler>(h))) {}
  // Once. The handler leaves its storage before it runs, as Asio frees an operation's memory before its upcall.
  void operator()(boost::system::error_code ec, std::size_t n) { f_.release()->complete(ec, n); }
  // Asio's hook, kept through the erasure: an operation that continues another (the next read of Beast's
  // read, the next write of asio::async_write) completes on this thread's queue, without waking the reactor.
  friend bool asio_handler_is_continuation(io_completion* c) { return c->continuation_; }

 private:
  struct base {
    virtual ~base() = default;
    virtual void complete(boost::system::error_code ec, std::size_t n) = 0;
  };
  template <class Handler>
  struct holder final : base {
    explicit holder(auto&& h) : handler(std::forward<decltype(h)>(h)) {}
    void complete(boost::system::error_code ec, std::size_t n) override {
      Handler h(std::move(handler));
      delete this;
      std::move(h)(ec, n);
    }
    Handler handler;
  };
  template <class Handler>
  static bool is_continuation(Handler& h) {
    using boost::asio::asio_handler_is_continuation;
    return asio_handler_is_continuation(std::addressof(h));
  }
  bool continuation_;
  std::unique_ptr<base> f_;
};

}  // namespace jitembed::net::http::detail
