// TCP rendezvous store (like PyTorch's TCPStore behind torchrun): one process hosts the server, every rank
// connects to it; get() waits on the server side, so clients never poll.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/parallel/store.hpp"

namespace jitembed::parallel {

// Wire protocol (every integer little-endian). A client sends one request, then waits for its reply before
// sending the next one.
//   request: op u8 | key_len u32 | key | value_len u64 | value
//     op 1 set:   value = the value (value_len <= max_value_bytes)
//     op 2 get:   value = u64 timeout in milliseconds (value_len 8); the server parks the request until the
//                 key is set or the timeout passes
//     op 3 check: no value (value_len 0)
//   reply:   status u8 | value_len u64 | value
//     status 0 ok:      set → empty; get → the value; check → one byte, 0 (absent) or 1 (present)
//     status 1 timeout: get only, the key was not set in time; empty
// key_len <= max_key_bytes. An unknown op, an over-limit or inconsistent length, bytes sent while a get is
// parked, or a request (or reply) stalling midway for longer than io_timeout makes the server close that
// connection; it keeps serving the others.
struct tcp_store_options {
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(30);  // connect(): retry this long
  // Client: a request's budget beyond a get's own timeout. Server: how long a request or a reply may stall
  // midway (an idle connection between requests is never timed out).
  std::chrono::milliseconds io_timeout = std::chrono::seconds(30);
  std::uint32_t max_key_bytes = 4096;
  std::uint64_t max_value_bytes = std::uint64_t{64} << 20;
};

namespace detail {

namespace tcp_wire {
inline constexpr std::uint8_t op_set = 1;
inline constexpr std::uint8_t op_get = 2;
inline constexpr std::uint8_t op_check = 3;
inline constexpr std::uint8_t status_ok = 0;
inline constexpr std::uint8_t status_timeout = 1;
inline constexpr std::size_t request_head = 5;  // op + key_len
inline constexpr std::size_t reply_head = 9;    // status + value_len
// Longest wait the server parks a get for: keeps the timer arithmetic far from overflow.
inline constexpr std::chrono::milliseconds max_wait = std::chrono::hours(24 * 365);

inline void put_u32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline void put_u64(std::byte* p, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline std::uint32_t get_u32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}
inline std::uint64_t get_u64(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}
}  // namespace tcp_wire

class tcp_store_session;
using tcp_store_value = std::shared_ptr<const std::vector<std::byte>>;

// Everything the server owns. One I/O thread runs `ioc`, so the maps need no lock. `ioc` is declared first:
// it outlives the sockets and timers, and destroying it destroys the handlers still holding sessions.
struct tcp_store_state {
  explicit tcp_store_state(tcp_store_options o) : opts(o) {}

  tcp_store_options opts;
  boost::asio::io_context ioc{1};
  boost::asio::ip::tcp::acceptor acceptor{ioc};
  boost::asio::steady_timer accept_retry{ioc};
  std::map<std::string, tcp_store_value, std::less<>> data;
  std::map<std::string, std::vector<std::shared_ptr<tcp_store_session>>, std::less<>> waiters;  // parked gets
  std::map<std::uint64_t, std::shared_ptr<tcp_store_session>> sessions;
  std::uint64_t next_id = 0;
  bool stopping = false;
};

// One client connection on the server: reads a request, answers it, reads the next.
class tcp_store_session : public std::enable_shared_from_this<tcp_store_session> {
 public:
  using error_code = boost::system::error_code;

  tcp_store_session(tcp_store_state& st, boost::asio::ip::tcp::socket sock, std::uint64_t id)
      : st_(st), sock_(std::move(sock)), stall_(st.ioc), park_(st.ioc), id_(id) {}

  void start() { read_head(); }

  // Closes the connection and forgets the session (idempotent).
  void close() {
    if (closed_) return;
    closed_ = true;
    error_code ignored;
    sock_.close(ignored);
    stall_.cancel();
    park_.cancel();
    if (parked_) leave_waiters();
    parked_ = false;
    reply_value_.reset();
    st_.sessions.erase(id_);  // the caller's handler (or stop()) still holds a reference
  }

  // A set() of the key this session waits for.
  void wake(const tcp_store_value& v) {
    if (!parked_ || closed_) return;
    end_park();
    reply(tcp_wire::status_ok, v);
  }

 private:
  void read_head() {
    if (closed_) return;
    boost::asio::async_read(sock_, boost::asio::buffer(head_), [self = shared_from_this()](error_code ec, std::size_t) {
      if (ec || self->closed_) return self->close();
      self->on_head();
    });
  }

