// The client's gRPC transport (grpc[s]:// endpoints): one channel per endpoint URL, for its attempts (each a
// unary ModelInfer on gRPC's callback API) and its control calls alike. The only code of the client that touches gRPC
// (JITEMBED_HAS_GRPC: client_state.hpp).
#pragma once

#include <google/protobuf/util/json_util.h>
#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <condition_variable>
#include <fstream>
#include <future>
#include <sstream>
#include <unordered_map>

#include "jitembed/client/detail/client_identity.hpp"
#include "jitembed/client/detail/executor.hpp"
#include "jitembed/client/detail/kserve_call.hpp"
#include "jitembed/client/detail/transport.hpp"
#include "jitembed/net/grpc/infer_codec.hpp"
#include "jitembed/net/grpc/kserve_schema.hpp"
#include "jitembed/net/grpc/status.hpp"

namespace jitembed::client::detail {

namespace grpc_client {

namespace pb = google::protobuf;

struct channel {
  std::shared_ptr<::grpc::Channel> ch;
  std::unique_ptr<::grpc::GenericStub> stub;
};

// One attempt's call: the context (cancelled when the attempt ends first) and the buffers.
struct call {
  ::grpc::ClientContext ctx;
  ::grpc::ByteBuffer request, response;
};

// The endpoint's channel: plaintext for grpc://; for grpcs:// TLS verifying the server's certificate
// against client_options.tls_ca_file (empty: gRPC's default roots). A CA file that cannot be read leaves
// the roots empty, so every call fails verification (UNAVAILABLE) rather than trusting anything. Reconnecting
// waits at most 1 s (gRPC's default grows to 120 s: a server back up would stay "not ready" for minutes).
inline std::shared_ptr<channel> make_channel(const endpoint_address& a, const client_options& opts) {
  auto c = std::make_shared<channel>();
  ::grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  std::shared_ptr<::grpc::ChannelCredentials> creds = ::grpc::InsecureChannelCredentials();
  if (a.tls) {
    ::grpc::SslCredentialsOptions ssl;
    if (!opts.tls_ca_file.empty()) {
      std::ifstream f(opts.tls_ca_file, std::ios::binary);
      std::ostringstream ss;
      ss << f.rdbuf();
      ssl.pem_root_certs = f ? ss.str() : std::string("-----INVALID-----");
    }
    creds = ::grpc::SslCredentials(ssl);
  }
  const bool v6 = a.host.find(':') != std::string::npos;
  c->ch = ::grpc::CreateCustomChannel((v6 ? "[" + a.host + "]" : a.host) + ":" + std::to_string(a.port), creds, args);
  c->stub = std::make_unique<::grpc::GenericStub>(c->ch);
  return c;
}

inline std::string method(std::string_view name) {
  return "/" + std::string(net::grpc::kServiceName) + "/" + std::string(name);
}

inline ::grpc::ByteBuffer serialize(const pb::Message& m) {
  const std::string bytes = m.SerializeAsString();
  ::grpc::Slice s(bytes.data(), bytes.size());
  return ::grpc::ByteBuffer(&s, 1);
}

inline bool parse(::grpc::ByteBuffer& b, pb::Message& m) {
  ::grpc::ProtoBufferReader reader(&b);
  return m.ParseFromZeroCopyStream(&reader);
}

// A new message of the KServe schema's `type` with its "name" field set.
inline std::unique_ptr<pb::Message> named(std::string_view type, const std::string& name) {
  auto m = net::grpc::kserve_schema::get().make(type);
  m->GetReflection()->SetString(m.get(), m->GetDescriptor()->FindFieldByName("name"), name);
  return m;
}

// The failed call's error: the server's errc (trailing metadata jitembed-errc) or the status code's.
inline error_info call_error(const ::grpc::Status& s, const ::grpc::ClientContext& ctx, std::string_view what) {
  std::optional<std::string_view> name;
  const auto& md = ctx.GetServerTrailingMetadata();
  if (auto it = md.find(std::string(net::grpc::kErrcMetadataKey)); it != md.end())
    name = std::string_view(it->second.data(), it->second.size());
  return fail(
      net::grpc::errc_of(s, name),
      std::string(what) + ": gRPC " + std::to_string(static_cast<int>(s.error_code())) + ": " + s.error_message());
}

// Whose fault a failed call was, by its errc: the service's trouble busy, a failure in the server the endpoint's,
// the rest (bad input, NOT_FOUND, CANCELLED) the request's.
inline attempt_fault fault_of(errc c) {
  if (c == errc::ok) return attempt_fault::none;
  if (service_trouble(c)) return attempt_fault::busy;
  const bool server = c == errc::buffer_too_small || c == errc::encode_failed || c == errc::io_error ||
                      c == errc::internal || c == errc::comm_failed;
  return server ? attempt_fault::endpoint : attempt_fault::request;
}

// A unary call made synchronous (metadata and config lookups, off the state lock).
inline ::grpc::Status unary(channel& ch, std::string_view name, const pb::Message& req, pb::Message& resp,
                            const client_options& opts, std::string_view what, error_info& err) {
  ::grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(std::min<std::int64_t>(opts.request_timeout.count(), 10000)));
  if (!opts.auth_token.empty()) ctx.AddMetadata("authorization", "Bearer " + opts.auth_token);
  ::grpc::ByteBuffer in = serialize(req), out;
  std::promise<::grpc::Status> done;
  ch.stub->UnaryCall(&ctx, method(name), ::grpc::StubOptions(), &in, &out,
                     [&done](::grpc::Status s) { done.set_value(std::move(s)); });
  auto s = done.get_future().get();
  if (!s.ok()) {
    err = call_error(s, ctx, what);
  } else if (!parse(out, resp)) {
    err = fail(errc::decode_failed, std::string(what) + ": not a valid reply");
    return ::grpc::Status(::grpc::StatusCode::INTERNAL, err.message);
  }
  return s;
}

// Model metadata / config of `model` (`rpc` ModelMetadata / ModelConfig) as the JSON Triton's HTTP API
// answers (the messages' JSON mapping), for the identity and metadata lookups shared with HTTP endpoints.
inline result<json> fetch_json(channel& ch, const endpoint_address& a, const std::string& rpc, const std::string& model,
                               const client_options& opts) {
  const std::string resp_type = rpc + "Response";
  auto req = named(rpc + "Request", model);
  auto resp = net::grpc::kserve_schema::get().make(resp_type);
  error_info err;
  const auto s = unary(ch, rpc, *req, *resp, opts, rpc + " of '" + model + "' from " + a.url, err);
  if (!s.ok()) return err;
  std::string text;
  pb::util::JsonPrintOptions po;
  po.preserve_proto_field_names = true;
  if (!pb::util::MessageToJsonString(*resp, &text, po).ok()) return fail(errc::internal, "printing " + resp_type);
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return fail(errc::internal, "printing " + resp_type);
  return j;
}

}  // namespace grpc_client

