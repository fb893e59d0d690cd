// The one HTTP client connection, plain or TLS, of http::client and the JIT client's transport (one stream type
// for Beast's operations); the verifying TLS context, SNI + host name checks, and the messages of a failed handshake.
#pragma once

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "jitembed/core/assert.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/net/http/detail/io_completion.hpp"
#include "jitembed/net/http/detail/tls_server.hpp"

namespace jitembed::net::http::detail {

// TLS 1.2+ with peer verification: against the PEM CA bundle `ca_file`, or the system's default CA paths
// when it is empty. io_error: the file cannot be read; invalid_argument: it holds no PEM certificate.
inline result<boost::asio::ssl::context> make_client_tls_context(const std::string& ca_file, std::string_view who) {
  namespace ssl = boost::asio::ssl;
  ssl::context ctx(ssl::context::tls_client);
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                  ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  ctx.set_verify_mode(ssl::verify_peer);
  boost::system::error_code ec;
  if (ca_file.empty()) {
    ctx.set_default_verify_paths(ec);
    if (ec)
      return fail(errc::io_error, std::string(who) + ": cannot load the system's CA certificates: " + ec.message());
    return ctx;
  }
  JITEMBED_TRY(check_tls_ca_file(ctx, ca_file, who, "CA"));
  return ctx;
}

// Before the handshake: SNI (host names only, RFC 6066) and what the certificate must name: the DNS name,
// or the IP address (a numeric host is matched against the certificate's IP SANs, never as a name).
// false: OpenSSL refused the name (out of memory, or not a valid name / address).
inline bool prepare_client_tls(SSL* h, const std::string& host) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  SSL_set_hostflags(h, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  if (!ec) return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(h), host.c_str()) == 1;
  return SSL_set_tlsext_host_name(h, host.c_str()) == 1 && SSL_set1_host(h, host.c_str()) == 1;
}

// Whether a handshake error is TLS's own verdict (a certificate that does not verify, a peer that does not
// speak TLS, no common protocol) rather than the network's: retrying the same endpoint cannot help.
inline bool is_tls_protocol_error(const boost::system::error_code& ec) noexcept {
  return ec.category() == boost::asio::error::get_ssl_category() ||
         (ec.category() == boost::asio::ssl::error::get_stream_category() &&
          ec != boost::asio::ssl::error::stream_truncated);
}

// "certificate verify failed (hostname mismatch)": OpenSSL's reason, with the certificate check's own
// reason when that is what failed.
inline std::string tls_failure_reason(const boost::system::error_code& ec, SSL* h) {
  std::string m = ec.message();
  if (h != nullptr) {
    const long v = SSL_get_verify_result(h);
    if (v != X509_V_OK) m += std::string(" (") + X509_verify_cert_error_string(v) + ")";
  }
  return m;
}

// The first (at most N) non-empty buffers of a sequence (a read or write may transfer less than all): one
// buffer sequence type for the TCP stream's operations.
template <class Buffer, std::size_t N>
struct buffer_prefix {
  using value_type = Buffer;
  using const_iterator = const Buffer*;
  template <class Sequence>
  explicit buffer_prefix(const Sequence& s) {
    for (auto i = boost::asio::buffer_sequence_begin(s); i != boost::asio::buffer_sequence_end(s) && n < N; ++i)
      if (Buffer b(*i); b.size() > 0) bufs[n++] = b;
  }
  const Buffer* begin() const noexcept { return bufs.data(); }
  const Buffer* end() const noexcept { return bufs.data() + n; }
  std::array<Buffer, N> bufs{};
  std::size_t n = 0;
};

