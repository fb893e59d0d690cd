// One tcp_store client connection: synchronous requests with deadlines on a private io_context, one at a
// time (calls from several threads take turns on the mutex).
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
#include "jitembed/parallel/detail/tcp_store_wire.hpp"
#include "jitembed/parallel/tcp_store_options.hpp"

namespace jitembed::parallel::detail {

class tcp_store_connection {
 public:
  tcp_store_connection(std::string host, std::uint16_t port, tcp_store_options opts)
      : host_(std::move(host)), port_(port), opts_(opts) {}
  tcp_store_connection(const tcp_store_connection&) = delete;
  tcp_store_connection& operator=(const tcp_store_connection&) = delete;
  ~tcp_store_connection() {
    std::lock_guard lock(mu_);
    boost::system::error_code ignored;
    sock_.close(ignored);
  }

  static result<void> check_options(const tcp_store_options& o) { return check_options_impl(o); }

  // Connects, retrying until opts.connect_timeout (the server may start later) -> timeout.
  result<void> open() { return connect(); }

  result<void> set(std::string_view key, std::span<const std::byte> value) {
    if (value.size() > opts_.max_value_bytes)
      return fail(errc::limit_exceeded, "tcp_store: set('" + std::string(key) + "'): value of " +
                                            std::to_string(value.size()) + " bytes > max_value_bytes " +
                                            std::to_string(opts_.max_value_bytes));
    std::lock_guard lock(mu_);
    JITEMBED_ASSIGN_OR_RETURN(auto r, call(tcp_wire::op_set, key, value, opts_.io_timeout, "set"));
    if (r.status != tcp_wire::status_ok || !r.value.empty())
      return broken(errc::corrupt_data, "tcp_store: unexpected reply to set('" + std::string(key) + "') from " + where());
    return {};
  }

  result<std::vector<std::byte>> get(std::string_view key, std::chrono::milliseconds timeout) {
    timeout = std::clamp(timeout, std::chrono::milliseconds(0), tcp_wire::max_wait);
    std::array<std::byte, 8> wait{};
    tcp_wire::put_u64(wait.data(), static_cast<std::uint64_t>(timeout.count()));
    std::lock_guard lock(mu_);
    JITEMBED_ASSIGN_OR_RETURN(auto r, call(tcp_wire::op_get, key, wait, timeout + opts_.io_timeout, "get"));
    if (r.status == tcp_wire::status_timeout) {
      if (!r.value.empty())
        return broken(errc::corrupt_data, "tcp_store: timeout reply to get('" + std::string(key) + "') from " + where() + " carries a value");
      return fail(errc::timeout, "store: key '" + std::string(key) + "' not set within " + std::to_string(timeout.count()) +
                                     " ms (tcp_store " + where() + ")");
    }
    return std::move(r.value);
  }

  result<bool> check(std::string_view key) {
    std::lock_guard lock(mu_);
    JITEMBED_ASSIGN_OR_RETURN(auto r, call(tcp_wire::op_check, key, {}, opts_.io_timeout, "check"));
    if (r.status != tcp_wire::status_ok || r.value.size() != 1 || std::to_integer<std::uint8_t>(r.value[0]) > 1)
      return broken(errc::corrupt_data, "tcp_store: malformed reply to check('" + std::string(key) + "') from " + where());
    return r.value[0] == std::byte{1};
  }

  std::uint16_t port() const noexcept { return port_; }
  const std::string& host() const noexcept { return host_; }
  const tcp_store_options& options() const noexcept { return opts_; }

 private:
  using error_code = boost::system::error_code;
  using clock = std::chrono::steady_clock;

  struct reply {
    std::uint8_t status = 0;
    std::vector<std::byte> value;
  };

  static result<void> check_options_impl(const tcp_store_options& o) {
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

  result<void> connect() {
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
    namespace wire = tcp_wire;
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
  std::mutex mu_;
  boost::asio::io_context ioc_{1};
  boost::asio::ip::tcp::socket sock_{ioc_};
  std::string broken_;  // why the connection is unusable; empty while it works
};


}  // namespace jitembed::parallel::detail