  void on_head() {
    op_ = std::to_integer<std::uint8_t>(head_[0]);
    const std::uint32_t key_len = tcp_wire::get_u32(head_.data() + 1);
    if (op_ < tcp_wire::op_set || op_ > tcp_wire::op_check || key_len > st_.opts.max_key_bytes) return close();
    arm_stall();
    key_.resize(static_cast<std::size_t>(key_len) + 8);  // the key, then value_len
    boost::asio::async_read(sock_, boost::asio::buffer(key_), [self = shared_from_this()](error_code ec, std::size_t) {
      if (ec || self->closed_) return self->close();
      self->on_key();
    });
  }

  void on_key() {
    const std::uint64_t value_len = tcp_wire::get_u64(reinterpret_cast<const std::byte*>(key_.data() + key_.size() - 8));
    key_.resize(key_.size() - 8);
    if (op_ == tcp_wire::op_set) {
      if (value_len > st_.opts.max_value_bytes) return close();
      value_len_ = value_len;
      value_.clear();
      return read_value();
    }
    if (op_ == tcp_wire::op_check) {
      if (value_len != 0) return close();
      disarm_stall();
      const bool present = st_.data.find(key_) != st_.data.end();
      return reply(tcp_wire::status_ok, std::make_shared<const std::vector<std::byte>>(1, static_cast<std::byte>(present ? 1 : 0)));
    }
    if (value_len != 8) return close();  // get: the timeout
    boost::asio::async_read(sock_, boost::asio::buffer(wait_), [self = shared_from_this()](error_code ec, std::size_t) {
      if (ec || self->closed_) return self->close();
      self->on_get();
    });
  }

  // The value grows as its bytes arrive, so a peer that announces 64 MiB and sends nothing costs 64 KiB.
  void read_value() {
    const std::size_t have = value_.size();
    if (have == value_len_) return on_set();
    const std::size_t step = static_cast<std::size_t>(
        std::min<std::uint64_t>(value_len_ - have, std::max<std::size_t>(have, std::size_t{64} << 10)));
    value_.resize(have + step);
    boost::asio::async_read(sock_, boost::asio::buffer(value_.data() + have, step),
                            [self = shared_from_this()](error_code ec, std::size_t) {
                              if (ec || self->closed_) return self->close();
                              self->read_value();
                            });
  }

  void on_set() {
    disarm_stall();
    auto v = std::make_shared<const std::vector<std::byte>>(std::move(value_));
    value_ = {};
    st_.data.insert_or_assign(key_, v);
    if (auto it = st_.waiters.find(key_); it != st_.waiters.end()) {
      auto woken = std::move(it->second);
      st_.waiters.erase(it);
      for (auto& w : woken) w->wake(v);
    }
    reply(tcp_wire::status_ok, nullptr);
  }

  void on_get() {
    disarm_stall();
    if (auto it = st_.data.find(key_); it != st_.data.end()) return reply(tcp_wire::status_ok, it->second);
    const auto wait = std::min<std::uint64_t>(tcp_wire::get_u64(wait_.data()), tcp_wire::max_wait.count());
    parked_ = true;
    const std::uint64_t gen = ++park_gen_;
    st_.waiters[key_].push_back(shared_from_this());
    park_.expires_after(std::chrono::milliseconds(static_cast<std::int64_t>(wait)));
    park_.async_wait([self = shared_from_this(), gen](error_code ec) {
      if (ec || self->closed_ || !self->parked_ || gen != self->park_gen_) return;
      self->leave_waiters();
      self->end_park();
      self->reply(tcp_wire::status_timeout, nullptr);
    });
    // Watch the socket while parked: end of stream means the client is gone (free its slot now); a byte means
    // it broke the one-request-at-a-time rule.
    watching_ = true;
    sock_.async_read_some(boost::asio::buffer(&watch_byte_, 1), [self = shared_from_this()](error_code ec, std::size_t) {
      self->watching_ = false;
      if (self->closed_) return;
      if (ec == boost::asio::error::operation_aborted) {  // end_park() cancelled it
        if (self->resume_after_watch_) {
          self->resume_after_watch_ = false;
          self->read_head();
        }
        return;
      }
      self->close();
    });
  }

  void end_park() {
    parked_ = false;
    ++park_gen_;
    park_.cancel();
    error_code ignored;
    sock_.cancel(ignored);  // the watch; no other operation is outstanding while parked
  }

