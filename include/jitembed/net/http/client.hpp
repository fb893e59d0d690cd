// Synchronous, thread-safe HTTP/1.1 client on Boost.Beast (plain or HTTPS) with a pool of keep-alive
// connections, connect/exchange timeouts and a response size limit.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/net/http/detail/client_connection.hpp"
#include "jitembed/net/http/detail/wire.hpp"
#include "jitembed/net/http/message.hpp"
#include "jitembed/net/http/options.hpp"

namespace jitembed::net::http {

namespace detail {

// One pooled connection. Beast's timeouts only apply to asynchronous operations, so each connection owns
// a private io_context and runs it until the one pending operation completes: synchronous with deadlines.
struct own_io_context {  // a base before client_connection: constructed before the streams that use it
  boost::asio::io_context ioc{1};
};
struct blocking_connection : own_io_context, client_connection {
  explicit blocking_connection(boost::asio::ssl::context* tls_ctx) : client_connection(ioc, tls_ctx) {}

  // Runs the io_context until the operation started by `start(handler)` completes.
  template <class Start>
  boost::system::error_code run(Start&& start) {
    boost::system::error_code result = boost::asio::error::would_block;
    start(io_completion([&result](boost::system::error_code ec, std::size_t) { result = ec; }));
    ioc.restart();
    ioc.run();
    return result;
  }
};

}  // namespace detail

class client {
 public:
  client(std::string host, std::uint16_t port, client_options opts = {})
      : host_(std::move(host)), port_(port), opts_(opts) {}
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  // Sends `method target` with `body` followed by `pieces` (gathered, not copied) and reads the whole
  // response; a pooled connection the server closed meanwhile is replaced once. Errors: invalid_argument (bad
  // method/target/field, a CA file with no certificate), timeout, io_error (resolve, connect, reset, TLS
  // handshake, CA file), limit_exceeded, corrupt_data; past the arguments' checks with ctx::endpoint.
  result<response> request(std::string method, std::string target, header_list headers = {}, std::string body = {},
                           std::span<const bytes_view> pieces = {}) {
    if (!detail::is_token(method)) return fail(errc::invalid_argument, "http client: invalid method '" + method + "'");
    if (!detail::is_safe_target(target))
      return fail(errc::invalid_argument, "http client: invalid request target '" + target + "'");
    bool has_host = false;
    for (const auto& [k, v] : headers) {
      if (!detail::is_token(k) || !detail::is_safe_value(v))
        return fail(errc::invalid_argument, "http client: invalid header field '" + k + "'");
      if (detail::is_framing_field(k))
        return fail(errc::invalid_argument, "http client: header '" + k + "' is set by the client itself");
      has_host = has_host || detail::iequals(k, "host");
    }
    std::size_t length = body.size();
    for (auto p : pieces) length += p.size();

    std::string head;
    head.reserve(128 + headers.size() * 48);
    const bool sized =
        length > 0 || !(method == "GET" || method == "HEAD" || method == "DELETE" || method == "OPTIONS");
    detail::append_request_head(head, method, target, has_host ? std::string() : where(), headers,
                                sized ? std::optional(length) : std::nullopt);
    std::vector<boost::asio::const_buffer> bufs;
    detail::gather(bufs, head, body, pieces);
    const bool head_only = method == "HEAD";

    for (int attempt = 0;; ++attempt) {
      auto conn = attempt == 0 ? take_pooled() : nullptr;  // the retry uses a fresh connection
      const bool reused = conn != nullptr;
      if (!conn) {
        JITEMBED_ASSIGN_OR_RETURN(conn, connect().with_context(ctx::endpoint(where())));
      }
      bool stale = false, keep = false;
      auto r = exchange(*conn, bufs, head_only, method, target, stale, keep);
      if (r) {
        if (keep) give_back(std::move(conn));
        return r;
      }
      if (stale && reused && attempt == 0) continue;  // the server closed an idle connection: reconnect once
      return std::move(r).with_context(ctx::endpoint(where()));
    }
  }

