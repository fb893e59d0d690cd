// The client's gRPC transport (grpc[s]:// endpoints): one channel per endpoint, each attempt a unary ModelInfer
// on gRPC's callback API. The only code of the client that touches gRPC (JITEMBED_HAS_GRPC: client_state.hpp).
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
// the roots empty, so every call fails verification (UNAVAILABLE) rather than trusting anything.
inline std::shared_ptr<channel> make_channel(const endpoint_address& a, const client_options& opts) {
  auto c = std::make_shared<channel>();
  ::grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
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

// Model metadata / config of `model` as the JSON Triton's HTTP API answers (the messages' JSON mapping),
// for the identity and metadata lookups shared with HTTP endpoints.
inline result<nlohmann::ordered_json> fetch_json(const endpoint_address& a, std::string_view rpc,
                                                 std::string_view req_type, std::string_view resp_type,
                                                 const std::string& model, const client_options& opts) {
  auto ch = make_channel(a, opts);
  auto req = named(req_type, model);
  auto resp = net::grpc::kserve_schema::get().make(resp_type);
  error_info err;
  const auto s = unary(*ch, rpc, *req, *resp, opts, std::string(rpc) + " of '" + model + "' from " + a.url, err);
  if (!s.ok()) return err;
  std::string json;
  pb::util::JsonPrintOptions po;
  po.preserve_proto_field_names = true;
  if (!pb::util::MessageToJsonString(*resp, &json, po).ok())
    return fail(errc::internal, "printing " + std::string(resp_type));
  auto j = nlohmann::ordered_json::parse(json, nullptr, false);
  if (j.is_discarded()) return fail(errc::internal, "printing " + std::string(resp_type));
  return j;
}

}  // namespace grpc_client

class grpc_transport final : public transport {
 public:
  grpc_transport(const client_options& opts, client_executor& exec, attempt_events& events)
      : opts_(opts), exec_(exec), events_(events) {}

  void send(const attempt_ptr& a, deferred&) override {
    auto& ep = *a->ep;
    auto& ch = channels_[&ep];
    if (!ch) ch = grpc_client::make_channel(ep.addr, opts_);
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
                            self->events_.complete(a, [&](deferred& d) { self->judge(a, *call, s, d); });
                          });
                          std::lock_guard lk(self->mu_);
                          if (--self->in_flight_ == 0) self->idle_.notify_all();
                        });
  }

  void abandon(remote_attempt& a) override {
    if (a.io) std::static_pointer_cast<grpc_client::call>(a.io)->ctx.TryCancel();
  }

  void forget(const endpoint_state& e) override { channels_.erase(&e); }

  result<std::optional<model_identity>> identity(const endpoint_address& a, const std::string& model) override {
    JITEMBED_ASSIGN_OR_RETURN(
        auto cfg, grpc_client::fetch_json(a, "ModelConfig", "ModelConfigRequest", "ModelConfigResponse", model, opts_));
    const auto& config = cfg.contains("config") ? cfg["config"] : cfg;
    return identity_of(config, config, "input");
  }

  result<model_metadata> metadata(const endpoint_address& a, const std::string& model) override {
    JITEMBED_ASSIGN_OR_RETURN(auto j, grpc_client::fetch_json(a, "ModelMetadata", "ModelMetadataRequest",
                                                              "ModelMetadataResponse", model, opts_));
    model_metadata md;
    md.name = j.value("name", model);
    md.platform = j.value("platform", "");
    if (auto v = j.find("versions"); v != j.end() && v->is_array())
      for (const auto& e : *v) md.versions.push_back(e.get<std::string>());
    for (auto [key, dst] : {std::pair{"inputs", &md.inputs}, std::pair{"outputs", &md.outputs}}) {
      if (auto list = j.find(key); list != j.end() && list->is_array())
        for (const auto& t : *list) {
          served_tensor st{t.value("name", ""), t.value("datatype", ""), {}};
          if (auto s = t.find("shape"); s != t.end())
            for (const auto& dim : *s)
              st.shape.push_back(dim.is_string() ? std::stoll(dim.get<std::string>()) : dim.get<std::int64_t>());
          dst->push_back(std::move(st));
        }
    }
    return md;
  }

  bool ready(const endpoint_address& a, const std::string& model) override {
    auto ch = grpc_client::make_channel(a, opts_);
    auto req = grpc_client::named("ModelReadyRequest", model);
    auto resp = net::grpc::kserve_schema::get().make("ModelReadyResponse");
    error_info err;
    if (!grpc_client::unary(*ch, "ModelReady", *req, *resp, opts_, "ModelReady", err).ok()) return false;
    return resp->GetReflection()->GetBool(*resp, resp->GetDescriptor()->FindFieldByName("ready"));
  }

  // SystemSharedMemoryRegister (`key` set) / SystemSharedMemoryUnregister.
  shm_call_result shared_memory(const endpoint_address& a, const std::string& region, const std::string& key,
                                std::size_t bytes) override {
    auto ch = grpc_client::make_channel(a, opts_);
    const bool reg = !key.empty();
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
    if (s.ok()) return {true, true, {}};
    const bool answered =
        s.error_code() != ::grpc::StatusCode::UNAVAILABLE && s.error_code() != ::grpc::StatusCode::DEADLINE_EXCEEDED;
    return {false, answered, err.message};
  }

  // Waits for the callbacks of the calls in flight (abandon() cancelled them).
  void close() override {
    std::unique_lock lk(mu_);
    idle_.wait(lk, [&] { return in_flight_ == 0; });
  }

 private:
  void judge(const attempt_ptr& a, grpc_client::call& call, const ::grpc::Status& s, deferred& d) {
    const auto& url = a->ep->addr.url;
    if (s.ok()) {
      events_.on_answer(a, {attempt_fault::none, infer_result(*a, call.response)}, d);
    } else if (s.error_code() == ::grpc::StatusCode::UNAVAILABLE && call.ctx.GetServerTrailingMetadata().empty()) {
      // no answer from a server (connect failure, reset): a transport error
      events_.on_no_answer(a, "gRPC call to " + url + " failed: " + s.error_message(), false, d);
    } else {
      auto e = grpc_client::call_error(s, call.ctx, "model '" + a->call->model + "' on " + url);
      events_.on_answer(a, {grpc_client::fault_of(e.code), std::move(e)}, d);
    }
  }

  // The answer as the call's result (the message's tensors are read before it goes).
  result<embed_result> infer_result(const remote_attempt& a, ::grpc::ByteBuffer& b) {
    auto m = net::grpc::kserve_schema::get().make("ModelInferResponse");
    if (!grpc_client::parse(b, *m))
      return fail(errc::decode_failed, "response of " + a.ep->addr.url + ": not a ModelInferResponse");
    return attempt_result(net::grpc::decode_infer_response(*m), a, opts_.max_response_bytes);
  }

  const client_options& opts_;
  client_executor& exec_;
  attempt_events& events_;
  std::unordered_map<const endpoint_state*, std::shared_ptr<grpc_client::channel>> channels_;  // state lock
  std::mutex mu_;                                                                              // in_flight_
  std::condition_variable idle_;                                                               // in_flight_ reached 0
  std::size_t in_flight_ = 0;  // calls whose callback has not run
};

inline std::unique_ptr<transport> make_grpc_transport(const client_options& opts, client_executor& exec,
                                                      attempt_events& events) {
  return std::make_unique<grpc_transport>(opts, exec, events);
}

}  // namespace jitembed::client::detail
