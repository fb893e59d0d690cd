// The client's transports, one per scheme (HTTP, gRPC, local): how an attempt reaches an endpoint and how its
// end is reported back. Balancing, retries, hedging and exactly-once are the call engine's, transport-blind.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "jitembed/client/detail/call_table.hpp"
#include "jitembed/client/detail/client_policy.hpp"
#include "jitembed/client/detail/client_shm.hpp"
#include "jitembed/client/endpoints.hpp"
#include "jitembed/client/options.hpp"
#include "jitembed/client/request.hpp"
#include "jitembed/codec/zstd_wire.hpp"
#include "jitembed/net/kserve/compression.hpp"
#include "jitembed/net/kserve/decode.hpp"
#include "jitembed/net/kserve/shared_memory.hpp"

namespace jitembed::client::detail {

// What a transport reports to the call engine. Each call is made with the engine's lock held (mutex());
// `d` collects the user callbacks that run once it is released. A transport may report from within send().
class attempt_events {
 public:
  virtual std::mutex& mutex() = 0;
  virtual bool closed() const = 0;
  // An answer, judged by the transport.
  virtual void on_answer(const attempt_ptr& a, attempt_outcome o, deferred& d) = 0;
  // No answer: connecting, sending or receiving failed; `timed_out` when the transport's own timer fired.
  virtual void on_no_answer(const attempt_ptr& a, std::string what, bool timed_out, deferred& d) = 0;
  // The TLS handshake failed on TLS's own terms (a certificate that does not verify, a peer that does not
  // speak TLS): a configuration error that no retry on this endpoint fixes.
  virtual void on_tls_failure(const attempt_ptr& a, std::string reason, deferred& d) = 0;
  // The request could not be made (it is not the endpoint's fault, nor fixed by a retry).
  virtual void on_unsendable(const attempt_ptr& a, error_info e, deferred& d) = 0;
  // Every connection of the endpoint is busy: the attempt ends unsent and its call waits for one.
  virtual void on_busy(const attempt_ptr& a, deferred& d) = 0;

  // A transport's completion handler enters here: fn(d) runs with the lock held unless the attempt finished
  // already (a hedge lost, a cancel); the user callbacks it collects in `d` run after the lock is released.
  template <class F>
  void complete(const attempt_ptr& a, F&& fn) {
    deferred d;
    std::lock_guard lk(mutex());
    if (!a->finished) fn(d);
  }

