// The client's HTTP/1.1 transport: KServe v2 requests over keep-alive connections, plain or TLS (Boost.Beast,
// asynchronous), one pool of connections per endpoint. It is the only code of the client that touches Beast.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jitembed/client/detail/client_identity.hpp"
#include "jitembed/client/detail/kserve_call.hpp"
#include "jitembed/client/detail/transport.hpp"
#include "jitembed/net/http/client.hpp"
#include "jitembed/net/http/detail/client_connection.hpp"
#include "jitembed/net/http/detail/wire.hpp"
#include "jitembed/net/kserve/encode.hpp"

namespace jitembed::client::detail {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

// A failed infer answer's outcome (not 200): 5xx but 503/504 the endpoint's fault (502, a proxy whose upstream
// is down, retried as unavailable); 503, 504, 408, 429 or a retryable errc busy; other 4xx the request's (404
// always not_found); any other status (a redirect) the endpoint's.
inline attempt_outcome http_outcome(int status, std::string_view body, std::string_view what) {
  auto e = http_error(status, body, what);
  if (status == 404) e.code = errc::not_found;
  if (status == 502 && !service_trouble(e.code)) e.code = errc::unavailable;
  if (status >= 500 && status != 503 && status != 504) return {attempt_fault::endpoint, std::move(e)};
  if (status == 408 || status == 429 || status == 503 || status == 504 || service_trouble(e.code))
    return {attempt_fault::busy, std::move(e)};
  return {status >= 400 && status < 500 ? attempt_fault::request : attempt_fault::endpoint, std::move(e)};
}

inline constexpr std::size_t kReadBufferBytes = std::size_t{64} << 10;  // per connection

class http_transport final : public transport {
 public:
  // `tls` verifies https:// endpoints (the client's CA); it outlives the transport.
  http_transport(const client_options& opts, asio::io_context& ioc, asio::ssl::context& tls, attempt_events& events)
      : opts_(opts), ioc_(ioc), tls_(tls), events_(events) {}

  void send(const attempt_ptr& a, deferred& d) override {
    if (!a->io) {
      auto st = std::make_shared<attempt_io>();
      if (auto built = build(*a, *st); !built) return events_.on_unsendable(a, built.error(), d);
      a->io = st;
    }
    auto& st = io(*a);
    auto& pool = pools_[a->ep.get()];
    if (!pool.idle.empty() && !st.fresh_retry) {
      st.conn = std::move(pool.idle.back());
      pool.idle.pop_back();
      st.reused = true;
      return write(a);
    }
    if (pool.open >= opts_.max_connections_per_endpoint) return events_.on_busy(a, d);
    st.reused = false;
    st.conn = std::make_shared<connection>(ioc_, a->ep->addr.tls ? &tls_ : nullptr);
    ++pool.open;
    ++a->ep->conns_opened;
    http_transport* const self = this;  // the client state closes its transports before they go
    // The connect timeout covers the TLS handshake too.
    st.conn->lowest().expires_at(std::min(a->call->deadline, clock::now() + opts_.connect_timeout));
    // Every handler holds the connection: Beast's operations use the stream and buffer until they complete,
    // even when the attempt has dropped the connection (closing it only makes them complete early).
    st.conn->lowest().async_connect(a->ep->resolved,
                                    [self, a, conn = st.conn](boost::system::error_code ec, const tcp::endpoint&) {
                                      self->events_.complete(a, [&](deferred& dd) {
                                        if (ec) return self->on_error(a, ec, "connect", dd);
                                        boost::system::error_code ignored;
                                        conn->lowest().socket().set_option(tcp::no_delay(true), ignored);
                                        if (conn->tls) return self->handshake(a, dd);
                                        self->write(a);
                                      });
                                    });
  }

  void abandon(remote_attempt& a) override { drop_conn(a); }

  void close_idle(endpoint_state& e) override {
    if (const auto it = pools_.find(&e); it != pools_.end()) close_idle(it->second);
  }

  void forget(const endpoint_state& e) override {
    if (const auto it = pools_.find(&e); it != pools_.end()) {
      close_idle(it->second);
      pools_.erase(it);
    }
  }

