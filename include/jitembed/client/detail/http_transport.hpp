// The client's HTTP/1.1 transport: KServe v2 requests over keep-alive connections, plain or TLS (Boost.Beast,
// asynchronous), one pool of connections per endpoint. It is the only code of the client that touches Beast.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
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
using net::http::detail::io_completion;

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

// Each attempt is a session (its request, built once under the engine's lock, and a connection): the
// connection's handlers run on its strand and touch only the session; the engine's lock is taken once, for
// the attempt's end (complete()). The pools have their own lock, `pool_mu_`.
class http_transport final : public transport {
 public:
  // `tls` verifies https:// endpoints (the client's CA); it outlives the transport.
  http_transport(const client_options& opts, asio::io_context& ioc, asio::ssl::context& tls, attempt_events& events)
      : opts_(opts), ioc_(ioc), tls_(tls), events_(events) {}

  void send(const attempt_ptr& a, deferred& d) override {
    if (!a->io) {
      auto s = std::make_shared<session>();
      if (auto built = build(*a, *s); !built) return events_.on_unsendable(a, built.error(), d);
      a->io = s;
    }
    if (!start(a)) events_.on_busy(a, d);
  }

  // From any thread (lock held): the session stops at its next handler; its connection leaves the pool's
  // count now and closes on its strand (a connection in the middle of an answer is not reused).
  void abandon(remote_attempt& a) override {
    if (!a.io) return;
    io(a).stopped = true;
    if (auto c = take(a)) asio::post(c->lowest().get_executor(), [c] { c->close(); });
  }

  void close_idle(endpoint_state& e) override {
    std::lock_guard lk(pool_mu_);
    if (const auto it = pools_.find(&e); it != pools_.end()) close_idle(it->second);
  }

  void forget(const endpoint_state& e) override {
    std::scoped_lock lk(pool_mu_, control_mu_);
    if (const auto it = pools_.find(&e); it != pools_.end()) close_idle(it->second), pools_.erase(it);
    control_.erase(e.addr.url);
  }

  // The control plane's calls: over a keep-alive client per endpoint and kind of call (each kind has its own
  // timeouts), made on first use.
  result<std::optional<model_identity>> identity(const endpoint_address& a, const std::string& model) override {
    return fetch_identity(*control(a, meta_calls), a, model, opts_);
  }
  result<model_metadata> metadata(const endpoint_address& a, const std::string& model) override {
    return fetch_metadata(*control(a, meta_calls), a, model, opts_);
  }
  bool ready(const endpoint_address& a, const std::string& model) override {
    auto r = control(a, probe_calls)->get("/v2/models/" + model + "/ready", auth_headers(opts_));
    return r && r->status == 200;
  }
  shm_call_result shared_memory(const endpoint_address& a, const std::string& region, const std::string& key,
                                std::size_t bytes) override {
    // Unregistering (its endpoint left the set, or the client closes): a client of its own, not kept after forget().
    const auto hc = key.empty() ? make_control(a, shm_calls) : control(a, shm_calls);
    return http_shm_call(*hc, region, key, bytes, opts_);
  }

 private:
  // One connection to an endpoint (net/http/detail/client_connection.hpp, on its own strand) and the parser
  // of its answer.
  struct connection : net::http::detail::client_connection {
    using client_connection::client_connection;
    std::optional<bhttp::response_parser<bhttp::string_body>> parser;
    std::uint64_t uses = 0;
  };
  using conn_ptr = std::shared_ptr<connection>;

  struct pool {
    std::vector<conn_ptr> idle;
    std::size_t open = 0;
  };

  // An attempt's session. After send() only its connection's handlers touch it, but for `conn` (under
  // pool_mu_: abandon() takes it from any thread) and `stopped`.
  struct session {
    conn_ptr conn;
    std::atomic<bool> stopped{false};  // the engine abandoned the attempt
    bool reused = false;
    bool fresh_retry = false;  // already replaced a stale pooled connection once
    std::string head;
    net::kserve::encoded_message msg;
    std::vector<asio::const_buffer> bufs;
  };
  static session& io(const remote_attempt& a) { return *std::static_pointer_cast<session>(a.io); }