  void leave_waiters() {
    auto it = st_.waiters.find(key_);
    if (it == st_.waiters.end()) return;
    auto& v = it->second;
    v.erase(std::remove_if(v.begin(), v.end(), [this](const auto& s) { return s.get() == this; }), v.end());
    if (v.empty()) st_.waiters.erase(it);
  }

  void reply(std::uint8_t status, tcp_store_value v) {
    if (closed_) return;
    reply_head_[0] = static_cast<std::byte>(status);
    tcp_wire::put_u64(reply_head_.data() + 1, v ? v->size() : 0);
    reply_value_ = std::move(v);
    std::array<boost::asio::const_buffer, 2> bufs{boost::asio::buffer(reply_head_), boost::asio::const_buffer()};
    if (reply_value_) bufs[1] = boost::asio::buffer(reply_value_->data(), reply_value_->size());
    arm_stall();
    boost::asio::async_write(sock_, bufs, [self = shared_from_this()](error_code ec, std::size_t) {
      self->reply_value_.reset();
      if (ec || self->closed_) return self->close();
      self->disarm_stall();
      if (self->watching_) {
        self->resume_after_watch_ = true;  // read on once the cancelled watch has completed
      } else {
        self->read_head();
      }
    });
  }

  void arm_stall() {
    const std::uint64_t gen = ++stall_gen_;
    stall_.expires_after(st_.opts.io_timeout);
    stall_.async_wait([self = shared_from_this(), gen](error_code ec) {
      if (!ec && gen == self->stall_gen_ && !self->closed_) self->close();
    });
  }
  void disarm_stall() {
    ++stall_gen_;
    stall_.cancel();
  }

  tcp_store_state& st_;
  boost::asio::ip::tcp::socket sock_;
  boost::asio::steady_timer stall_;
  boost::asio::steady_timer park_;
  std::uint64_t id_;
  std::array<std::byte, tcp_wire::request_head> head_{};
  std::array<std::byte, 8> wait_{};
  std::array<std::byte, tcp_wire::reply_head> reply_head_{};
  std::string key_;
  std::vector<std::byte> value_;
  std::uint64_t value_len_ = 0;
  tcp_store_value reply_value_;
  std::uint64_t stall_gen_ = 0;
  std::uint64_t park_gen_ = 0;
  std::uint8_t op_ = 0;
  char watch_byte_ = 0;
  bool closed_ = false;
  bool parked_ = false;
  bool watching_ = false;
  bool resume_after_watch_ = false;
};

// The listening side: an acceptor and one I/O thread.
class tcp_store_server {
 public:
  explicit tcp_store_server(tcp_store_options opts) : st_(std::make_unique<tcp_store_state>(opts)) {}
  tcp_store_server(const tcp_store_server&) = delete;
  tcp_store_server& operator=(const tcp_store_server&) = delete;
  ~tcp_store_server() { stop(); }

  result<std::uint16_t> start(const std::string& host, std::uint16_t port) {
    namespace asio = boost::asio;
    using tcp = asio::ip::tcp;
    auto& st = *st_;
    const std::string where = host + ":" + std::to_string(port);
    boost::system::error_code ec;
    tcp::endpoint ep;
    const auto addr = asio::ip::make_address(host, ec);
    if (!ec) {
      ep = tcp::endpoint(addr, port);
    } else {
      tcp::resolver resolver(st.ioc);
      auto results = resolver.resolve(host, std::to_string(port), ec);
      if (ec || results.empty()) return fail(errc::io_error, "tcp_store: cannot resolve host '" + host + "': " + ec.message());
      ep = results.begin()->endpoint();
    }
    st.acceptor.open(ep.protocol(), ec);
    if (ec) return fail(errc::io_error, "tcp_store: cannot open a socket for " + where + ": " + ec.message());
    st.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    st.acceptor.bind(ep, ec);
    if (ec) {
      st.acceptor.close(ec);
      return fail(errc::io_error, "tcp_store: cannot bind " + where + ": " + ec.message());
    }
    st.acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      st.acceptor.close(ec);
      return fail(errc::io_error, "tcp_store: cannot listen on " + where + ": " + ec.message());
    }
    const std::uint16_t bound = st.acceptor.local_endpoint(ec).port();
    accept();
    thread_ = std::thread([&st] {
      for (;;) {
        try {
          st.ioc.run();
          return;
        } catch (...) {  // a handler threw (std::bad_alloc): that session is lost, the others go on
        }
      }
    });
    return bound;
  }