  result<std::optional<model_identity>> identity(const endpoint_address& a, const std::string& model) override {
    return fetch_identity(a, model, opts_);
  }
  result<model_metadata> metadata(const endpoint_address& a, const std::string& model) override {
    return fetch_metadata(a, model, opts_);
  }
  bool ready(const endpoint_address& a, const std::string& model) override {
    net::http::client_options ho;
    ho.connect_timeout = std::chrono::milliseconds(500);
    ho.io_timeout = std::chrono::milliseconds(1000);
    ho.tls = a.tls;
    ho.tls_ca_file = opts_.tls_ca_file;
    net::http::client hc(a.host, a.port, ho);
    auto r = hc.get("/v2/models/" + model + "/ready", auth_headers(opts_));
    return r && r->status == 200;
  }
  shm_call_result shared_memory(const endpoint_address& a, const std::string& region, const std::string& key,
                                std::size_t bytes) override {
    return http_shm_call(a, region, key, bytes, opts_);
  }

 private:
  // One connection to an endpoint (net/http/detail/client_connection.hpp) and the parser of its answer.
  struct connection : net::http::detail::client_connection {
    using client_connection::client_connection;
    std::optional<bhttp::response_parser<bhttp::string_body>> parser;
    std::uint64_t uses = 0;
  };

  struct pool {
    std::vector<std::shared_ptr<connection>> idle;
    std::size_t open = 0;
  };

  // An attempt's request (built once) and connection.
  struct attempt_io {
    std::shared_ptr<connection> conn;
    bool reused = false;
    bool fresh_retry = false;  // already replaced a stale pooled connection once
    std::string head;
    net::kserve::encoded_message msg;
    std::vector<asio::const_buffer> bufs;
  };
  static attempt_io& io(const remote_attempt& a) { return *std::static_pointer_cast<attempt_io>(a.io); }

  result<void> build(remote_attempt& a, attempt_io& st) {
    const remote_call& c = *a.call;
    const auto remaining = std::chrono::duration_cast<std::chrono::microseconds>(c.deadline - clock::now()).count();
    auto msg = net::kserve::encode_request(
        attempt_request(a, opts_, std::max<std::int64_t>(1, remaining), opts_.binary_outputs));
    if (!msg) return msg.error();
    st.msg = std::move(*msg);
    const std::string hlen = st.msg.header_length ? std::to_string(*st.msg.header_length) : std::string();
    const std::string auth = opts_.auth_token.empty() ? std::string() : "Bearer " + opts_.auth_token;
    std::pair<std::string_view, std::string_view> fields[3] = {{"Content-Type", "application/octet-stream"}};
    std::size_t n = 1;
    if (st.msg.header_length) fields[n++] = {"Inference-Header-Content-Length", hlen};
    if (!auth.empty()) fields[n++] = {"Authorization", auth};
    st.head.reserve(256);
    net::http::detail::append_request_head(
        st.head, "POST", "/v2/models/" + c.model + (c.version.empty() ? "" : "/versions/" + c.version) + "/infer",
        a.ep->addr.host + ":" + std::to_string(a.ep->addr.port), std::span(fields, n), st.msg.body_size());
    net::http::detail::gather(st.bufs, st.head, st.msg.header, st.msg.binary);
    return {};
  }

  void handshake(const attempt_ptr& a, deferred& d) {
    http_transport* const self = this;
    auto conn = io(*a).conn;
    if (!net::http::detail::prepare_client_tls(conn->tls->native_handle(), a->ep->addr.host))
      return tls_failure(a, asio::error::invalid_argument, d);
    conn->tls->async_handshake(asio::ssl::stream_base::client, [self, a, conn](boost::system::error_code ec) {
      self->events_.complete(a, [&](deferred& dd) {
        if (ec && net::http::detail::is_tls_protocol_error(ec)) return self->tls_failure(a, ec, dd);
        if (ec) return self->on_error(a, ec, "TLS handshake", dd);
        self->write(a);
      });
    });
  }

  void tls_failure(const attempt_ptr& a, boost::system::error_code ec, deferred& d) {
    auto& st = io(*a);
    std::string reason = net::http::detail::tls_failure_reason(ec, st.conn ? st.conn->tls->native_handle() : nullptr);
    drop_conn(*a);
    events_.on_tls_failure(a, std::move(reason), d);
  }