class grpc_transport final : public transport {
 public:
  grpc_transport(const client_options& opts, client_executor& exec, attempt_events& events)
      : opts_(opts), exec_(exec), events_(events) {}

  void send(const attempt_ptr& a, deferred&) override {
    auto ch = channel(a->ep->addr);
    auto call = std::make_shared<grpc_client::call>();
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::microseconds(remaining_us(*a->call)));
    call->request = net::grpc::encode_infer_request(attempt_request(*a, opts_, std::nullopt));
    if (!opts_.auth_token.empty()) call->ctx.AddMetadata("authorization", "Bearer " + opts_.auth_token);
    a->io = call;
    grpc_transport* const self = this;  // close() waits for every callback
    {
      std::lock_guard lk(mu_);
      ++in_flight_;
    }
    ch->stub->UnaryCall(&call->ctx, grpc_client::method("ModelInfer"), ::grpc::StubOptions(), &call->request,
                        &call->response, [self, a, call, ch](::grpc::Status s) {
                          // on a gRPC thread: the answer is judged on the client's executor, one event
                          self->exec_.post([self, a, call, s = std::move(s)] {
                            auto o = self->judge(*a, *call, s);  // decoded before the engine's lock
                            self->events_.complete(a, [&](deferred& d) {
                              if (o) return self->events_.on_answer(a, std::move(*o), d);
                              self->events_.on_no_answer(
                                  a, "gRPC call to " + a->ep->addr.url + " failed: " + s.error_message(), false, d);
                            });
                          });
                          std::lock_guard lk(self->mu_);
                          if (--self->in_flight_ == 0) self->idle_.notify_all();
                        });
  }

  void abandon(remote_attempt& a) override {
    if (a.io) std::static_pointer_cast<grpc_client::call>(a.io)->ctx.TryCancel();
  }

  void forget(const endpoint_state& e) override {
    std::lock_guard lk(mu_);
    channels_.erase(e.addr.url);
  }

  result<std::optional<model_identity>> identity(const endpoint_address& a, const std::string& model) override {
    JITEMBED_ASSIGN_OR_RETURN(auto cfg, grpc_client::fetch_json(*channel(a), a, "ModelConfig", model, opts_));
    const auto& config = cfg.contains("config") ? cfg["config"] : cfg;
    return identity_of(config, config, "input");
  }

  result<model_metadata> metadata(const endpoint_address& a, const std::string& model) override {
    JITEMBED_ASSIGN_OR_RETURN(auto j, grpc_client::fetch_json(*channel(a), a, "ModelMetadata", model, opts_));
    model_metadata md{j.value("name", model), j.value("platform", ""), {}, {}, {}};
    for (const auto& e : j.value("versions", json::array())) md.versions.push_back(e.get<std::string>());
    for (auto [key, dst] : {std::pair{"inputs", &md.inputs}, std::pair{"outputs", &md.outputs}})
      for (const auto& t : j.value(key, json::array())) {  // int64 dims print as JSON strings
        auto& st = dst->emplace_back(served_tensor{t.value("name", ""), t.value("datatype", ""), {}});
        for (const auto& dim : t.value("shape", json::array()))
          st.shape.push_back(dim.is_string() ? std::stoll(dim.get<std::string>()) : dim.get<std::int64_t>());
      }
    return md;
  }

  bool ready(const endpoint_address& a, const std::string& model) override {
    auto req = grpc_client::named("ModelReadyRequest", model);
    auto resp = net::grpc::kserve_schema::get().make("ModelReadyResponse");
    error_info err;
    if (!grpc_client::unary(*channel(a), "ModelReady", *req, *resp, opts_, "ModelReady", err).ok()) return false;
    return resp->GetReflection()->GetBool(*resp, resp->GetDescriptor()->FindFieldByName("ready"));
  }

  // SystemSharedMemoryRegister (`key` set) / SystemSharedMemoryUnregister.
  shm_call_result shared_memory(const endpoint_address& a, const std::string& region, const std::string& key,
                                std::size_t bytes) override {
    const bool reg = !key.empty();
    // Unregistering: its endpoint left the set (forget) or the client closes: a channel of its own, not kept.
    const auto ch = reg ? channel(a) : grpc_client::make_channel(a, opts_);
    auto req =
        grpc_client::named(reg ? "SystemSharedMemoryRegisterRequest" : "SystemSharedMemoryUnregisterRequest", region);
    const auto* d = req->GetDescriptor();
    const auto* rr = req->GetReflection();
    if (reg) {
      rr->SetString(req.get(), d->FindFieldByName("key"), key);
      rr->SetUInt64(req.get(), d->FindFieldByName("offset"), 0);
      rr->SetUInt64(req.get(), d->FindFieldByName("byte_size"), bytes);
    }
    auto resp = net::grpc::kserve_schema::get().make(reg ? "SystemSharedMemoryRegisterResponse"
                                                         : "SystemSharedMemoryUnregisterResponse");
    error_info err;
    const auto s = grpc_client::unary(*ch, reg ? "SystemSharedMemoryRegister" : "SystemSharedMemoryUnregister", *req,
                                      *resp, opts_, "shared memory region '" + region + "' on " + a.url, err);
    const auto c = s.error_code();  // not answered: unreachable, or no answer in time
    return {s.ok(), c != ::grpc::StatusCode::UNAVAILABLE && c != ::grpc::StatusCode::DEADLINE_EXCEEDED, err.message};
  }

  // Waits for the callbacks of the calls in flight (abandon() cancelled them).
  void close() override {
    std::unique_lock lk(mu_);
    idle_.wait(lk, [&] { return in_flight_ == 0; });
  }

 private:
  // The endpoint's channel, made on first use: by URL, so that the control calls (made without the engine's
  // lock) share it with the attempts; forget() drops it (calls in flight hold their own reference).
  std::shared_ptr<grpc_client::channel> channel(const endpoint_address& a) {
    std::lock_guard lk(mu_);
    auto& ch = channels_[a.url];
    if (!ch) ch = grpc_client::make_channel(a, opts_);
    return ch;
  }

  // The attempt's outcome, decoded on the executor without the engine's lock (the message's tensors are read
  // before it goes); none when no server answered (a connect failure, a reset: a transport error).
  std::optional<attempt_outcome> judge(const remote_attempt& a, grpc_client::call& call, const ::grpc::Status& s) {
    if (s.ok()) {
      auto m = net::grpc::kserve_schema::get().make("ModelInferResponse");
      auto r = grpc_client::parse(call.response, *m) ? net::grpc::decode_infer_response(*m)
                                                     : fail(errc::decode_failed, "not a ModelInferResponse");
      return attempt_outcome{attempt_fault::none, attempt_result(std::move(r), a, opts_.max_response_bytes)};
    }
    if (s.error_code() == ::grpc::StatusCode::UNAVAILABLE && call.ctx.GetServerTrailingMetadata().empty())
      return std::nullopt;
    auto e = grpc_client::call_error(s, call.ctx, "model '" + a.call->model + "' on " + a.ep->addr.url);
    return attempt_outcome{grpc_client::fault_of(e.code), std::move(e)};
  }

  const client_options& opts_;
  client_executor& exec_;
  attempt_events& events_;
  std::mutex mu_;                                                                    // channels_, in_flight_
  std::unordered_map<std::string, std::shared_ptr<grpc_client::channel>> channels_;  // by endpoint URL
  std::condition_variable idle_;                                                     // in_flight_ reached 0
  std::size_t in_flight_ = 0;                                                        // calls whose callback has not run
};

inline std::unique_ptr<transport> make_grpc_transport(const client_options& opts, client_executor& exec,
                                                      attempt_events& events) {
  return std::make_unique<grpc_transport>(opts, exec, events);
}

}  // namespace jitembed::client::detail