  result<response> get(std::string target, header_list headers = {}) {
    return request("GET", std::move(target), std::move(headers));
  }
  result<response> post(std::string target, std::string body, header_list headers = {}) {
    return request("POST", std::move(target), std::move(headers), std::move(body));
  }

  std::size_t idle_connections() const {
    std::lock_guard lk(mu_);
    return pool_.size();
  }
  // Connections opened so far (keep-alive reuse keeps this low).
  std::uint64_t connections_opened() const noexcept { return opened_.load(std::memory_order_relaxed); }

 private:
  using conn_ptr = std::unique_ptr<detail::blocking_connection>;

  conn_ptr take_pooled() {
    std::lock_guard lk(mu_);
    if (pool_.empty()) return nullptr;
    auto c = std::move(pool_.back());
    pool_.pop_back();
    return c;
  }
  void give_back(conn_ptr c) {
    std::lock_guard lk(mu_);
    if (pool_.size() < opts_.pool_size) pool_.push_back(std::move(c));
  }

  std::string where() const { return host_ + ":" + std::to_string(port_); }
  std::string url() const {
    const bool v6 = host_.find(':') != std::string::npos;
    return (opts_.tls ? "https://" : "http://") + (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
  }

  // The verifying TLS context, made on first use (a bad CA file fails each request, not the constructor).
  result<boost::asio::ssl::context*> tls_context() {
    std::lock_guard lk(mu_);
    if (!tls_ctx_) {
      JITEMBED_ASSIGN_OR_RETURN(auto ctx, detail::make_client_tls_context(opts_.tls_ca_file, "http client"));
      tls_ctx_.emplace(std::move(ctx));
    }
    return &*tls_ctx_;
  }

  result<conn_ptr> connect() {
    namespace asio = boost::asio;
    using tcp = asio::ip::tcp;
    asio::ssl::context* tls_ctx = nullptr;
    if (opts_.tls) {
      JITEMBED_ASSIGN_OR_RETURN(tls_ctx, tls_context());
    }
    auto conn = std::make_unique<detail::blocking_connection>(tls_ctx);
    boost::system::error_code ec;
    std::vector<tcp::endpoint> eps;
    {
      std::lock_guard lk(mu_);
      eps = endpoints_;
    }
    if (eps.empty()) {
      const auto addr = asio::ip::make_address(host_, ec);
      if (!ec) {
        eps.emplace_back(addr, port_);
      } else {
        tcp::resolver resolver(conn->ioc);
        auto results = resolver.resolve(host_, std::to_string(port_), ec);
        if (ec || results.empty())
          return fail(errc::io_error, "http client: cannot resolve '" + host_ + "': " + ec.message());
        for (const auto& e : results) eps.push_back(e.endpoint());
      }
      std::lock_guard lk(mu_);
      endpoints_ = eps;
    }
    auto& lowest = conn->lowest();
    lowest.expires_after(opts_.connect_timeout);  // the TLS handshake included
    ec = conn->run([&](auto h) { conn->async_connect(eps, std::move(h)); });
    if (ec == boost::beast::error::timeout)
      return fail(errc::timeout, "http client: connect to " + where() + " timed out after " +
                                     std::to_string(opts_.connect_timeout.count()) + " ms");
    if (ec) return fail(errc::io_error, "http client: cannot connect to " + where() + ": " + ec.message());
    lowest.socket().set_option(tcp::no_delay(true), ec);
    if (conn->tls) {
      if (!detail::prepare_client_tls(conn->tls->native_handle(), host_))
        return fail(errc::invalid_argument, "http client: TLS cannot check the host name '" + host_ + "'");
      ec = conn->run([&](auto h) { conn->async_handshake(std::move(h)); });
      if (ec == boost::beast::error::timeout)
        return fail(errc::timeout, "http client: TLS handshake with " + url() + " timed out after " +
                                       std::to_string(opts_.connect_timeout.count()) + " ms");
      if (ec)
        return fail(errc::io_error, "http client: TLS handshake with " + url() +
                                        " failed: " + detail::tls_failure_reason(ec, conn->tls->native_handle()));
    }
    lowest.expires_never();
    opened_.fetch_add(1, std::memory_order_relaxed);
    return conn;
  }

  result<response> exchange(detail::blocking_connection& c, const std::vector<boost::asio::const_buffer>& bufs,
                            bool head_only, const std::string& method, const std::string& target, bool& stale,
                            bool& keep) {
    namespace bhttp = boost::beast::http;
    keep = false;
    const auto what = [&] { return method + " " + target + " on " + where(); };
    const auto timed_out = [&] {
      return fail(errc::timeout, "http client: timed out after " + std::to_string(opts_.io_timeout.count()) +
                                     " ms waiting for " + what());
    };
    c.lowest().expires_after(opts_.io_timeout);  // one deadline for the whole exchange
    auto ec = c.run([&](auto h) { boost::asio::async_write(c.stream(), bufs, std::move(h)); });
    if (ec == boost::beast::error::timeout) return timed_out();
    if (ec) {
      stale = true;
      return fail(errc::io_error, "http client: sending " + what() + " failed: " + ec.message());
    }
    bhttp::response_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(opts_.max_header_bytes, 0xffffffffu)));
    parser.body_limit(opts_.max_response_bytes);
    if (head_only) parser.skip(true);
    // Header first, so a declared Content-Length over the limit fails before any body byte is buffered
    // (body_limit alone then still bounds chunked bodies).
    ec = c.run([&](auto h) { bhttp::async_read_header(c.stream(), c.buffer, parser, std::move(h)); });
    if (!ec) {
      if (auto cl = parser.content_length(); cl && *cl > opts_.max_response_bytes && !head_only) {
        ec = bhttp::error::body_limit;
      } else if (!parser.is_done()) {
        // Room for up to 256 KiB per read (Beast reads at most the buffer's free capacity, 512 bytes at least).
        if (auto n = parser.content_length(); n && *n > c.buffer.capacity())
          c.buffer.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(*n, std::uint64_t{256} << 10)));
        ec = c.run([&](auto h) { bhttp::async_read(c.stream(), c.buffer, parser, std::move(h)); });
      }
    }
    c.lowest().expires_never();
    if (ec == boost::beast::error::timeout) return timed_out();
    // stream_truncated: a TLS peer that closed without close_notify, as servers close idle connections.
    if (ec == bhttp::error::end_of_stream || ec == boost::asio::error::connection_reset ||
        ec == boost::asio::error::eof || ec == boost::asio::ssl::error::stream_truncated) {
      stale = true;
      return fail(errc::io_error,
                  "http client: connection closed before a response to " + what() + ": " + ec.message());
    }
    if (ec == bhttp::error::body_limit)
      return fail(errc::limit_exceeded, "http client: response body of " + what() + " exceeds max_response_bytes " +
                                            std::to_string(opts_.max_response_bytes));
    if (ec == bhttp::error::header_limit)
      return fail(errc::limit_exceeded, "http client: response header of " + what() + " exceeds max_header_bytes " +
                                            std::to_string(opts_.max_header_bytes));
    if (ec == bhttp::error::partial_message)
      return fail(errc::io_error, "http client: connection closed mid-response to " + what());
    if (ec && ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category())
      return fail(errc::corrupt_data, "http client: malformed response to " + what() + ": " + ec.message());
    if (ec) return fail(errc::io_error, "http client: reading the response to " + what() + " failed: " + ec.message());

    auto msg = parser.release();
    response r;
    r.status = static_cast<int>(msg.result_int());
    r.headers.reserve(8);
    for (const auto& f : msg)
      r.headers.emplace_back(std::string(detail::to_std(f.name_string())), std::string(detail::to_std(f.value())));
    r.body = std::move(msg.body());
    keep = msg.keep_alive();
    return r;
  }

  std::string host_;
  std::uint16_t port_;
  client_options opts_;
  mutable std::mutex mu_;
  std::vector<conn_ptr> pool_;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints_;
  std::optional<boost::asio::ssl::context> tls_ctx_;
  std::atomic<std::uint64_t> opened_{0};
};

}  // namespace jitembed::net::http