 protected:
  ~attempt_events() = default;
};

class transport {
 public:
  virtual ~transport() = default;
  // Starts the attempt (its call, endpoint and shared-memory span are set); its end comes through
  // attempt_events. Called with the engine's lock held.
  virtual void send(const attempt_ptr& a, deferred& d) = 0;
  // The call finished without this attempt's answer (a hedge lost, a cancel, close()): stop it; a
  // connection in the middle of an answer is not reused. Lock held.
  virtual void abandon(remote_attempt& a) = 0;
  // The endpoint drains, or its circuit opened: its idle connections close. Lock held.
  virtual void close_idle(endpoint_state&) {}
  // The endpoint left the set. Lock held.
  virtual void forget(const endpoint_state&) {}
  // Blocking calls, made without the lock: model identity and metadata, a readiness probe, registering
  // (`key` set) or unregistering a shared-memory region.
  virtual result<std::optional<model_identity>> identity(const endpoint_address& a, const std::string& model) = 0;
  virtual result<model_metadata> metadata(const endpoint_address& a, const std::string& model) = 0;
  virtual bool ready(const endpoint_address& a, const std::string& model) = 0;
  virtual shm_call_result shared_memory(const endpoint_address& a, const std::string& region, const std::string& key,
                                        std::size_t bytes) = 0;
  // Whether its endpoints need a resolved address (a socket).
  virtual bool needs_address() const { return true; }
  // close(), after every call finished: returns once no completion of this transport can run any more.
  virtual void close() {}
};

// The client's transports, one per scheme (local mode: the local one only); each endpoint uses its scheme's.
struct transport_set {
  std::unique_ptr<transport> local, http, grpc;
  transport& operator()(const endpoint_address& a) const {
    if (local) return *local;
    return is_grpc(a) ? *grpc : *http;
  }
  void close() {  // their completions post to the executor, which still runs
    for (auto* t : {local.get(), grpc.get(), http.get()})
      if (t) t->close();
  }
};

// The addresses of an endpoint's host (a literal address as is, a name through the resolver; none when it
// does not resolve). Blocking: the control plane calls it without a lock.
inline std::vector<boost::asio::ip::tcp::endpoint> resolve(const endpoint_address& a) {
  namespace asio = boost::asio;
  std::vector<asio::ip::tcp::endpoint> out;
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(a.host, ec);
  if (!ec) {
    out.emplace_back(ip, a.port);
    return out;
  }
  asio::io_context ioc;
  asio::ip::tcp::resolver res(ioc);
  auto rs = res.resolve(a.host, std::to_string(a.port), ec);
  if (!ec)
    for (const auto& r : rs) out.push_back(r.endpoint());
  return out;
}

// Whether requests to this endpoint offer compressed outputs (not to loopback unless asked).
inline bool offers_compression(const client_options& o, const endpoint_address& a) {
  return o.offer_compression && (o.compress_on_loopback || !is_loopback(a));
}

// The call's rows compressed once (compress_inputs) when it pays, or nullptr when they travel raw. Typed rows
// are byte-shuffled by their element size, as the server unshuffles them.
inline const byte_buffer* packed_rows(const client_options& o, remote_call& c) {
  if (!o.compress_inputs) return nullptr;
  if (!c.packed_rows) {
    const std::size_t es = c.typed() ? net::kserve::element_size(c.type) : 1;
    auto p = codec::compress_for_wire(bytes_view(c.rows->data(), c.rows->size()), es, o.compression);
    c.packed_rows = p && *p ? std::make_shared<const byte_buffer>(std::move(**p)) : nullptr;
  }
  return c.packed_rows->get();
}

// An output of a response as a tensor of `n_rows` rows: decompressed (bounded by max_bytes), or read from the
// attempt's shared memory (`shm`). corrupt_data for another row count, or a region or span it did not name.
inline result<tensor> output_tensor(const net::kserve::infer_tensor& o, std::size_t n_rows, std::size_t max_bytes,
                                    const std::string& url, const shm_use* shm) {
  namespace kserve = net::kserve;
  const std::string w = "response of " + url + ": output '" + o.name + "'";
  const auto check_rows = [&](tensor t) -> result<tensor> {
    if (t.rank() == 0 || t.shape()[0] != static_cast<std::int64_t>(n_rows))
      return fail(errc::corrupt_data, w + " has " + (t.rank() ? std::to_string(t.shape()[0]) : std::string("no")) +
                                          " rows, sent " + std::to_string(n_rows));
    return t;
  };
  const auto view_of = [&](bytes_view data) -> result<tensor_view> {
    kserve::infer_tensor plain;
    plain.name = o.name;
    plain.type = o.type;
    plain.shape = o.shape;
    plain.data = data;
    auto v = plain.as_tensor_view();
    if (!v) return fail(v.code(), "response of " + url + ": " + v.error().message);
    return v;
  };
  // In the attempt's shared memory: named by its parameters (gRPC), or an output without data (HTTP answers
  // name, datatype and shape only) that the attempt asked to have there.
  JITEMBED_ASSIGN_OR_RETURN(const auto ref, kserve::shared_memory_parameters(o.parameters, w));
  const auto* span = shm ? shm->output(o.name) : nullptr;
  if (ref || (span && o.data.empty())) {
    if (ref && (!span || ref->region != shm->arena->region || ref->offset != span->first))
      return fail(errc::corrupt_data, w + ": in shared memory region '" + ref->region + "' at " +
                                          std::to_string(ref->offset) + ", not where the request asked");
    const auto dt = kserve::to_dtype(o.type);
    if (!dt) return fail(errc::corrupt_data, w + ": " + std::string(kserve::to_string(o.type)) + " has no dtype");
    auto nb = checked_nbytes(o.shape, *dt);
    if (!nb) return fail(errc::corrupt_data, w + ": " + nb.error().message);
    if ((ref && *nb != ref->byte_size) || *nb > span->second)
      return fail(errc::corrupt_data, w + ": shape " + kserve::detail::shape_string(o.shape) + " (" +
                                          std::to_string(*nb) + " bytes) does not match its shared memory span of " +
                                          std::to_string(span->second) + " bytes");
    auto t = tensor::empty(jitembed::shape(std::span<const std::int64_t>(o.shape)), *dt);
    JITEMBED_TRY(shm->arena->object->read(span->first, std::span<std::byte>(static_cast<std::byte*>(t.data()), *nb)));
    return check_rows(std::move(t));
  }
  JITEMBED_ASSIGN_OR_RETURN(const auto raw_size, kserve::compressed_tensor(o.parameters, w));
  if (raw_size) {
    auto r = codec::decompress_from_wire(o.data, *raw_size, kserve::element_size(o.type), max_bytes);
    if (!r)
      return fail(r.code() == errc::limit_exceeded ? errc::limit_exceeded : errc::corrupt_data,
                  w + ": " + r.error().message);
    auto owner = std::make_shared<byte_buffer>(std::move(*r));
    JITEMBED_ASSIGN_OR_RETURN(const auto v, view_of(bytes_view(owner->data(), owner->size())));
    return check_rows(tensor::wrap(std::move(owner), v));
  }
  JITEMBED_ASSIGN_OR_RETURN(const auto v, view_of(o.data));
  return check_rows(tensor::copy_of(o.data, v.dtype(), v.shape()));
}

}  // namespace jitembed::client::detail