  // The metadata GETs: the client's connect timeout, its request timeout capped at 10 s; region calls: capped
  // at 2 s; readiness probes: 0.5 s to connect, 1 s to answer. control() keeps one per endpoint and kind.
  enum control_kind { meta_calls, probe_calls, shm_calls };
  std::shared_ptr<net::http::client> control(const endpoint_address& a, control_kind kind) {
    std::lock_guard lk(control_mu_);
    auto& c = control_[a.url][kind];
    if (!c) c = make_control(a, kind);
    return c;
  }
  std::shared_ptr<net::http::client> make_control(const endpoint_address& a, control_kind kind) const {
    using ms = std::chrono::milliseconds;
    net::http::client_options ho;
    ho.tls = a.tls;
    ho.tls_ca_file = opts_.tls_ca_file;
    ho.connect_timeout = kind == probe_calls ? ms(500) : opts_.connect_timeout;
    ho.io_timeout = ms(std::min<std::int64_t>(opts_.request_timeout.count(), kind == meta_calls ? 10000 : 2000));
    if (kind == probe_calls) ho.io_timeout = ms(1000);
    return std::make_shared<net::http::client>(a.host, a.port, ho);
  }

  result<void> build(remote_attempt& a, session& st) {
    const remote_call& c = *a.call;
    auto msg = net::kserve::encode_request(attempt_request(a, opts_, opts_.binary_outputs));
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

  // A completion handler of the session's connection, on its strand: nothing once the engine abandoned the
  // attempt, on_error() on an error, else `next`. Every handler holds the connection: Beast's operations use
  // the stream and buffer until they complete, even when the session has dropped it. Erased (io_completion):
  // the connection's operations are compiled once, for net::http::client too.
  template <class Next>
  io_completion step(const attempt_ptr& a, const conn_ptr& conn, const char* stage, Next next) {
    return io_completion([this, a, conn, stage, next = std::move(next)](boost::system::error_code ec, std::size_t) {
      if (io(*a).stopped) return drop(*a);
      if (ec) return on_error(a, ec, stage);
      next();
    });
  }
  static constexpr const char* kHandshake = "TLS handshake";

  // A connection's executor: a strand only with several I/O threads (one thread is an implicit strand, and an
  // explicit one cost ~28 us a request at c=1: bench_client 8,000 -> 6,900 req/s).
  asio::any_io_executor connection_executor() {
    if (opts_.io_threads <= 1) return ioc_.get_executor();
    return asio::make_strand(ioc_);
  }

  // The session's request on a pooled connection or a new one; false when every connection of the endpoint
  // is busy. Under the engine's lock (send) or on the strand of a stale connection (without it).
  bool start(const attempt_ptr& a) {
    auto& s = io(*a);
    conn_ptr conn;
    {
      std::lock_guard lk(pool_mu_);
      if (s.stopped) return true;
      auto& p = pools_[a->ep.get()];
      s.reused = !p.idle.empty() && !s.fresh_retry;
      if (s.reused) {
        conn = std::move(p.idle.back());
        p.idle.pop_back();
      } else {
        if (p.open >= opts_.max_connections_per_endpoint) return false;
        conn = std::make_shared<connection>(connection_executor(), a->ep->addr.tls ? &tls_ : nullptr);
        ++p.open;
        ++a->ep->conns_opened;
      }
      s.conn = conn;
    }
    if (s.reused) return write(a, conn), true;
    // The connect timeout covers the TLS handshake too.
    conn->lowest().expires_at(std::min(a->call->deadline, clock::now() + opts_.connect_timeout));
    conn->async_connect(a->ep->resolved, step(a, conn, "connect", [this, a, conn] {
                          boost::system::error_code ignored;
                          conn->lowest().socket().set_option(tcp::no_delay(true), ignored);
                          if (!conn->tls) return write(a, conn);
                          if (!net::http::detail::prepare_client_tls(conn->tls->native_handle(), a->ep->addr.host))
                            return tls_failure(a, asio::error::invalid_argument);
                          conn->async_handshake(step(a, conn, kHandshake, [this, a, conn] { write(a, conn); }));
                        }));
    return true;
  }

  void write(const attempt_ptr& a, const conn_ptr& conn) {
    conn->lowest().expires_at(a->call->deadline);
    ++conn->uses;
    asio::async_write(conn->stream(), io(*a).bufs, step(a, conn, "send", [this, a, conn] { read(a, conn); }));
  }

  void read(const attempt_ptr& a, const conn_ptr& conn) {
    conn->parser.emplace();
    // Beast reads at most the buffer's free capacity (at least 512 bytes) per read: without this a 16 MiB
    // answer took ~32,000 reads and the HTTP transport ran at ~130 MB/s (bench_client_shm).
    if (conn->buffer.capacity() < kReadBufferBytes) conn->buffer.reserve(kReadBufferBytes);
    conn->parser->header_limit(1 << 20);
    conn->parser->body_limit(opts_.max_response_bytes);
    bhttp::async_read(conn->stream(), conn->buffer, *conn->parser, step(a, conn, "response", [this, a, conn] {
                        bool keep = false;
                        auto o = judge(*a, *conn, keep);  // decoded before the engine's lock
                        events_.complete(a, [&](deferred& d) {
                          release_conn(*a, keep);
                          events_.on_answer(a, std::move(o), d);
                        });
                      }));
  }

  // The attempt's end without an answer (on the strand): a TLS failure, or a failed stage, which a stale
  // pooled connection (the server closed it while idle) turns into the same attempt on a fresh connection.
  void on_error(const attempt_ptr& a, boost::system::error_code ec, const char* stage) {
    if (stage == kHandshake && net::http::detail::is_tls_protocol_error(ec)) return tls_failure(a, ec);
    auto& s = io(*a);
    const auto conn = take(*a);
    const bool stale =
        s.reused && !s.fresh_retry && conn && conn->uses > 1 &&
        (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::ssl::error::stream_truncated);
    if (conn) conn->close();
    if (stale && !s.stopped) {
      s.fresh_retry = true;
      if (!start(a)) events_.complete(a, [&](deferred& d) { events_.on_busy(a, d); });
      return;
    }
    const bool timed_out = ec == beast::error::timeout;
    std::string what =
        std::string(stage) + " on " + a->ep->addr.url + (timed_out ? " timed out" : " failed: " + ec.message());
    events_.complete(a, [&](deferred& d) { events_.on_no_answer(a, std::move(what), timed_out, d); });
  }

  void tls_failure(const attempt_ptr& a, boost::system::error_code ec) {
    const auto conn = take(*a);
    std::string reason = net::http::detail::tls_failure_reason(ec, conn ? conn->tls->native_handle() : nullptr);
    if (conn) conn->close();
    events_.complete(a, [&](deferred& d) { events_.on_tls_failure(a, std::move(reason), d); });
  }

  // The answer, decoded on its strand before the engine's lock (which drops it if a hedge won); `keep`: reusable.
  attempt_outcome judge(const remote_attempt& a, connection& conn, bool& keep) {
    auto msg = conn.parser->release();
    keep = msg.keep_alive();
    const int status = static_cast<int>(msg.result_int());
    std::string body = std::move(msg.body());
    std::optional<std::size_t> hlen;
    if (auto it = msg.find("Inference-Header-Content-Length"); it != msg.end()) {
      std::size_t v = 0;
      const auto s = net::http::detail::to_std(it->value());
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec == std::errc{} && p == s.data() + s.size()) hlen = v;
    }
    if (status != 200) return http_outcome(status, body, "model '" + a.call->model + "' on " + a.ep->addr.url);
    net::kserve::protocol_limits lim;
    lim.max_body_bytes = std::max<std::size_t>(lim.max_body_bytes, body.size());
    return {attempt_fault::none,
            attempt_result(net::kserve::decode_response(body, hlen, lim), a, opts_.max_response_bytes)};
  }

