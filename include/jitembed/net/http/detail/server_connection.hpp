// One HTTP/1.1 connection of the server: a state machine on its own strand with a timer per phase, over
// beast::tcp_stream or, for HTTPS, beast::ssl_stream.
#pragma once

#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "jitembed/net/http/detail/server_state.hpp"
#include "jitembed/net/http/detail/wire.hpp"

namespace jitembed::net::http {

namespace detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

// One connection over `Stream`: beast::tcp_stream (HTTP) or tls_stream (HTTPS: the handshake comes first,
// within header_timeout; a failed one closes the connection and counts in tls_failures).
template <class Stream>
class server_connection final : public server_connection_base,
                                public std::enable_shared_from_this<server_connection<Stream>> {
  static constexpr bool is_tls = std::is_same_v<Stream, tls_stream>;
  using std::enable_shared_from_this<server_connection<Stream>>::shared_from_this;
  using std::enable_shared_from_this<server_connection<Stream>>::weak_from_this;

 public:
  // `stream_args` construct the stream: the socket (plain), or the socket and the TLS context.
  template <class... StreamArgs>
  server_connection(server_state& st, std::uint64_t id, std::string remote, StreamArgs&&... stream_args)
      : st_(st),
        stream_(std::forward<StreamArgs>(stream_args)...),
        ex_(stream_.get_executor()),
        timer_(ex_),
        id_(id),
        remote_(std::move(remote)) {}

  // Called once after registration (from the acceptor's strand).
  void start() override {
    asio::dispatch(ex_, [self = shared_from_this()] {
      if constexpr (is_tls)
        self->handshake();
      else
        self->read_header();
    });
  }

  // stop(): close now if nothing is in flight, otherwise answer the current request with Connection: close.
  void begin_shutdown() override {
    asio::dispatch(ex_, [self = shared_from_this()] {
      self->closing_ = true;
      if (self->phase_ == phase::idle || self->phase_ == phase::handshake ||
          (self->phase_ == phase::header && self->buf_.size() == 0))
        self->close();
    });
  }

  void force_close() override {
    asio::dispatch(ex_, [self = shared_from_this()] { self->close(); });
  }

  const asio::any_io_executor& executor() const noexcept override { return ex_; }

  // Runs on the strand (posted by respond_state).
  void on_response(response r) override {
    if (phase_ != phase::handling) return;
    write(std::move(r), !keep_alive_ || closing_ || st_.stopping.load(std::memory_order_acquire));
  }

 private:
  enum class phase { handshake, idle, header, body, handling, writing, closed };

  beast::tcp_stream& lowest() noexcept { return beast::get_lowest_layer(stream_); }

  // ---- timers: a per-phase deadline that cancels the pending read (so a 408 can still be written)
  void arm(std::chrono::milliseconds d) {
    timed_out_ = false;
    const auto gen = ++timer_gen_;
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
      if (ec || gen != self->timer_gen_ || self->phase_ == phase::closed) return;
      self->timed_out_ = true;
      beast::error_code ignored;
      self->lowest().socket().cancel(ignored);
    });
  }
  void disarm() {
    ++timer_gen_;
    timer_.cancel();
  }

  // ---- the TLS handshake: a failure (a timeout included, which also counts as one) closes the connection
  void handshake() {
    phase_ = phase::handshake;
    arm(st_.opts.header_timeout);
    stream_.async_handshake(asio::ssl::stream_base::server, [self = shared_from_this()](beast::error_code ec) {
      self->disarm();
      if (self->phase_ != phase::handshake) return;  // closed by stop()
      if (ec) {
        self->st_.tls_failures.fetch_add(1, std::memory_order_relaxed);
        if (self->timed_out_) self->st_.timeouts.fetch_add(1, std::memory_order_relaxed);
        return self->close();
      }
      self->read_header();
    });
  }

  // Decrypted or undecrypted TLS bytes already read from the socket (a pipelined request), which a wait
  // on the socket would not see.
  bool tls_buffered() {
    if constexpr (is_tls) {
      SSL* h = stream_.native_handle();
      return SSL_pending(h) > 0 || BIO_ctrl_pending(SSL_get_rbio(h)) > 0;
    } else {
      return false;
    }
  }

  // ---- reading
  void wait_idle() {
    phase_ = phase::idle;
    if (closing_ || st_.stopping.load(std::memory_order_acquire)) return close();
    if (tls_buffered()) return read_header();
    arm(st_.opts.idle_timeout);
    lowest().socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      self->disarm();
      if (ec || self->phase_ != phase::idle) return self->close();  // idle timeout, stop, or error
      self->read_header();
    });
  }

  void read_header() {
    phase_ = phase::header;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(st_.opts.max_header_bytes, 0xffffffffu)));
    parser_->body_limit(st_.opts.max_body_bytes);
    arm(st_.opts.header_timeout);
    bhttp::async_read_header(stream_, buf_, *parser_,
                             [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    disarm();
    if (phase_ != phase::header) return;
    if (ec) return read_failed(ec, "header");
    const auto& h = parser_->get();
    if (auto cl = parser_->content_length(); cl && *cl > st_.opts.max_body_bytes) {
      return reject(413, "http: Content-Length " + std::to_string(*cl) + " > max_body_bytes " +
                             std::to_string(st_.opts.max_body_bytes));
    }
    if (parser_->is_done()) return dispatch_request();
    if (h.version() >= 11 && iequals(to_std(h[bhttp::field::expect]), "100-continue")) {
      phase_ = phase::body;
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      lowest().expires_after(st_.opts.write_timeout);
      asio::async_write(stream_, asio::const_buffer(kContinue.data(), kContinue.size()),
                        [self = shared_from_this()](beast::error_code wec, std::size_t) {
                          self->lowest().expires_never();
                          if (wec) {
                            if (wec == beast::error::timeout)
                              self->st_.timeouts.fetch_add(1, std::memory_order_relaxed);
                            return self->close();
                          }
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    phase_ = phase::body;
    arm(st_.opts.body_timeout);
    // Beast reads at most the buffer's free capacity (at least 512 bytes) per read: a large body gets room for
    // up to 256 KiB per read (a 16 MiB body was ~32,000 reads otherwise); small requests keep a small buffer.
    if (const auto cl = parser_->content_length(); cl && *cl > buf_.capacity())
      buf_.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(*cl, std::uint64_t{256} << 10)));
    bhttp::async_read(stream_, buf_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->disarm();
      if (self->phase_ != phase::body) return;
      if (ec) return self->read_failed(ec, "body");
      self->dispatch_request();
    });
  }

  void read_failed(beast::error_code ec, const char* what) {
    if (timed_out_) {
      st_.timeouts.fetch_add(1, std::memory_order_relaxed);
      const auto ms = phase_ == phase::header ? st_.opts.header_timeout : st_.opts.body_timeout;
      return reply_error(
          408, std::string("http: request ") + what + " not received within " + std::to_string(ms.count()) + " ms");
    }
    if (ec == bhttp::error::header_limit)
      return reject(431, "http: request header exceeds max_header_bytes " + std::to_string(st_.opts.max_header_bytes));
    if (ec == bhttp::error::body_limit)
      return reject(413, "http: request body exceeds max_body_bytes " + std::to_string(st_.opts.max_body_bytes));
    const bool parse_error = ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() &&
                             ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
    if (parse_error) return reject(400, "http: malformed request " + std::string(what) + ": " + ec.message());
    close();  // peer closed (possibly mid-message), reset, or stop() cancelled the read
  }

  void reject(int status, std::string message) {
    st_.bad.fetch_add(1, std::memory_order_relaxed);
    reply_error(status, message);
  }
  void reply_error(int status, std::string_view message) {
    keep_alive_ = false;  // unread bytes may follow: never reuse the connection after an error
    write(error_response(status, message), true);
  }

  // ---- handing the request to the service
  void dispatch_request() {
    phase_ = phase::handling;
    st_.requests.fetch_add(1, std::memory_order_relaxed);
    auto msg = parser_->release();
    parser_.reset();
    keep_alive_ = msg.keep_alive();
    http10_ = msg.version() < 11;
    head_only_ = msg.method() == bhttp::verb::head;
    request req;
    req.method = std::string(to_std(msg.method_string()));
    req.target = std::string(to_std(msg.target()));
    req.headers.reserve(16);
    for (const auto& f : msg)
      req.headers.emplace_back(std::string(to_std(f.name_string())), std::string(to_std(f.value())));
    req.body = std::move(msg.body());
    req.remote = remote_;
    auto state = std::make_shared<respond_state>(st_.gate, weak_from_this());
    responder respond = [state](response r) { state->respond(std::move(r)); };
    try {
      st_.on_request(std::move(req), std::move(respond));
    } catch (const std::exception& e) {
      state->respond(error_response(500, std::string("internal: handler threw: ") + e.what()));
    } catch (...) {
      state->respond(error_response(500, "internal: handler threw"));
    }
  }

  // ---- writing: head + body + pieces as one gather write, no copy of the payload
  void write(response r, bool close_after) {
    phase_ = phase::writing;
    out_resp_ = std::move(r);  // owns body/pieces while the write is in flight; buffers taken after the move
    const std::size_t n = out_resp_.content_length();
    out_head_ = serialize_response_head(out_resp_, n, close_after, http10_ && keep_alive_);
    if (head_only_)
      gather(out_bufs_, out_head_, {}, {});
    else
      gather(out_bufs_, out_head_, out_resp_.body, out_resp_.pieces);
    lowest().expires_after(st_.opts.write_timeout);
    asio::async_write(stream_, out_bufs_, [self = shared_from_this(), close_after](beast::error_code ec, std::size_t) {
      self->on_written(ec, close_after);
    });
  }

  void on_written(beast::error_code ec, bool close_after) {
    lowest().expires_never();
    out_bufs_.clear();
    out_head_.clear();
    out_resp_ = response{};
    if (ec == beast::error::timeout) st_.timeouts.fetch_add(1, std::memory_order_relaxed);
    if (ec || close_after) return close();
    if (buf_.size() > 0 || tls_buffered()) return read_header();  // a pipelined request is already buffered
    wait_idle();
  }

  // Without a TLS close_notify: the response's Content-Length already frames it, and a peer that would not
  // answer one must not hold the connection (clients read a missing close_notify as end of stream).
  void close() {
    if (phase_ == phase::closed) return;
    phase_ = phase::closed;
    disarm();
    beast::error_code ignored;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    lowest().close();
    st_.unregister(id_);
  }

  server_state& st_;
  Stream stream_;
  const asio::any_io_executor ex_;  // the connection's strand
  asio::steady_timer timer_;
  beast::flat_buffer buf_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  phase phase_ = is_tls ? phase::handshake : phase::header;
  std::uint64_t timer_gen_ = 0;
  bool timed_out_ = false;
  bool keep_alive_ = false;
  bool http10_ = false;
  bool head_only_ = false;
  bool closing_ = false;
  std::uint64_t id_;
  std::string remote_;
  response out_resp_;
  std::string out_head_;
  std::vector<asio::const_buffer> out_bufs_;
};

}  // namespace detail
}  // namespace jitembed::net::http
