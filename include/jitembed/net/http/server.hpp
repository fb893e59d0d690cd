// Async HTTP/1.1 server on Boost.Beast, plain or over TLS (HTTPS): keep-alive, per-phase timeouts,
// header/body limits, responses written scatter/gather, and a graceful stop that drains in-flight requests.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/asio/ssl/context.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/core/detail/capture.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/worker_group.hpp"
#include "jitembed/net/http/detail/server_connection.hpp"
#include "jitembed/net/http/detail/tls_server.hpp"
#include "jitembed/net/http/message.hpp"
#include "jitembed/net/http/options.hpp"

namespace jitembed::net::http {

// Counters since start(); read with server::stats().
struct server_stats {
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_rejected = 0;  // over max_connections, or arriving while stopping
  std::uint64_t connections_active = 0;
  std::uint64_t requests = 0;                // handed to the handler
  std::uint64_t timeouts = 0;                // header/body/write timeouts (idle keep-alive closes not counted)
  std::uint64_t bad_requests = 0;            // 400/413/431 produced by the HTTP layer
  std::uint64_t tls_handshake_failures = 0;  // HTTPS: handshakes that failed or timed out (connection closed)
};

// One listening socket served by `io_threads` threads, one request at a time per connection. The handler runs
// on an I/O thread and must not block; its responder may be called from any thread. A movable value
// (docs/api.md); a moved-from server may only be destroyed or assigned to.
class server {
 public:
  // Validates the options, loads TLS (when set), binds, listens and starts the I/O threads. Errors:
  // invalid_argument (bad options, TLS files as tls_server_context says), io_error (resolve, bind, listen).
  static result<server> create(server_options opts, handler h) {
    server s(std::move(opts), std::move(h));
    JITEMBED_TRY(s.start());
    return s;
  }

  server(server&&) noexcept = default;
  server& operator=(server&& other) noexcept {
    if (this != &other) {
      stop(std::chrono::milliseconds(0));
      state_ = std::move(other.state_);
    }
    return *this;
  }
  server(const server&) = delete;
  server& operator=(const server&) = delete;
  ~server() { stop(std::chrono::milliseconds(0)); }

  std::uint16_t port() const noexcept { return state_->port; }

  // "http://host:port", or "https://host:port" with TLS (IPv6 hosts in brackets).
  std::string url() const {
    const auto& b = state_->bound;
    const std::string host = b.is_v6() ? "[" + b.to_string() + "]" : b.to_string();
    return (tls() ? "https://" : "http://") + host + ":" + std::to_string(state_->port);
  }

  bool tls() const noexcept { return state_->tls.has_value(); }

  // Stops accepting (new connections are refused), closes idle keep-alive connections, lets in-flight
  // requests finish (their responses are still written, with Connection: close) for up to `drain`, then
  // closes whatever is left and joins the I/O threads. A responder called afterwards does nothing.
  void stop(std::chrono::milliseconds drain = std::chrono::seconds(10)) {
    if (!state_) return;  // moved from
    auto& st = *state_;
    std::lock_guard stop_lock(st.stop_mu);
    if (!st.started || st.stopped) return;
    st.stopped = true;
    std::vector<std::shared_ptr<detail::server_connection_base>> live;
    {
      std::lock_guard lk(st.mu);
      st.stopping.store(true, std::memory_order_release);
      for (auto& [id, c] : st.conns) live.push_back(c);
    }
    boost::asio::post(st.acceptor.get_executor(), [&st] {
      boost::system::error_code ignored;
      st.accept_retry.cancel();
      st.acceptor.close(ignored);
    });
    for (auto& c : live) c->begin_shutdown();
    live.clear();
    {
      std::unique_lock lk(st.mu);
      st.drained.wait_for(lk, drain, [&] { return st.conns.empty(); });
      for (auto& [id, c] : st.conns) live.push_back(c);
    }
    for (auto& c : live) c->force_close();
    live.clear();
    st.work.reset();
    st.threads.join();
    {
      std::lock_guard lk(st.gate->mu);
      st.gate->open = false;
    }
    decltype(st.conns) left;
    {
      std::lock_guard lk(st.mu);
      left.swap(st.conns);
    }
  }

  server_stats stats() const noexcept {
    auto& st = *state_;
    server_stats s;
    s.connections_accepted = st.accepted.load(std::memory_order_relaxed);
    s.connections_rejected = st.rejected.load(std::memory_order_relaxed);
    s.requests = st.requests.load(std::memory_order_relaxed);
    s.timeouts = st.timeouts.load(std::memory_order_relaxed);
    s.bad_requests = st.bad.load(std::memory_order_relaxed);
    s.tls_handshake_failures = st.tls_failures.load(std::memory_order_relaxed);
    {
      std::lock_guard lk(st.mu);
      s.connections_active = st.conns.size();
    }
    return s;
  }

 private:
  server(server_options opts, handler h)
      : state_(std::make_unique<detail::server_state>(std::move(opts), std::move(h))) {}

