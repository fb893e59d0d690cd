// The state behind a jit_client handle: it puts together the parts of client/detail/ (the call engine, the
// control plane, the transports, the executor; client/README.md), each with its own slice of client_options.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "jitembed/client/detail/call_engine.hpp"
#include "jitembed/client/detail/control_plane.hpp"
#include "jitembed/client/detail/executor.hpp"
#include "jitembed/client/detail/http_transport.hpp"
#include "jitembed/client/detail/local_transport.hpp"
#include "jitembed/client/detail/transport.hpp"
#include "jitembed/core/detail/capture.hpp"
#include "jitembed/net/http/detail/client_connection.hpp"

#if defined(JITEMBED_HAS_GRPC)  // the program links jitembed::grpc: grpc:// endpoints
#include "jitembed/client/detail/client_grpc.hpp"
#else
namespace jitembed::client::detail {
// Without jitembed::grpc a grpc:// endpoint answers every attempt not_found.
class no_grpc_transport final : public transport {
 public:
  explicit no_grpc_transport(attempt_events& events) : events_(events) {}
  void send(const attempt_ptr& a, deferred& d) override {
    events_.on_answer(a, {attempt_fault::request, fail(errc::not_found, why(a->ep->addr))}, d);
  }
  void abandon(remote_attempt&) override {}
  result<std::optional<model_identity>> identity(const endpoint_address& a, const std::string&) override {
    return fail(errc::not_found, why(a));
  }
  result<model_metadata> metadata(const endpoint_address& a, const std::string&) override {
    return fail(errc::not_found, why(a));
  }
  bool ready(const endpoint_address&, const std::string&) override { return false; }
  shm_call_result shared_memory(const endpoint_address& a, const std::string&, const std::string&,
                                std::size_t) override {
    return {false, true, why(a)};
  }

 private:
  static std::string why(const endpoint_address& a) {
    return a.url + ": this client was built without gRPC (link jitembed::grpc)";
  }
  attempt_events& events_;
};
inline std::unique_ptr<transport> make_grpc_transport(const client_options&, client_executor&, attempt_events& events) {
  return std::make_unique<no_grpc_transport>(events);
}
}  // namespace jitembed::client::detail
#endif

namespace jitembed::client::detail {

// The owning jit_client closes the state (joining every thread that runs handlers) before it is destroyed, so
// no handler outlives it and no handler can be the one that destroys it on its own thread.
class client_state final {
 public:
  // Every failure is in the result: a thread that cannot start (the local workers, the I/O threads or the
  // watcher) is resource_exhausted, after the threads already started are stopped and joined.
  static result<std::shared_ptr<client_state>> create(client_options opts) {
    return core_detail::capture("client", [&]() -> result<std::shared_ptr<client_state>> {
      const auto& src = opts.endpoints;
      const int sources = int(!src.list.empty()) + int(!src.file.empty()) + int(!src.url.empty());
      if (sources > 1)
        return fail(errc::invalid_argument, "client: give one endpoint source (list, file or url), not several");
      if (sources == 0 && opts.local_models.empty())
        return fail(errc::invalid_argument, "client: no endpoint source and no local model");
      if (sources == 1 && !opts.local_models.empty())
        return fail(errc::invalid_argument, "client: endpoints and local models are exclusive");
      for (const auto& m : opts.local_models)
        if (!m) return fail(errc::invalid_argument, "client: an empty local model");
      if (opts.request_timeout.count() <= 0 || opts.retry.max_attempts < 1 || opts.io_threads < 1)
        return fail(errc::invalid_argument,
                    "client: request_timeout, retry.max_attempts and io_threads must be positive");
      std::shared_ptr<client_state> s(new client_state(std::move(opts)));
      auto& via = s->transports_;
      std::vector<endpoint_address> first;
      if (!s->opts_.local_models.empty()) {
        via.local = std::make_unique<local_transport>(s->opts_, s->exec_, s->engine_);
        first.push_back(local_endpoint());
      } else {
        // https:// endpoints may join the list later: the verifying context is made now, so a bad CA file fails here.
        auto tls = net::http::detail::make_client_tls_context(s->opts_.tls_ca_file, "client");
        if (!tls) return tls.error();
        s->tls_ctx_.emplace(std::move(*tls));
        via.http = std::make_unique<http_transport>(s->opts_, s->exec_.context(), *s->tls_ctx_, s->engine_);
        via.grpc = make_grpc_transport(s->opts_, s->exec_, s->engine_);
        // The first list must be readable now: a typo in a path fails here, not as timeouts later.
        auto read = s->control_.read_source(3);
        if (!read) return read.error();
        first = std::move(*read);
      }
      s->control_.update_endpoints(first);
      s->exec_.start(static_cast<std::size_t>(s->opts_.io_threads));
      // A watcher that cannot start throws here; create()'s result says so and ~client_state (close()) stops
      // the I/O threads above.
      s->control_.start();
      return s;
    });
  }

  ~client_state() { close(); }

  bool local() const noexcept { return !opts_.local_models.empty(); }
  // The parts jit_client's calls go to: calls and stats to the engine, the rest to the control plane.
  call_engine& engine() noexcept { return engine_; }
  control_plane& control() noexcept { return control_; }

  // Every call still open fails with `cancelled` (its callbacks run here, on the closing thread); the
  // regions registered with endpoints are unregistered; the transports, the watcher and the I/O threads stop.
  void close() {
    if (!engine_.close()) return;
    control_.stop();
    control_.unregister_regions();
    transports_.close();
    exec_.stop();
  }

 private:
  explicit client_state(client_options opts)
      : opts_(std::move(opts)),
        engine_(engine_options::of(opts_), exec_),
        control_(control_options::of(opts_), engine_, transports_) {}

  const client_options opts_;                  // the transports' (each part keeps its own slice)
  std::optional<asio::ssl::context> tls_ctx_;  // before the executor: outlives every connection and handler
  client_executor exec_;
  transport_set transports_;  // after the executor, which runs their handlers; before what their handlers hold
  call_engine engine_;
  control_plane control_;  // last: its watcher uses the parts above
};

}  // namespace jitembed::client::detail
