// TCP rendezvous store (like PyTorch's TCPStore behind torchrun): one process hosts a tcp_store_server,
// every rank opens a tcp_store to it; get() waits on the server side, so clients never poll.
#pragma once

#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/detail/capture.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/parallel/detail/tcp_store_connection.hpp"
#include "jitembed/parallel/store.hpp"
#include "jitembed/parallel/tcp_store_options.hpp"
#include "jitembed/parallel/tcp_store_server.hpp"

namespace jitembed::parallel {

// A store served over TCP: one connection to a tcp_store_server. Every call is thread-safe (calls take turns
// on the connection). After an I/O failure or a corrupt reply the connection is closed and every later call
// fails with io_error.
//   set: limit_exceeded (key over max_key_bytes, value over max_value_bytes), io_error, timeout (no reply
//        within io_timeout)
//   get: timeout (key not set within `timeout`), plus the above; corrupt_data / limit_exceeded for a bad reply
// Movable (a moved-from store may only be destroyed or assigned to); to share one connection between owners
// on purpose, move it into the owner that shares it (e.g. a communicator's store).
class tcp_store final : public store {
 public:
  using store::set;

  // Connects to "host:port" ("[v6]:port" for an IPv6 literal), retrying until opts.connect_timeout (the
  // server may start later) -> timeout. invalid_argument for an address without a port or for timeouts
  // that are not > 0.
  static result<tcp_store> open(std::string_view address, tcp_store_options opts = {}) {
    JITEMBED_ASSIGN_OR_RETURN(auto hp, split_address(address));
    JITEMBED_TRY(detail::tcp_store_connection::check_options(opts));
    return jitembed::core_detail::capture("tcp_store", [&]() -> result<tcp_store> {
      auto c = std::make_unique<detail::tcp_store_connection>(std::move(hp.first), hp.second, opts);
      JITEMBED_TRY(c->open());
      return tcp_store(std::move(c));
    });
  }

  tcp_store(tcp_store&&) noexcept = default;
  tcp_store& operator=(tcp_store&&) noexcept = default;
  ~tcp_store() override = default;  // closes the connection

  result<void> set(std::string_view key, std::span<const std::byte> value) override { return c_->set(key, value); }
  result<std::vector<std::byte>> get(std::string_view key, std::chrono::milliseconds timeout) override {
    return c_->get(key, timeout);
  }
  result<bool> check(std::string_view key) override { return c_->check(key); }

  // The server's port and host as given to open().
  std::uint16_t port() const noexcept { return c_->port(); }
  const std::string& host() const noexcept { return c_->host(); }
  const tcp_store_options& options() const noexcept { return c_->options(); }

 private:
  explicit tcp_store(std::unique_ptr<detail::tcp_store_connection> c) noexcept : c_(std::move(c)) {}

  static result<std::pair<std::string, std::uint16_t>> split_address(std::string_view a) {
    const auto colon = a.rfind(':');
    auto bad = [&] {
      return fail(errc::invalid_argument, "tcp_store: address '" + std::string(a) + "' is not host:port");
    };
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == a.size()) return bad();
    std::string_view host = a.substr(0, colon), port = a.substr(colon + 1);
    if (host.front() == '[') {
      if (host.size() < 3 || host.back() != ']') return bad();
      host = host.substr(1, host.size() - 2);
    } else if (host.find(':') != std::string_view::npos) {
      return bad();  // an IPv6 literal needs brackets
    }
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc{} || end != port.data() + port.size() || value == 0 || value > 65535) return bad();
    return std::pair{std::string(host), static_cast<std::uint16_t>(value)};
  }

  std::unique_ptr<detail::tcp_store_connection> c_;
};

}  // namespace jitembed::parallel