  // Binds, listens and starts the I/O threads (once, from create()).
  result<void> start() {
    namespace asio = boost::asio;
    using tcp = asio::ip::tcp;
    auto& st = *state_;
    if (st.opts.io_threads < 1 || st.opts.io_threads > 1024)
      return fail(errc::invalid_argument,
                  "http server: io_threads " + std::to_string(st.opts.io_threads) + " outside [1, 1024]");
    if (st.opts.max_connections == 0) return fail(errc::invalid_argument, "http server: max_connections is 0");
    if (!st.on_request) return fail(errc::invalid_argument, "http server: no handler");
    JITEMBED_TRY(load_tls(st));

    boost::system::error_code ec;
    tcp::endpoint ep;
    const auto addr = asio::ip::make_address(st.opts.host, ec);
    if (!ec) {
      ep = tcp::endpoint(addr, st.opts.port);
    } else {
      tcp::resolver resolver(st.ioc);
      auto results = resolver.resolve(st.opts.host, std::to_string(st.opts.port), ec);
      if (ec || results.empty())
        return fail(errc::io_error, "http server: cannot resolve host '" + st.opts.host + "': " + ec.message());
      ep = results.begin()->endpoint();
    }
    const std::string where = st.opts.host + ":" + std::to_string(st.opts.port);
    st.acceptor.open(ep.protocol(), ec);
    if (ec) return fail(errc::io_error, "http server: cannot open socket for " + where + ": " + ec.message());
    st.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    st.acceptor.bind(ep, ec);
    if (ec) {
      st.acceptor.close(ec);
      return fail(errc::io_error, "http server: cannot bind " + where + ": " + ec.message());
    }
    st.acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      st.acceptor.close(ec);
      return fail(errc::io_error, "http server: cannot listen on " + where + ": " + ec.message());
    }
    st.port = st.acceptor.local_endpoint(ec).port();
    st.bound = ep.address();
    st.started = true;
    st.work.emplace(st.ioc.get_executor());
    accept(st);
    // All or none: a thread that cannot start stops the ones already running (their stop callback stops
    // the io_context they run), and the error is this result (resource_exhausted when no thread is left).
    return jitembed::core_detail::capture("http server: starting the I/O threads", [&] {
      st.threads =
          worker_group(static_cast<std::size_t>(st.opts.io_threads), [&st](std::stop_token token, std::size_t) {
            std::stop_callback wake(token, [&st] { st.ioc.stop(); });
            st.ioc.run();
          });
    });
  }

  // The HTTPS context: TLS 1.2 or later, the certificate chain and the private key from PEM files.
  static result<void> load_tls(detail::server_state& st) {
    const auto& cert = st.opts.tls_cert_file;
    const auto& key = st.opts.tls_key_file;
    if (cert.empty() && key.empty()) return {};
    if (cert.empty() || key.empty())
      return fail(errc::invalid_argument, "http server: TLS needs both tls_cert_file and tls_key_file");
    JITEMBED_ASSIGN_OR_RETURN(auto ctx, detail::tls_server_context(cert, key, "http server"));
    st.tls.emplace(std::move(ctx));
    return {};
  }

  // The accept loop refers to the state, never to the (movable) server.
  static void accept(detail::server_state& st) {
    st.acceptor.async_accept(boost::asio::make_strand(st.ioc),
                             [&st](boost::system::error_code ec, boost::asio::ip::tcp::socket socket) {
                               on_accept(st, ec, std::move(socket));
                             });
  }

  static void on_accept(detail::server_state& st, boost::system::error_code ec, boost::asio::ip::tcp::socket socket) {
    if (ec) {
      if (ec == boost::asio::error::operation_aborted || !st.acceptor.is_open()) return;
      // Out of descriptors or similar: back off briefly instead of spinning.
      st.accept_retry.expires_after(std::chrono::milliseconds(20));
      st.accept_retry.async_wait([&st](boost::system::error_code wec) {
        if (!wec && st.acceptor.is_open()) accept(st);
      });
      return;
    }
    std::shared_ptr<detail::server_connection_base> conn;
    {
      std::lock_guard lk(st.mu);
      if (!st.stopping.load(std::memory_order_acquire) && st.conns.size() < st.opts.max_connections) {
        boost::system::error_code ignored;
        socket.set_option(boost::asio::ip::tcp::no_delay(true), ignored);
        const auto ep = socket.remote_endpoint(ignored);
        const auto id = st.next_id++;
        auto remote = ep.address().to_string() + ":" + std::to_string(ep.port());
        if (st.tls)
          conn = std::make_shared<detail::server_connection<detail::tls_stream>>(st, id, std::move(remote),
                                                                                 std::move(socket), *st.tls);
        else
          conn = std::make_shared<detail::server_connection<boost::beast::tcp_stream>>(st, id, std::move(remote),
                                                                                       std::move(socket));
        st.conns.emplace(id, conn);
      }
    }
    if (conn) {
      st.accepted.fetch_add(1, std::memory_order_relaxed);
      conn->start();
    } else {
      st.rejected.fetch_add(1, std::memory_order_relaxed);
      boost::system::error_code ignored;
      socket.close(ignored);
    }
    if (!st.stopping.load(std::memory_order_acquire)) accept(st);
  }

  std::unique_ptr<detail::server_state> state_;
};

}  // namespace jitembed::net::http