  // Closes the acceptor and every connection (clients waiting in get() see the connection close), then
  // joins the I/O thread.
  void stop() {
    if (!thread_.joinable()) return;
    auto& st = *st_;
    boost::asio::post(st.ioc, [&st] {
      st.stopping = true;
      boost::system::error_code ignored;
      st.accept_retry.cancel();
      st.acceptor.close(ignored);
      std::vector<std::shared_ptr<tcp_store_session>> all;
      for (auto& [id, s] : st.sessions) all.push_back(s);
      for (auto& s : all) s->close();
      st.waiters.clear();
      st.sessions.clear();
      st.ioc.stop();
    });
    thread_.join();
  }

 private:
  void accept() {
    auto& st = *st_;
    st.acceptor.async_accept([&st, this](boost::system::error_code ec, boost::asio::ip::tcp::socket sock) {
      if (st.stopping) return;
      if (ec) {
        if (ec == boost::asio::error::operation_aborted || !st.acceptor.is_open()) return;
        // Out of descriptors or similar: back off briefly instead of spinning.
        st.accept_retry.expires_after(std::chrono::milliseconds(20));
        st.accept_retry.async_wait([&st, this](boost::system::error_code wec) {
          if (!wec && !st.stopping) accept();
        });
        return;
      }
      boost::system::error_code ignored;
      sock.set_option(boost::asio::ip::tcp::no_delay(true), ignored);
      const auto id = st.next_id++;
      auto s = std::make_shared<tcp_store_session>(st, std::move(sock), id);
      st.sessions.emplace(id, s);
      s->start();
      accept();
    });
  }

  std::unique_ptr<tcp_store_state> st_;
  std::thread thread_;
};

}  // namespace detail

// A store served over TCP. listen() hosts the server (an I/O thread) and connects to it; connect() joins one.
// Every call is thread-safe (one connection per tcp_store, calls take turns). After an I/O failure or a
// corrupt reply the connection is closed and every later call fails with io_error.
//   set: limit_exceeded (key over max_key_bytes, value over max_value_bytes), io_error, timeout (no reply
//        within io_timeout)
//   get: timeout (key not set within `timeout`), plus the above; corrupt_data / limit_exceeded for a bad reply
class tcp_store final : public store {
 public:
  using store::set;

  // Hosts the store on host:port (port 0: an ephemeral port, see port()); loopback unless asked otherwise.
  static result<std::unique_ptr<tcp_store>> listen(std::string host = "127.0.0.1", std::uint16_t port = 0,
                                                   tcp_store_options opts = {}) {
    if (auto bad = check_options(opts); !bad) return std::move(bad).error();
    auto server = std::make_unique<detail::tcp_store_server>(opts);
    auto bound = server->start(host, port);
    if (!bound) return std::move(bound).error();
    std::unique_ptr<tcp_store> s(new tcp_store(host, *bound, opts));
    s->server_ = std::move(server);
    if (auto r = s->open(); !r) return std::move(r).error();
    return s;
  }

  // Connects to a server, retrying until opts.connect_timeout (the server may start later) → timeout.
  static result<std::unique_ptr<tcp_store>> connect(std::string host, std::uint16_t port, tcp_store_options opts = {}) {
    if (auto bad = check_options(opts); !bad) return std::move(bad).error();
    std::unique_ptr<tcp_store> s(new tcp_store(std::move(host), port, opts));
    if (auto r = s->open(); !r) return std::move(r).error();
    return s;
  }

  tcp_store(const tcp_store&) = delete;
  tcp_store& operator=(const tcp_store&) = delete;

  // Closes the connection; a listening store then stops its server (its clients see the connection close).
  ~tcp_store() override {
    {
      std::lock_guard lock(mu_);
      boost::system::error_code ignored;
      sock_.close(ignored);
    }
    server_.reset();
  }

  result<void> set(std::string_view key, std::span<const std::byte> value) override {
    if (value.size() > opts_.max_value_bytes)
      return fail(errc::limit_exceeded, "tcp_store: set('" + std::string(key) + "'): value of " +
                                            std::to_string(value.size()) + " bytes > max_value_bytes " +
                                            std::to_string(opts_.max_value_bytes));
    std::lock_guard lock(mu_);
    auto r = call(detail::tcp_wire::op_set, key, value, opts_.io_timeout, "set");
    if (!r) return std::move(r).error();
    if (r->status != detail::tcp_wire::status_ok || !r->value.empty())
      return broken(errc::corrupt_data, "tcp_store: unexpected reply to set('" + std::string(key) + "') from " + where());
    return {};
  }

