// The client's remote backend: KServe v2 over HTTP/1.1 keep-alive connections, plain or TLS (Boost.Beast,
// asynchronous) to a changing set of endpoints. All state is guarded by one mutex; Asio handlers and embed() take it,
// and user callbacks run after it is released (a `deferred` list), so a callback may call embed() again.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jitembed/client/detail/client_policy.hpp"
#include "jitembed/client/detail/client_shm.hpp"
#include "jitembed/client/endpoints.hpp"
#include "jitembed/client/options.hpp"
#include "jitembed/client/request.hpp"
#include "jitembed/client/stats.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/net/http/detail/tls_client.hpp"
#include "jitembed/net/http/detail/wire.hpp"
#include "jitembed/net/kserve/decode.hpp"
#include "jitembed/net/kserve/encode.hpp"

namespace jitembed::client::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace kserve = jitembed::net::kserve;
using tcp = asio::ip::tcp;

// Functions to run after the state lock is released (user callbacks).
struct deferred {
  std::vector<std::function<void()>> fns;
  deferred() = default;
  deferred(const deferred&) = delete;
  ~deferred() {
    for (auto& f : fns) {
      try {
        f();
      } catch (...) {  // a throwing user callback is its bug; the client keeps going (docs/api.md rule 1.4)
      }
    }
  }
};

// One connection to an endpoint: plain (http://) or TLS (https://; tls_ctx set).
struct http_conn {
  http_conn(asio::io_context& ioc, asio::ssl::context* tls_ctx) {
    if (tls_ctx)
      tls.emplace(ioc, *tls_ctx);
    else
      plain.emplace(ioc);
  }
  std::optional<beast::tcp_stream> plain;  // exactly one of the two
  std::optional<net::http::detail::tls_client_stream> tls;
  beast::tcp_stream& lowest() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
  // f(stream) on whichever stream the connection has.
  template <class F>
  void visit(F&& f) {
    if (tls)
      f(*tls);
    else
      f(*plain);
  }
  beast::flat_buffer buffer;
  std::optional<bhttp::response_parser<bhttp::string_body>> parser;
  std::uint64_t uses = 0;
};

struct endpoint_state {
  endpoint_address addr;
  std::shared_ptr<void> grpc;  // grpc:// endpoints: the channel (client_grpc.hpp), made on first use
  std::vector<tcp::endpoint> resolved;
  std::vector<std::shared_ptr<http_conn>> idle;
  std::size_t open_conns = 0;
  std::uint64_t outstanding = 0, requests = 0, successes = 0, failures = 0, conns_opened = 0;
  double ewma_ms = 0;
  bool has_ewma = false;
  bool draining = false;
  int consecutive_failures = 0;
  clock::time_point open_until{};  // circuit open until; then half-open (one probe)
  bool probe_in_flight = false;
  std::map<std::string, clock::time_point> ejected;  // model -> re-probe time
  shm_status shm = shm_status::off;                   // client_options.shared_memory
  std::shared_ptr<shm_arena> arena;                   // shm == ready: the registered object
  clock::time_point shm_retry{};                      // pending: the next registration try

  bool circuit_open(clock::time_point now) const { return open_until > now; }
  bool half_open(clock::time_point now) const { return open_until != clock::time_point{} && open_until <= now; }
};

struct remote_call;

struct remote_attempt {
  std::shared_ptr<remote_call> call;
  std::shared_ptr<endpoint_state> ep;
  std::shared_ptr<http_conn> conn;
  bool hedge = false;
  bool reused = false;
  bool probe = false;  // the half-open probe of its endpoint
  bool finished = false;
  bool fresh_retry = false;  // already replaced a stale pooled connection once
  clock::time_point start;
  std::string head;
  kserve::encoded_message msg;
  std::vector<asio::const_buffer> bufs;
  std::shared_ptr<void> grpc_call;  // grpc:// endpoints: the call in flight (client_grpc.hpp)
  std::optional<shm_use> shm;       // its rows and outputs go through the endpoint's shared memory
};

struct remote_call {
  using attempt = remote_attempt;
  std::uint64_t id = 0;
  std::string model, version, input;
  std::vector<std::string> outputs;
  std::shared_ptr<byte_buffer> rows;  // BYTES elements (uint32-LE length + bytes), N of them
  std::optional<std::shared_ptr<const byte_buffer>>
      packed_rows;                                             // compress_inputs: the rows compressed once (null: raw)
  std::vector<std::pair<std::size_t, std::size_t>> row_spans;  // element payload offset and size
  std::size_t n_rows = 0;
  clock::time_point start, deadline;
  std::vector<embed_callback> callbacks;
  std::optional<hash128> coalesce_key;
  bool done = false;
  bool internal = false;  // a row of a split request (no id, no coalescing)
  bool no_shm = false;    // a shared-memory attempt was refused: the socket only
  int attempts = 0, retries = 0;
  bool hedged = false;
  std::vector<std::shared_ptr<attempt>> active;
  std::set<const endpoint_state*> tried;
  error_info last_error{errc::unavailable, "no attempt made"};
  std::unique_ptr<asio::steady_timer> retry_timer, hedge_timer;
  std::vector<std::shared_ptr<remote_call>> children;  // row split
};

}  // namespace jitembed::client::detail