// The TCP stream of a connection, plain or under TLS, whose reads and writes take erased completions: its
// operations are compiled once, for the plain connection's and the TLS layer's (handshake, read, write) use.
class tcp_layer {
 public:
  template <class ContextOrExecutor>
  explicit tcp_layer(ContextOrExecutor& ex) : tcp_(ex) {}
  using next_layer_type = boost::beast::tcp_stream;
  using lowest_layer_type = next_layer_type::socket_type;  // for asio::ssl::stream
  using executor_type = next_layer_type::executor_type;
  next_layer_type& next_layer() noexcept { return tcp_; }
  lowest_layer_type& lowest_layer() noexcept { return tcp_.socket(); }
  executor_type get_executor() { return tcp_.get_executor(); }
  template <class MutableBuffers, class Handler>
  void async_read_some(const MutableBuffers& b, Handler&& h) {  // Beast's and TLS's reads give one buffer
    tcp_.async_read_some(buffer_prefix<boost::asio::mutable_buffer, 1>(b), io_completion(std::forward<Handler>(h)));
  }
  template <class ConstBuffers, class Handler>
  void async_write_some(const ConstBuffers& b, Handler&& h) {  // 64: as many as Asio gathers in one call
    tcp_.async_write_some(buffer_prefix<boost::asio::const_buffer, 64>(b), io_completion(std::forward<Handler>(h)));
  }

 private:
  next_layer_type tcp_;
};
using tls_client_stream = boost::beast::ssl_stream<tcp_layer>;

// One connection with its read buffer, and the one AsyncStream of Beast's and Asio's operations on it (pass
// stream(), not a derived class): they are compiled once, for both streams and every handler (erased).
struct client_connection {
  // On `ex`, an io_context or an executor (the JIT client's: a strand, so that the connection's handlers
  // never run at once); `tls_ctx` null: plain; else TLS over the context (which outlives the connection).
  template <class ContextOrExecutor>
  client_connection(ContextOrExecutor&& ex, boost::asio::ssl::context* tls_ctx) {
    if (tls_ctx)
      tls.emplace(ex, *tls_ctx);
    else
      plain.emplace(ex);
  }
  std::optional<tcp_layer> plain;  // exactly one of the two
  std::optional<tls_client_stream> tls;
  boost::beast::flat_buffer buffer;

  boost::beast::tcp_stream& lowest() { return tls ? boost::beast::get_lowest_layer(*tls) : plain->next_layer(); }
  client_connection& stream() { return *this; }

  using executor_type = tcp_layer::executor_type;
  executor_type get_executor() { return lowest().get_executor(); }
  template <class MutableBuffers, class Handler>
  void async_read_some(const MutableBuffers& b, Handler&& h) {
    tls ? tls->async_read_some(b, erase(std::forward<Handler>(h)))
        : plain->async_read_some(b, erase(std::forward<Handler>(h)));
  }
  template <class ConstBuffers, class Handler>
  void async_write_some(const ConstBuffers& b, Handler&& h) {
    tls ? tls->async_write_some(b, erase(std::forward<Handler>(h)))
        : plain->async_write_some(b, erase(std::forward<Handler>(h)));
  }
  // Connecting and the TLS handshake (tls only) with erased completions too (`n` is 0).
  void async_connect(const std::vector<boost::asio::ip::tcp::endpoint>& eps, io_completion h) {
    lowest().async_connect(eps, [h = std::move(h)](boost::system::error_code ec, const auto&) mutable { h(ec, 0); });
  }
  void async_handshake(io_completion h) {
    tls->async_handshake(boost::asio::ssl::stream_base::client,
                         [h = std::move(h)](boost::system::error_code ec) mutable { h(ec, 0); });
  }

  // Shuts the socket down and closes it (pending operations complete with an error).
  void close() {
    boost::system::error_code ec;
    lowest().socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
    lowest().socket().close(ec);
  }

 private:
  // An erased completion runs on the stream's executor: so must the handler (no call site binds another;
  // Beast's and Asio's operations hold the same executor with outstanding work tracked).
  template <class Handler>
  io_completion erase(Handler&& h) {
    namespace asio = boost::asio;
    JITEMBED_ASSERT(asio::prefer(asio::get_associated_executor(h, get_executor()),
                                 asio::execution::outstanding_work.untracked) == get_executor(),
                    "a client_connection handler runs on the connection's executor");
    return io_completion(std::forward<Handler>(h));
  }
};

}  // namespace jitembed::net::http::detail