  result<std::vector<std::byte>> get(std::string_view key, std::chrono::milliseconds timeout) override {
    timeout = std::clamp(timeout, std::chrono::milliseconds(0), detail::tcp_wire::max_wait);
    std::array<std::byte, 8> wait{};
    detail::tcp_wire::put_u64(wait.data(), static_cast<std::uint64_t>(timeout.count()));
    std::lock_guard lock(mu_);
    auto r = call(detail::tcp_wire::op_get, key, wait, timeout + opts_.io_timeout, "get");
    if (!r) return std::move(r).error();
    if (r->status == detail::tcp_wire::status_timeout) {
      if (!r->value.empty())
        return broken(errc::corrupt_data, "tcp_store: timeout reply to get('" + std::string(key) + "') from " + where() + " carries a value");
      return fail(errc::timeout, "store: key '" + std::string(key) + "' not set within " + std::to_string(timeout.count()) +
                                     " ms (tcp_store " + where() + ")");
    }
    return std::move(r->value);
  }

  result<bool> check(std::string_view key) override {
    std::lock_guard lock(mu_);
    auto r = call(detail::tcp_wire::op_check, key, {}, opts_.io_timeout, "check");
    if (!r) return std::move(r).error();
    if (r->status != detail::tcp_wire::status_ok || r->value.size() != 1 || std::to_integer<std::uint8_t>(r->value[0]) > 1)
      return broken(errc::corrupt_data, "tcp_store: malformed reply to check('" + std::string(key) + "') from " + where());
    return r->value[0] == std::byte{1};
  }

  // The server's port (the bound one for listen(port 0)) and host as given.
  std::uint16_t port() const noexcept { return port_; }
  const std::string& host() const noexcept { return host_; }
  bool is_server() const noexcept { return server_ != nullptr; }
  const tcp_store_options& options() const noexcept { return opts_; }

 private:
  using error_code = boost::system::error_code;
  using clock = std::chrono::steady_clock;

  struct reply {
    std::uint8_t status = 0;
    std::vector<std::byte> value;
  };

  tcp_store(std::string host, std::uint16_t port, tcp_store_options opts)
      : host_(std::move(host)), port_(port), opts_(opts) {}

  static result<void> check_options(const tcp_store_options& o) {
    if (o.connect_timeout.count() <= 0 || o.io_timeout.count() <= 0)
      return fail(errc::invalid_argument, "tcp_store: connect_timeout " + std::to_string(o.connect_timeout.count()) +
                                              " ms and io_timeout " + std::to_string(o.io_timeout.count()) +
                                              " ms must both be > 0");
    return {};
  }

  std::string where() const { return host_ + ":" + std::to_string(port_); }

  // Runs the private io_context until the operation `start(handler)` began completes or `deadline` passes
  // (then the socket is closed and `timed_out` set): synchronous I/O with a deadline.
  template <class Start>
  error_code run_until(Start&& start, clock::time_point deadline, bool& timed_out) {
    error_code result = boost::asio::error::would_block;
    bool done = false;
    start([&result, &done](const error_code& ec, auto&&...) {
      result = ec;
      done = true;
    });
    ioc_.restart();
    ioc_.run_until(deadline);
    timed_out = !done;
    if (!done) {
      error_code ignored;
      sock_.close(ignored);
      ioc_.restart();
      ioc_.run();  // completes the aborted operation
    }
    return result;
  }

  result<void> open() {
    namespace asio = boost::asio;
    using tcp = asio::ip::tcp;
    const auto deadline = clock::now() + opts_.connect_timeout;
    std::string last = "no attempt";
    for (;;) {
      error_code ec;
      std::vector<tcp::endpoint> eps;
      const auto addr = asio::ip::make_address(host_, ec);
      if (!ec) {
        eps.emplace_back(addr, port_);
      } else {
        tcp::resolver resolver(ioc_);
        auto results = resolver.resolve(host_, std::to_string(port_), ec);
        if (ec) last = "cannot resolve host: " + ec.message();
        for (const auto& e : results) eps.push_back(e.endpoint());
      }
      if (!eps.empty()) {
        error_code ignored;
        sock_.close(ignored);
        bool timed_out = false;
        ec = run_until([&](auto handler) { asio::async_connect(sock_, eps, std::move(handler)); }, deadline, timed_out);
        if (!ec && !timed_out) {
          sock_.set_option(tcp::no_delay(true), ignored);
          return {};
        }
        last = timed_out ? "connect timed out" : ec.message();
      }
      const auto now = clock::now();
      if (now >= deadline) break;
      std::this_thread::sleep_for(std::min<clock::duration>(std::chrono::milliseconds(20), deadline - now));
    }
    error_code ignored;
    sock_.close(ignored);
    return fail(errc::timeout, "tcp_store: cannot connect to " + where() + " within " +
                                   std::to_string(opts_.connect_timeout.count()) + " ms: " + last);
  }

