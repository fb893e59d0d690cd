// client_state's attempts of a remote call: launching, building the KServe request, connection reuse,
// writing and reading over Beast, transport errors, endpoint health and decoding the response.
// Included at the end of jitembed/client/detail/client_state.hpp (users include that header).
#pragma once

#include "jitembed/client/detail/client_state.hpp"

namespace jitembed::client::detail {

inline void client_state::launch(const call_ptr& c, bool hedge, deferred& d) {
  if (c->done || closed_) return;
  const auto now = clock::now();
  if (now >= c->deadline) return finish(c, deadline_error(*c), d);
  auto ep = choose(*c);
  if (!ep) {
    c->last_error = fail(errc::unavailable, "no ready endpoint for model '" + c->model + "'");
    if (hedge) return;
    // Endpoints may come back (list change, re-admission, circuit half-open): wait for a change or a backoff.
    return schedule_retry(c, c->last_error, d, /*counts_attempt=*/false);
  }
  auto a = std::make_shared<remote_attempt>();
  a->call = c;
  a->ep = ep;
  a->hedge = hedge;
  a->start = now;
  if (ep->half_open(now)) {
    a->probe = true;
    ep->probe_in_flight = true;
  }
  c->tried.insert(ep.get());
  c->active.push_back(a);
  ++c->attempts;
  ++ep->outstanding;
  ++ep->requests;
  ++stats_.attempts;
  plan_shm(*c, *a);
  auto built = build_request(*c, *a);
  if (!built) {
    if (a->shm) a->shm->answered = true;  // never sent
    end_attempt(a);
    return finish(c, built.error(), d);
  }
  send(a, d);
  if (!hedge) arm_hedge(c);
}

inline auto client_state::build_request(remote_call& c, remote_attempt& a) -> result<void> {
  if (is_grpc(a.ep->addr)) return {};  // grpc_send builds its ModelInferRequest
  kserve::infer_request r;
  r.model = c.model;
  r.version = c.version;
  const auto remaining = std::chrono::duration_cast<std::chrono::microseconds>(c.deadline - clock::now()).count();
  r.parameters = kserve::json::object();
  r.parameters["binary_data_output"] = opts_.binary_outputs;
  r.parameters["timeout"] = std::max<std::int64_t>(1, remaining);
  const auto shm_parameters = [&](std::size_t offset, std::size_t bytes) {
    return kserve::json{{"shared_memory_region", a.shm->arena->region},
                        {"shared_memory_byte_size", bytes},
                        {"shared_memory_offset", offset}};
  };
  if (a.shm) {  // rows and outputs in the endpoint's shared memory: the message carries neither
    r.inputs.push_back(kserve::infer_tensor::view(c.input, kserve::datatype::bytes,
                                                  {static_cast<std::int64_t>(c.n_rows), 1}, bytes_view{}, true));
    r.inputs.back().parameters = shm_parameters(a.shm->offset, a.shm->input_bytes);
    for (const auto& [name, span] : a.shm->outputs)
      r.outputs.push_back({name, std::nullopt, shm_parameters(span.first, span.second)});
  } else {
    if (offers_compression(*a.ep)) r.parameters[std::string(kserve::kCompressionParameter)] = kserve::kZstdShuffle;
    const auto* packed = packed_rows(c);
    r.inputs.push_back(kserve::infer_tensor::view(
        c.input, kserve::datatype::bytes, {static_cast<std::int64_t>(c.n_rows), 1},
        packed ? bytes_view(packed->data(), packed->size()) : bytes_view(c.rows->data(), c.rows->size()), true));
    if (packed) kserve::mark_compressed(r.inputs.back(), c.rows->size());
    for (const auto& o : c.outputs) r.outputs.push_back({o, opts_.binary_outputs, {}});
  }
  auto msg = kserve::encode_request(r);
  if (!msg) return msg.error();
  a.msg = std::move(*msg);
  std::string& h = a.head;
  h.reserve(256);
  h += "POST /v2/models/";
  h += c.model;
  if (!c.version.empty()) h += "/versions/" + c.version;
  h += "/infer HTTP/1.1\r\nHost: ";
  h += a.ep->addr.host + ":" + std::to_string(a.ep->addr.port);
  h += "\r\nContent-Type: application/octet-stream\r\n";
  if (a.msg.header_length) h += "Inference-Header-Content-Length: " + std::to_string(*a.msg.header_length) + "\r\n";
  if (!opts_.auth_token.empty()) h += "Authorization: Bearer " + opts_.auth_token + "\r\n";
  h += "Content-Length: " + std::to_string(a.msg.body_size()) + "\r\n\r\n";
  a.bufs.clear();
  a.bufs.emplace_back(a.head.data(), a.head.size());
  a.bufs.emplace_back(a.msg.header.data(), a.msg.header.size());
  for (auto b : a.msg.binary) a.bufs.emplace_back(b.data(), b.size());
  return {};
}

inline void client_state::send(const attempt_ptr& a, deferred& d) {
  auto& ep = *a->ep;
  if (is_grpc(ep.addr)) return grpc_send(a, d);
  if (!ep.idle.empty() && !a->fresh_retry) {
    a->conn = std::move(ep.idle.back());
    ep.idle.pop_back();
    a->reused = true;
    return write(a);
  }
  if (ep.open_conns >= opts_.max_connections_per_endpoint) {
    // Every connection of this endpoint is busy: wait for one (resume_waiting) unless the deadline passes.
    if (a->shm) a->shm->answered = true;  // never sent
    end_attempt(a);
    --a->call->attempts;
    waiting_.push_back(a->call);
    return;
  }
  (void)d;
  a->reused = false;
  a->conn = std::make_shared<http_conn>(ioc_, ep.addr.tls ? &*tls_ctx_ : nullptr);
  ++ep.open_conns;
  ++ep.conns_opened;
  client_state* const self = this;  // close() joins the I/O threads before the state goes
  // The connect timeout covers the TLS handshake too.
  a->conn->lowest().expires_at(std::min(a->call->deadline, clock::now() + opts_.connect_timeout));
  // Every handler holds the connection: Beast's operations use the stream and buffer until they complete,
  // even when the attempt has dropped the connection (closing it only makes them complete early).
  a->conn->lowest().async_connect(ep.resolved,
                                  [self, a, conn = a->conn](boost::system::error_code ec, const tcp::endpoint&) {
                                    deferred dd;
                                    std::lock_guard lk(self->mu_);
                                    if (a->finished) return;
                                    if (ec) return self->on_transport_error(a, ec, "connect", dd);
                                    boost::system::error_code ignored;
                                    a->conn->lowest().socket().set_option(tcp::no_delay(true), ignored);
                                    if (a->conn->tls) return self->handshake(a, dd);
                                    self->write(a);
                                  });
}

inline void client_state::handshake(const attempt_ptr& a, deferred& d) {
  client_state* const self = this;  // close() joins the I/O threads before the state goes
  if (!net::http::detail::prepare_client_tls(a->conn->tls->native_handle(), a->ep->addr.host))
    return on_tls_failure(a, asio::error::invalid_argument, d);
  a->conn->tls->async_handshake(asio::ssl::stream_base::client,
                                [self, a, conn = a->conn](boost::system::error_code ec) {
                                  deferred dd;
                                  std::lock_guard lk(self->mu_);
                                  if (a->finished) return;
                                  if (ec && net::http::detail::is_tls_protocol_error(ec))
                                    return self->on_tls_failure(a, ec, dd);
                                  if (ec) return self->on_transport_error(a, ec, "TLS handshake", dd);
                                  self->write(a);
                                });
}

inline void client_state::write(const attempt_ptr& a) {
  client_state* const self = this;  // close() joins the I/O threads before the state goes
  a->conn->lowest().expires_at(a->call->deadline);
  ++a->conn->uses;
  a->conn->visit([&](auto& stream) {
    asio::async_write(stream, a->bufs, [self, a, conn = a->conn](boost::system::error_code ec, std::size_t) {
      deferred d;
      std::lock_guard lk(self->mu_);
      if (a->finished) return;
      if (ec) return self->on_transport_error(a, ec, "send", d);
      self->read(a);
    });
  });
}

inline constexpr std::size_t kReadBufferBytes = std::size_t{64} << 10;  // per connection

inline void client_state::read(const attempt_ptr& a) {
  client_state* const self = this;  // close() joins the I/O threads before the state goes
  a->conn->parser.emplace();
  // Beast reads at most the buffer's free capacity (at least 512 bytes) per read: without this a 16 MiB
  // answer took ~32,000 reads and the HTTP transport ran at ~130 MB/s (bench_client_shm).
  if (a->conn->buffer.capacity() < kReadBufferBytes) a->conn->buffer.reserve(kReadBufferBytes);
  a->conn->parser->header_limit(1 << 20);
  a->conn->parser->body_limit(opts_.max_response_bytes);
  a->conn->visit([&](auto& stream) {
    bhttp::async_read(stream, a->conn->buffer, *a->conn->parser,
                      [self, a, conn = a->conn](boost::system::error_code ec, std::size_t) {
                        deferred d;
                        std::lock_guard lk(self->mu_);
                        if (a->finished) return;
                        if (ec) return self->on_transport_error(a, ec, "response", d);
                        self->on_response(a, d);
                      });
  });
}

inline void client_state::end_attempt(const attempt_ptr& a) {
  if (a->finished) return;
  a->finished = true;
  if (a->ep->outstanding) --a->ep->outstanding;
  if (a->probe) a->ep->probe_in_flight = false;
  end_shm(*a);
  auto& act = a->call->active;
  act.erase(std::remove(act.begin(), act.end(), a), act.end());
}

inline void client_state::close_conn(http_conn& c) {
  boost::system::error_code ec;
  c.lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
  c.lowest().socket().close(ec);
}

inline void client_state::drop_conn(const attempt_ptr& a) {
  if (!a->conn) return;
  close_conn(*a->conn);
  if (a->ep->open_conns) --a->ep->open_conns;
  a->conn.reset();
}

inline void client_state::release_conn(const attempt_ptr& a, bool keep_alive) {
  if (!a->conn) return;
  if (keep_alive && !a->ep->draining && !closed_) {
    a->conn->lowest().expires_never();
    a->conn->parser.reset();
    a->ep->idle.push_back(std::move(a->conn));
  } else {
    drop_conn(a);
  }
}

inline void client_state::on_transport_error(const attempt_ptr& a, boost::system::error_code ec, const char* stage,
                                             deferred& d) {
  const auto c = a->call;
  const bool stale =
      a->reused && !a->fresh_retry && a->conn && a->conn->uses > 1 &&
      (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
       ec == asio::error::broken_pipe || ec == asio::ssl::error::stream_truncated);
  drop_conn(a);
  if (stale && !c->done) {  // the server closed an idle keep-alive connection: same attempt, fresh connection
    a->fresh_retry = true;
    a->reused = false;
    return send(a, d);
  }
  end_attempt(a);
  if (c->done) return resume_waiting(d);
  const bool deadline = clock::now() >= c->deadline;
  a->ep->failures++;
  note_endpoint_failure(*a->ep);
  error_info e = ec == beast::error::timeout && deadline
                     ? deadline_error(*c)
                     : fail(errc::io_error, std::string(stage) + " on " + a->ep->addr.url + " failed: " + ec.message());
  if (ec == beast::error::timeout && !deadline)
    e = fail(errc::timeout, std::string(stage) + " on " + a->ep->addr.url + " timed out");
  schedule_retry(c, e, d, true);
  resume_waiting(d);
}

// The TLS handshake failed on TLS's own terms (a certificate that does not verify, a peer that does not
// speak TLS): a configuration error that no retry on this endpoint fixes. Its circuit opens at once, and the
// request goes to an endpoint it has not tried yet, or fails now with io_error (not after backoffs until the
// deadline, as an overloaded service would).
inline void client_state::on_tls_failure(const attempt_ptr& a, boost::system::error_code ec, deferred& d) {
  const auto c = a->call;
  const std::string reason =
      net::http::detail::tls_failure_reason(ec, a->conn ? a->conn->tls->native_handle() : nullptr);
  drop_conn(a);
  end_attempt(a);
  ++stats_.tls_failures;
  auto& ep = *a->ep;
  ep.failures++;
  ep.consecutive_failures = std::max(ep.consecutive_failures, opts_.breaker.failure_threshold - 1);
  note_endpoint_failure(ep);
  if (c->done) return resume_waiting(d);
  c->last_error = fail(errc::io_error, "TLS handshake with " + ep.addr.url + " failed: " + reason);
  const auto now = clock::now();
  const bool untried = std::any_of(endpoints_.begin(), endpoints_.end(),
                                   [&](const auto& e) { return !c->tried.count(e.get()) && eligible(*e, *c, now); });
  if (untried && c->attempts < opts_.retry.max_attempts && now < c->deadline) {
    ++stats_.retries;
    ++c->retries;
    if (c->active.empty()) launch(c, false, d);
  } else if (c->active.empty()) {
    finish(c, c->last_error, d);
  }
  resume_waiting(d);
}

inline void client_state::note_endpoint_failure(endpoint_state& e) {
  e.consecutive_failures++;
  if (e.consecutive_failures >= opts_.breaker.failure_threshold || e.half_open(clock::now())) {
    e.open_until = clock::now() + opts_.breaker.open_for;
    for (auto& conn : e.idle) close_conn(*conn);
    e.open_conns -= std::min(e.open_conns, e.idle.size());
    e.idle.clear();
  }
}

inline void client_state::note_endpoint_success(endpoint_state& e, double ms) {
  e.consecutive_failures = 0;
  e.open_until = clock::time_point{};
  e.successes++;
  e.ewma_ms = e.has_ewma ? (1 - opts_.ewma_alpha) * e.ewma_ms + opts_.ewma_alpha * ms : ms;
  e.has_ewma = true;
}

inline void client_state::on_response(const attempt_ptr& a, deferred& d) {
  const auto c = a->call;
  auto msg = a->conn->parser->release();
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
  release_conn(a, keep);
  if (status == 200)  // a call already finished (a hedge won) counts the latency only: nothing to decode
    return on_answer(a, 200,
                     c->done ? result<embed_result>(fail(errc::cancelled, "answered after the call finished"))
                             : decode(*c, *a, body, hlen),
                     d);
  on_answer(a, status, http_error(status, body, "model '" + c->model + "' on " + a->ep->addr.url), d);
}

// An attempt's answer, whatever the transport: `status` is HTTP's (a gRPC code mapped onto it), `r` the
// decoded result (status 200) or the answer's error.
inline void client_state::on_answer(const attempt_ptr& a, int status, result<embed_result> r, deferred& d) {
  const auto c = a->call;
  if (a->shm) a->shm->answered = true;  // the server writes nothing more into its span
  if (shm_fallback(a, status, r, d)) return;
  if (status == 200 && r && !c->done) learn_outputs(*c, *r);
  const double ms = std::chrono::duration<double, std::milli>(clock::now() - a->start).count();
  end_attempt(a);
  if (status == 200) {
    note_endpoint_success(*a->ep, ms);
    latencies_.add(ms);
    if (latencies_.total() % 64 == 0 || latencies_.total() == opts_.hedge.min_samples) {
      hedge_after_ms_ = latencies_.percentile(opts_.hedge.percentile);
    }
    if (c->done) return resume_waiting(d);
    if (r && a->hedge) ++stats_.hedge_wins;
    finish(c, std::move(r), d);
    return resume_waiting(d);
  }
  const error_info e = r ? fail(errc::internal, "an error answer without an error") : r.error();
  if (status >= 500 && status != 503 && status != 504) {
    a->ep->failures++;
    note_endpoint_failure(*a->ep);
  } else {
    a->ep->consecutive_failures = 0;  // it answered: alive
    if (a->probe) a->ep->open_until = clock::time_point{};
  }
  if (c->done) return resume_waiting(d);
  if (status == 404 || e.code == errc::not_found) {
    // This endpoint does not serve the model (now): eject it for this model, try elsewhere.
    a->ep->ejected[c->model] = clock::now() + opts_.breaker.eject_for;
    const auto now = clock::now();
    const bool other =
        std::any_of(endpoints_.begin(), endpoints_.end(), [&](const auto& ep) { return eligible(*ep, *c, now); });
    if (other && c->attempts < opts_.retry.max_attempts) {
      ++stats_.retries;
      if (c->active.empty()) launch(c, false, d);
    } else if (c->active.empty()) {
      finish(c, e, d);
    }
    return resume_waiting(d);
  }
  if (retryable_answer(status, e.code)) {
    a->ep->failures++;
    schedule_retry(c, e, d, true);
    return resume_waiting(d);
  }
  // The caller's input: never retried. A multi-row request is resent row by row.
  if (c->n_rows > 1 && status >= 400 && status < 500)
    split_rows(c, d);
  else if (c->active.empty())
    finish(c, e, d);
  resume_waiting(d);
}

// Whether requests to this endpoint offer compressed outputs (not to loopback unless asked).
inline bool client_state::offers_compression(const endpoint_state& ep) const {
  return opts_.offer_compression && (opts_.compress_on_loopback || !is_loopback(ep.addr));
}

// The call's rows compressed once (compress_inputs), or nullptr when they travel raw.
inline auto client_state::packed_rows(remote_call& c) -> const byte_buffer* {
  if (!opts_.compress_inputs) return nullptr;
  if (!c.packed_rows) {
    auto p = codec::compress_for_wire(bytes_view(c.rows->data(), c.rows->size()), 1, opts_.compression);
    c.packed_rows = p && *p ? std::make_shared<const byte_buffer>(std::move(**p)) : nullptr;
  }
  return c.packed_rows->get();
}

// An output of a response as a tensor of `n_rows` rows: a compressed one (net/kserve/compression.hpp)
// decompressed, bounded by max_bytes (the decompressed buffer becomes the tensor's storage); one the server
// wrote into the attempt's shared memory (`shm`) read from there. corrupt_data for an answer that does not
// match the request: another row count, a region or span the attempt did not name.
inline result<tensor> output_tensor(const kserve::infer_tensor& o, std::size_t n_rows, std::size_t max_bytes,
                                    const std::string& url, const shm_use* shm) {
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

inline auto client_state::decode(const remote_call& c, const remote_attempt& a, std::string_view body,
                                 std::optional<std::size_t> hlen) -> result<embed_result> {
  const auto& url = a.ep->addr.url;
  kserve::protocol_limits lim;
  lim.max_body_bytes = std::max<std::size_t>(lim.max_body_bytes, body.size());
  auto resp = kserve::decode_response(body, hlen, lim);
  if (!resp) return fail(resp.code(), "response of " + url + ": " + resp.error().message);
  embed_result r;
  r.model_name = std::move(resp->model_name);
  r.model_version = std::move(resp->model_version);
  r.endpoint = url;
  r.attempts = c.attempts;
  for (auto& o : resp->outputs) {
    JITEMBED_ASSIGN_OR_RETURN(auto t,
                              output_tensor(o, c.n_rows, opts_.max_response_bytes, url, a.shm ? &*a.shm : nullptr));
    r.outputs.emplace_back(o.name, std::move(t));
  }
  return r;
}

#if !defined(JITEMBED_HAS_GRPC)
// Without jitembed::grpc (client_grpc.hpp) a grpc:// endpoint answers every attempt not_found.

inline void client_state::grpc_send(const attempt_ptr& a, deferred& d) {
  on_answer(a, 404,
            fail(errc::not_found, a->ep->addr.url + ": this client was built without gRPC (link jitembed::grpc)"), d);
}
inline void client_state::grpc_cancel(remote_attempt&) {}
inline shm_call_result grpc_shm_call(const endpoint_address& a, const std::string&, const std::string&, std::size_t,
                                     const client_options&) {
  return {false, true, a.url + ": this client was built without gRPC (link jitembed::grpc)"};
}
inline result<std::optional<model_identity>> grpc_fetch_identity(const endpoint_address& a, const std::string&,
                                                                 const client_options&) {
  return fail(errc::not_found, a.url + ": this client was built without gRPC (link jitembed::grpc)");
}
inline result<model_metadata> grpc_fetch_metadata(const endpoint_address& a, const std::string&,
                                                  const client_options&) {
  return fail(errc::not_found, a.url + ": this client was built without gRPC (link jitembed::grpc)");
}
inline bool grpc_model_ready(const endpoint_address&, const std::string&, const client_options&) { return false; }

#endif

}  // namespace jitembed::client::detail
