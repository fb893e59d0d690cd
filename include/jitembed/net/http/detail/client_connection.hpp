// One HTTP client connection, plain (http://) or TLS (https://), with its read buffer: the one connection type
// of http::client (synchronous, on a private io_context) and the JIT client's HTTP transport (asynchronous).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <optional>

#include "jitembed/net/http/detail/tls_client.hpp"

namespace jitembed::net::http::detail {

struct client_connection {
  // `tls_ctx` null: plain; else TLS over the context (which outlives the connection).
  client_connection(boost::asio::io_context& ioc, boost::asio::ssl::context* tls_ctx) {
    if (tls_ctx)
      tls.emplace(ioc, *tls_ctx);
    else
      plain.emplace(ioc);
  }
  std::optional<boost::beast::tcp_stream> plain;  // exactly one of the two
  std::optional<tls_client_stream> tls;
  boost::beast::flat_buffer buffer;

  boost::beast::tcp_stream& lowest() { return tls ? boost::beast::get_lowest_layer(*tls) : *plain; }
  // f(stream) on whichever stream the connection has.
  template <class F>
  decltype(auto) visit(F&& f) {
    return tls ? f(*tls) : f(*plain);
  }
  // Shuts the socket down and closes it (pending operations complete with an error).
  void close() {
    boost::system::error_code ec;
    lowest().socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
    lowest().socket().close(ec);
  }
};

}  // namespace jitembed::net::http::detail