  // Marks the connection unusable (closing it) and returns the error.
  error_info broken(errc code, std::string msg) {
    error_code ignored;
    sock_.close(ignored);
    if (broken_.empty()) broken_ = msg;
    return fail(code, std::move(msg));
  }

  // One request and its reply; the caller holds mu_.
  result<reply> call(std::uint8_t op, std::string_view key, std::span<const std::byte> value,
                     std::chrono::milliseconds budget, const char* name) {
    namespace asio = boost::asio;
    namespace wire = detail::tcp_wire;
    const std::string what = std::string(name) + "('" + std::string(key) + "')";
    if (key.size() > opts_.max_key_bytes)
      return fail(errc::limit_exceeded, "tcp_store: " + std::string(name) + ": key of " + std::to_string(key.size()) +
                                            " bytes > max_key_bytes " + std::to_string(opts_.max_key_bytes));
    if (!broken_.empty())
      return fail(errc::io_error, "tcp_store: connection to " + where() + " failed earlier (" + broken_ + ")");
    const auto deadline = clock::now() + budget;

    std::array<std::byte, wire::request_head> head{};
    head[0] = static_cast<std::byte>(op);
    wire::put_u32(head.data() + 1, static_cast<std::uint32_t>(key.size()));
    std::array<std::byte, 8> value_len{};
    wire::put_u64(value_len.data(), value.size());
    const std::array<asio::const_buffer, 4> request{asio::buffer(head), asio::buffer(key.data(), key.size()),
                                                    asio::buffer(value_len), asio::buffer(value.data(), value.size())};
    bool timed_out = false;
    auto ec = run_until([&](auto handler) { asio::async_write(sock_, request, std::move(handler)); }, deadline, timed_out);
    if (timed_out)
      return broken(errc::timeout, "tcp_store: sending " + what + " to " + where() + " took over " +
                                       std::to_string(budget.count()) + " ms");
    if (ec) return broken(errc::io_error, "tcp_store: sending " + what + " to " + where() + " failed: " + ec.message());

    std::array<std::byte, wire::reply_head> rhead{};
    ec = run_until([&](auto handler) { asio::async_read(sock_, asio::buffer(rhead), std::move(handler)); }, deadline, timed_out);
    if (!timed_out && !ec) {
      reply r;
      r.status = std::to_integer<std::uint8_t>(rhead[0]);
      const std::uint64_t len = wire::get_u64(rhead.data() + 1);
      if (r.status != wire::status_ok && r.status != wire::status_timeout)
        return broken(errc::corrupt_data, "tcp_store: reply to " + what + " from " + where() + " has unknown status " +
                                              std::to_string(r.status));
      if (len > opts_.max_value_bytes)
        return broken(errc::limit_exceeded, "tcp_store: reply to " + what + " from " + where() + ": value of " +
                                                std::to_string(len) + " bytes > max_value_bytes " +
                                                std::to_string(opts_.max_value_bytes));
      r.value.resize(static_cast<std::size_t>(len));
      if (len == 0) return r;
      ec = run_until([&](auto handler) { asio::async_read(sock_, asio::buffer(r.value), std::move(handler)); }, deadline,
                     timed_out);
      if (!timed_out && !ec) return r;
    }
    if (timed_out)
      return broken(errc::timeout, "tcp_store: no reply to " + what + " from " + where() + " within " +
                                       std::to_string(budget.count()) + " ms");
    if (ec == asio::error::eof)
      return broken(errc::io_error, "tcp_store: " + where() + " closed the connection before replying to " + what);
    return broken(errc::io_error, "tcp_store: reading the reply to " + what + " from " + where() + " failed: " + ec.message());
  }

  std::string host_;
  std::uint16_t port_ = 0;
  tcp_store_options opts_;
  std::unique_ptr<detail::tcp_store_server> server_;  // listening side only; outlives the connection below
  std::mutex mu_;
  boost::asio::io_context ioc_{1};
  boost::asio::ip::tcp::socket sock_{ioc_};
  std::string broken_;  // why the connection is unusable; empty while it works
};

}  // namespace jitembed::parallel
