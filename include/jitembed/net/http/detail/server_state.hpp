// The HTTP server's shared state (options, counters, the connection registry, the io_context) and the
// once-only responder a request hands the service; server_connection.hpp runs connections over it.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "jitembed/core/worker_group.hpp"
#include "jitembed/net/http/detail/wire.hpp"
#include "jitembed/net/http/message.hpp"
#include "jitembed/net/http/options.hpp"

namespace jitembed::net::http::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// What the server and a responder need of a connection, whatever its stream (plain or TLS).
class server_connection_base {
 public:
  virtual ~server_connection_base() = default;
  virtual void start() = 0;
  virtual void begin_shutdown() = 0;
  virtual void force_close() = 0;
  virtual const asio::any_io_executor& executor() const noexcept = 0;
  virtual void on_response(response r) = 0;
};

using tls_stream = boost::beast::ssl_stream<boost::beast::tcp_stream>;

// Whether responders may still post to the io_context; closed (under the mutex) before it is destroyed,
// so a service that answers after the server stopped does nothing instead of touching a dead executor.
struct respond_gate {
  std::mutex mu;
  bool open = true;
};

// Everything connections touch. Member order matters: `ioc` is destroyed before the registry and
// counters (its destructor destroys pending handlers, which may hold the last reference to a connection),
// and the acceptor before `ioc`.
struct server_state {
  server_options opts;
  handler on_request;
  std::shared_ptr<respond_gate> gate = std::make_shared<respond_gate>();

  std::optional<asio::ssl::context> tls;  // set when opts.tls_cert_file is: every connection is HTTPS

  std::atomic<std::uint64_t> accepted{0}, rejected{0}, requests{0}, timeouts{0}, bad{0}, tls_failures{0};
  std::atomic<bool> stopping{false};

  std::mutex mu;  // registry
  std::condition_variable drained;
  std::unordered_map<std::uint64_t, std::shared_ptr<server_connection_base>> conns;
  std::uint64_t next_id = 0;

  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{asio::make_strand(ioc)};
  asio::steady_timer accept_retry{acceptor.get_executor()};
  worker_group threads;  // the I/O threads

  // start() / stop() bookkeeping (kept here so that http::server stays movable)
  std::mutex stop_mu;
  bool started = false, stopped = false;
  std::uint16_t port = 0;
  asio::ip::address bound;

  server_state(server_options o, handler h) : opts(std::move(o)), on_request(std::move(h)) {}

  void unregister(std::uint64_t id) {
    std::shared_ptr<server_connection_base> keep;  // destroyed outside the lock
    {
      std::lock_guard lk(mu);
      auto it = conns.find(id);
      if (it == conns.end()) return;
      keep = std::move(it->second);
      conns.erase(it);
      if (conns.empty()) drained.notify_all();
    }
  }
};

// Completes one request exactly once; shared by all copies of the responder handed to the service.
// If the service drops every copy without answering, the client gets a 500 instead of a hung connection.
class respond_state {
 public:
  respond_state(std::shared_ptr<respond_gate> gate, std::weak_ptr<server_connection_base> conn)
      : gate_(std::move(gate)), conn_(std::move(conn)) {}
  respond_state(const respond_state&) = delete;
  respond_state& operator=(const respond_state&) = delete;
  ~respond_state() {
    if (!done_.load(std::memory_order_acquire))
      deliver(error_response(500, "internal: the service dropped the request without a response"));
  }

  void respond(response r) {
    if (done_.exchange(true, std::memory_order_acq_rel)) return;
    deliver(std::move(r));
  }

 private:
  void deliver(response r) {
    std::lock_guard lk(gate_->mu);
    if (!gate_->open) return;
    auto conn = conn_.lock();
    if (!conn) return;  // the connection was closed (peer gone, timeout, forced stop)
    const auto& ex = conn->executor();
    asio::post(ex, [c = std::move(conn), r = std::move(r)]() mutable { c->on_response(std::move(r)); });
  }

  std::shared_ptr<respond_gate> gate_;
  std::weak_ptr<server_connection_base> conn_;
  std::atomic<bool> done_{false};
};

}  // namespace jitembed::net::http::detail