  static void close_idle(pool& p) {  // pool_mu_ held: each closes on its own strand
    for (auto& c : p.idle) asio::post(c->lowest().get_executor(), [c] { c->close(); });
    p.open -= std::min(p.open, p.idle.size());
    p.idle.clear();
  }

  // The session's connection, out of its pool's count: the caller closes it (on its strand).
  conn_ptr take(const remote_attempt& a) {
    auto& s = io(a);
    std::lock_guard lk(pool_mu_);
    if (const auto it = pools_.find(a.ep.get()); s.conn && it != pools_.end() && it->second.open) --it->second.open;
    return std::move(s.conn);
  }
  void drop(const remote_attempt& a) {
    if (auto c = take(a)) c->close();
  }

  // Back to the pool when the answer lets it (engine's lock held: draining).
  void release_conn(remote_attempt& a, bool keep_alive) {
    auto& s = io(a);
    if (!keep_alive || a.ep->draining || events_.closed()) return drop(a);
    std::lock_guard lk(pool_mu_);
    if (!s.conn) return;
    s.conn->lowest().expires_never();
    s.conn->parser.reset();
    pools_[a.ep.get()].idle.push_back(std::move(s.conn));
  }

  const client_options& opts_;
  asio::io_context& ioc_;
  asio::ssl::context& tls_;
  attempt_events& events_;
  std::mutex pool_mu_;
  std::unordered_map<const endpoint_state*, pool> pools_;
  std::mutex control_mu_;
  std::map<std::string, std::array<std::shared_ptr<net::http::client>, 3>> control_;  // by url, then kind
};

}  // namespace jitembed::client::detail