  void write(const attempt_ptr& a) {
    http_transport* const self = this;
    auto& st = io(*a);
    auto conn = st.conn;
    conn->lowest().expires_at(a->call->deadline);
    ++conn->uses;
    conn->visit([&](auto& stream) {
      asio::async_write(stream, st.bufs, [self, a, conn](boost::system::error_code ec, std::size_t) {
        self->events_.complete(a, [&](deferred& d) {
          if (ec) return self->on_error(a, ec, "send", d);
          self->read(a);
        });
      });
    });
  }

  void read(const attempt_ptr& a) {
    http_transport* const self = this;
    auto conn = io(*a).conn;
    conn->parser.emplace();
    // Beast reads at most the buffer's free capacity (at least 512 bytes) per read: without this a 16 MiB
    // answer took ~32,000 reads and the HTTP transport ran at ~130 MB/s (bench_client_shm).
    if (conn->buffer.capacity() < kReadBufferBytes) conn->buffer.reserve(kReadBufferBytes);
    conn->parser->header_limit(1 << 20);
    conn->parser->body_limit(opts_.max_response_bytes);
    conn->visit([&](auto& stream) {
      bhttp::async_read(stream, conn->buffer, *conn->parser,
                        [self, a, conn](boost::system::error_code ec, std::size_t) {
                          self->events_.complete(a, [&](deferred& d) {
                            if (ec) return self->on_error(a, ec, "response", d);
                            self->on_response(a, d);
                          });
                        });
    });
  }

  void on_error(const attempt_ptr& a, boost::system::error_code ec, const char* stage, deferred& d) {
    auto& st = io(*a);
    const bool stale =
        st.reused && !st.fresh_retry && st.conn && st.conn->uses > 1 &&
        (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::ssl::error::stream_truncated);
    drop_conn(*a);
    if (stale && !a->call->done) {  // the server closed an idle keep-alive connection: same attempt, fresh connection
      st.fresh_retry = true;
      st.reused = false;
      return send(a, d);
    }
    const bool timed_out = ec == beast::error::timeout;
    events_.on_no_answer(
        a, std::string(stage) + " on " + a->ep->addr.url + (timed_out ? " timed out" : " failed: " + ec.message()),
        timed_out, d);
  }

  void on_response(const attempt_ptr& a, deferred& d) {
    const auto c = a->call;
    auto& st = io(*a);
    auto msg = st.conn->parser->release();
    const bool keep = msg.keep_alive();
    const int status = static_cast<int>(msg.result_int());
    std::string body = std::move(msg.body());
    std::optional<std::size_t> hlen;
    if (auto it = msg.find("Inference-Header-Content-Length"); it != msg.end()) {
      std::size_t v = 0;
      const auto s = net::http::detail::to_std(it->value());
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec == std::errc{} && p == s.data() + s.size()) hlen = v;
    }
    release_conn(*a, keep);
    if (status != 200)
      return events_.on_answer(a, http_outcome(status, body, "model '" + c->model + "' on " + a->ep->addr.url), d);
    attempt_outcome o{attempt_fault::none, fail(errc::cancelled, "answered after the call finished")};
    if (!c->done) {  // a call already finished (a hedge won): the latency only
      net::kserve::protocol_limits lim;
      lim.max_body_bytes = std::max<std::size_t>(lim.max_body_bytes, body.size());
      o.answer = attempt_result(net::kserve::decode_response(body, hlen, lim), *a, opts_.max_response_bytes);
    }
    events_.on_answer(a, std::move(o), d);
  }

  static void close_idle(pool& p) {
    for (auto& conn : p.idle) conn->close();
    p.open -= std::min(p.open, p.idle.size());
    p.idle.clear();
  }

  void drop_conn(remote_attempt& a) {
    if (!a.io) return;
    auto& st = io(a);
    if (!st.conn) return;
    st.conn->close();
    if (auto it = pools_.find(a.ep.get()); it != pools_.end() && it->second.open) --it->second.open;
    st.conn.reset();
  }

  void release_conn(remote_attempt& a, bool keep_alive) {
    auto& st = io(a);
    if (!st.conn) return;
    if (keep_alive && !a.ep->draining && !events_.closed()) {
      st.conn->lowest().expires_never();
      st.conn->parser.reset();
      pools_[a.ep.get()].idle.push_back(std::move(st.conn));
    } else {
      drop_conn(a);
    }
  }

  const client_options& opts_;
  asio::io_context& ioc_;
  asio::ssl::context& tls_;
  attempt_events& events_;
  std::unordered_map<const endpoint_state*, pool> pools_;
};

}  // namespace jitembed::client::detail
