// jit_client: asynchronous embeddings from a fleet of KServe v2 servers (jitembed-server or Triton), or from
// in-process models, behind one API; balancing, retries, hedging and the rest: docs/client.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/client/options.hpp"
#include "jitembed/client/request.hpp"
#include "jitembed/client/stats.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/config.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/hash.hpp"
#include "jitembed/core/tensor.hpp"

namespace jitembed::client {

namespace detail {
class client_state;
}

// A copyable handle: copies share one client (threads, connections, call table, stats). close() closes it
// for every copy; the last copy to go closes it (completing what is in flight with cancelled).
class jit_client {
 public:
  using request_id = std::uint64_t;

  // Starts the I/O threads and the endpoint watcher (remote), or the worker pool (local mode). Fails with
  // invalid_argument for inconsistent options (no source and no local model, two sources, a bad URL) and
  // with the source's error when a file or URL cannot be read at start; resource_exhausted when a thread
  // cannot start (those already started are stopped and joined first). The options are copied once, here (not
  // in the caller's TU: with JITEMBED_SEPARATE_COMPILATION a trainer does not compile their copy).
  static result<jit_client> create(const client_options& opts);

  jit_client(const jit_client&) = default;
  jit_client& operator=(const jit_client&) = default;
  jit_client(jit_client&&) noexcept = default;
  jit_client& operator=(jit_client&&) noexcept = default;
  ~jit_client() = default;  // the shared state closes when its last handle goes

  // Starts a request; `done` gets the result. Never blocks on the network. Returns an id for cancel().
  request_id embed(embed_request req, embed_callback done);
  // The same, as a future. A stop request on `stop` cancels the request as cancel() does (the future then
  // holds errc::cancelled unless it had already completed).
  std::future<result<embed_result>> embed(embed_request req, std::stop_token stop = {});
  // Completes the request with errc::cancelled now if it has not completed (in-flight attempts are
  // abandoned; a server drops the work when its deadline passes). False when it already completed.
  bool cancel(request_id id);

  // The cache-key identity of `model`: client_options.identities when given, else the metadata of the
  // first endpoint that serves it (cached), or the local model's version() / preprocess_key(). Blocks.
  result<model_identity> identity(const std::string& model);
  // The KServe metadata of `model` (names, datatypes and shapes of its inputs and outputs) from the first
  // endpoint that answers for it, or from the local model. not_found when an endpoint answers that it does
  // not serve the model; the last endpoint's error when none answers. Blocks; not cached.
  result<model_metadata> metadata(const std::string& model);

  // Waits until, for each of `models`, at least one endpoint answers ready (GET /v2/models/<m>/ready; the
  // model is served in local mode). Fails after `timeout` (plus at most one probe round) with `unavailable`
  // when no endpoint could be reached at all, `timeout` when one answered but never ready; the message names
  // the models, the endpoints and the last error. invalid_argument for no model or timeout <= 0. Blocks.
  result<void> wait_ready(const std::vector<std::string>& models, std::chrono::milliseconds timeout);
  client_stats stats() const;
  std::vector<std::string> endpoints() const;  // current (not draining) endpoint URLs
  bool local() const noexcept;

  // Stops accepting requests, cancels what is still in flight, joins the threads. Idempotent. Not from
  // inside an embed callback (it runs on a thread close() joins); the destructor calls it.
  void close();

 private:
  explicit jit_client(std::shared_ptr<detail::client_state> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::client_state> state_;
};

}  // namespace jitembed::client

#if defined(JITEMBED_HEADER_ONLY)
#include "jitembed/client/detail/jit_client_impl.hpp"
#endif
