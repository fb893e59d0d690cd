// The tcp_store server: an acceptor, one session per connection and the key-value map, all run by one
// I/O thread; tcp_store_server (parallel/tcp_store_server.hpp) owns one.
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
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/core/worker_group.hpp"
#include "jitembed/parallel/detail/tcp_store_wire.hpp"
#include "jitembed/parallel/tcp_store_options.hpp"

namespace jitembed::parallel::detail {

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
class tcp_store_host {
 public:
  explicit tcp_store_host(tcp_store_options opts) : st_(std::make_unique<tcp_store_state>(opts)) {}
  tcp_store_host(const tcp_store_host&) = delete;
  tcp_store_host& operator=(const tcp_store_host&) = delete;
  ~tcp_store_host() { stop(); }

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
    thread_ = worker_group(1, [&st](std::stop_token token, std::size_t) {
      // stop() posts an orderly stop; a bare stop request (the group's destructor) stops the loop at once.
      std::stop_callback wake(token, [&st] { st.ioc.stop(); });
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
    if (thread_.empty()) return;
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
    thread_.join();  // returns once the posted stop ran
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
  worker_group thread_;  // the one I/O thread
};

}  // namespace jitembed::parallel::detail
