// The client's gRPC transport (grpc://host:port endpoints): one channel per endpoint (HTTP/2: calls
// multiplex on it; gRPC reconnects it), each attempt a unary ModelInfer on gRPC's callback API with the
// dynamic messages of net/grpc/kserve_schema.hpp. Its completions run on the client's executor; it judges an
// answer's fault from its errc (fault_of), the policy is the HTTP one's. The only code of the client that
// touches gRPC. Included when the program links jitembed::grpc (JITEMBED_HAS_GRPC); without it a grpc://
// endpoint answers every attempt with errc::not_found (client_state.hpp: "built without gRPC").
#pragma once

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/wire_format_lite.h>
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
#include "jitembed/client/detail/transport.hpp"
#include "jitembed/net/grpc/infer_message.hpp"
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

// Triton's shared-memory parameters of a tensor in span (offset, bytes) of the region.
inline void set_shm_parameters(pb::Message& m, const pb::FieldDescriptor* params, const std::string& region,
                               std::size_t offset, std::size_t bytes) {
  net::grpc::set_grpc_parameter(m, params, "shared_memory_region", region);
  // int64_param, as tritonclient sends them (Triton refuses another type)
  net::grpc::set_grpc_parameter(m, params, "shared_memory_byte_size", static_cast<std::int64_t>(bytes));
  net::grpc::set_grpc_parameter(m, params, "shared_memory_offset", static_cast<std::int64_t>(offset));
}

// A ModelInferRequest for the call: one input, BYTES [n, 1] or typed [n, row_shape...] (raw_input_contents; `packed`:
// the rows compressed; with `shm` in the attempt's shared memory instead), the requested outputs (with `shm`: each in
// its span), the deadline as the KServe "timeout" parameter (microseconds), the compression offer. The rows
// go into the message as a slice over the call's buffer, after the message's own bytes: no copy.
inline ::grpc::ByteBuffer infer_request(const remote_call& c, std::int64_t timeout_us, bool offer_compression,
                                        const byte_buffer* packed, const shm_use* shm) {
  namespace ks = net::kserve;
  const auto& f = net::grpc::grpc_infer_fields::get();
  auto m = net::grpc::kserve_schema::get().make("ModelInferRequest");
  const auto* r = m->GetReflection();
  r->SetString(m.get(), f.model_name, c.model);
  if (!c.version.empty()) r->SetString(m.get(), f.model_version, c.version);
  net::grpc::set_grpc_parameter(*m, f.parameters, "timeout", timeout_us);
  if (offer_compression && !shm)
    net::grpc::set_grpc_parameter(*m, f.parameters, std::string(ks::kCompressionParameter), ks::kZstdShuffle);
  auto* in = r->AddMessage(m.get(), f.inputs);
  const auto* ir = in->GetReflection();
  ir->SetString(in, f.in_name, c.input);
  ir->SetString(in, f.in_datatype, std::string(ks::to_string(c.type)));
  for (const auto d : c.input_shape()) ir->AddInt64(in, f.in_shape, d);
  if (shm) {
    set_shm_parameters(*in, f.in_parameters, shm->arena->region, shm->offset, shm->input_bytes);
  } else if (packed) {
    net::grpc::set_grpc_parameter(*in, f.in_parameters, std::string(ks::kCompressionParameter), ks::kZstdShuffle);
    net::grpc::set_grpc_parameter(*in, f.in_parameters, std::string(ks::kRawByteSizeParameter), c.rows->size());
  }
  const auto add_output = [&](const std::string& name) {
    auto* out = r->AddMessage(m.get(), f.outputs);
    out->GetReflection()->SetString(out, f.out_name, name);
    return out;
  };
  if (shm) {
    for (const auto& [name, span] : shm->outputs)
      set_shm_parameters(*add_output(name), f.out_parameters, shm->arena->region, span.first, span.second);
  } else {
    for (const auto& o : c.outputs) add_output(o);
  }
  if (shm) return serialize(*m);
  std::string head = m->SerializeAsString();
  // raw_input_contents (field 7): tag and length, then the rows as a slice that holds the buffer.
  const std::shared_ptr<const byte_buffer> rows = packed ? *c.packed_rows : std::shared_ptr<const byte_buffer>(c.rows);
  std::string prefix;
  {
    pb::io::StringOutputStream sos(&prefix);
    pb::io::CodedOutputStream cos(&sos);
    cos.WriteTag(pb::internal::WireFormatLite::MakeTag(f.raw_input_contents->number(),
                                                       pb::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    cos.WriteVarint64(rows->size());
  }
  head += prefix;
  const auto release = [](void* p) { delete static_cast<std::shared_ptr<const byte_buffer>*>(p); };
  ::grpc::Slice slices[2] = {::grpc::Slice(head.data(), head.size()),
                             ::grpc::Slice(const_cast<std::byte*>(rows->data()), rows->size(), +release,
                                           new std::shared_ptr<const byte_buffer>(rows))};
  return ::grpc::ByteBuffer(slices, rows->empty() ? 1 : 2);
}

// A ModelInferResponse as the call's result: each output [n_rows, ...] from raw_output_contents
// (decompressed when the server compressed it) or from the attempt's shared memory. An output in shared
// memory has an empty raw_output_contents entry (jitembed) or none (only the other outputs have one).
inline result<embed_result> infer_result(::grpc::ByteBuffer& b, const remote_call& c, const std::string& url,
                                         std::size_t max_bytes, const shm_use* shm) {
  namespace ks = net::kserve;
  const auto& f = net::grpc::grpc_infer_fields::get();
  auto m = net::grpc::kserve_schema::get().make("ModelInferResponse");
  if (!parse(b, *m)) return fail(errc::decode_failed, "response of " + url + ": not a ModelInferResponse");
  const auto* r = m->GetReflection();
  embed_result out;
  out.model_name = r->GetString(*m, f.r_model_name);
  out.model_version = r->GetString(*m, f.r_model_version);
  out.endpoint = url;
  out.attempts = c.attempts;
  const auto* raw = m->GetDescriptor()->FindFieldByNumber(f.raw_output_contents_number);
  const int n = r->FieldSize(*m, f.r_outputs), n_raw = r->FieldSize(*m, raw);
  std::vector<ks::infer_tensor> tensors(static_cast<std::size_t>(n));
  int in_shm = 0;
  for (int i = 0; i < n; ++i) {
    const auto& o = r->GetRepeatedMessage(*m, f.r_outputs, i);
    const auto* orf = o.GetReflection();
    auto& t = tensors[static_cast<std::size_t>(i)];
    t.name = orf->GetString(o, f.ro_name);
    const auto dt = ks::datatype_from_string(orf->GetString(o, f.ro_datatype));
    if (!dt)
      return fail(errc::corrupt_data, "response of " + url + ": output '" + t.name + "' has an unknown datatype");
    t.type = *dt;
    for (int k = 0; k < orf->FieldSize(o, f.ro_shape); ++k) t.shape.push_back(orf->GetRepeatedInt64(o, f.ro_shape, k));
    t.parameters = net::grpc::grpc_parameters(o, f.ro_parameters);
    in_shm += ks::has_shared_memory(t.parameters) ? 1 : 0;
  }
  const bool every = n_raw == n;
  if (!every && n_raw != n - in_shm)
    return fail(errc::corrupt_data, "response of " + url + ": " + std::to_string(n_raw) + " raw_output_contents for " +
                                        std::to_string(n) + " outputs");
  int next_raw = 0;
  for (auto& t : tensors) {
    const bool shm_out = ks::has_shared_memory(t.parameters);
    if (every || !shm_out) {
      const std::string& bytes = r->GetRepeatedStringReference(*m, raw, next_raw++, nullptr);
      t.data = bytes_view(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
    }
    JITEMBED_ASSIGN_OR_RETURN(auto v, output_tensor(t, c.n_rows, max_bytes, url, shm));
    out.outputs.emplace_back(t.name, std::move(v));
  }
  return out;
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
inline result<nlohmann::json> fetch_json(const endpoint_address& a, std::string_view rpc, std::string_view req_type,
                                         std::string_view resp_type, const std::string& model,
                                         const client_options& opts) {
  auto ch = make_channel(a, opts);
  const auto& schema = net::grpc::kserve_schema::get();
  auto req = schema.make(req_type);
  req->GetReflection()->SetString(req.get(), req->GetDescriptor()->FindFieldByName("name"), model);
  auto resp = schema.make(resp_type);
  error_info err;
  const auto s = unary(*ch, rpc, *req, *resp, opts, std::string(rpc) + " of '" + model + "' from " + a.url, err);
  if (!s.ok()) return err;
  std::string json;
  pb::util::JsonPrintOptions po;
  po.preserve_proto_field_names = true;
  if (!pb::util::MessageToJsonString(*resp, &json, po).ok())
    return fail(errc::internal, "printing " + std::string(resp_type));
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded()) return fail(errc::internal, "printing " + std::string(resp_type));
  return j;
}

}  // namespace grpc_client

inline result<std::optional<model_identity>> grpc_fetch_identity(const endpoint_address& a, const std::string& model,
                                                                 const client_options& opts) {
  JITEMBED_ASSIGN_OR_RETURN(
      auto cfg, grpc_client::fetch_json(a, "ModelConfig", "ModelConfigRequest", "ModelConfigResponse", model, opts));
  const auto& config = cfg.contains("config") ? cfg["config"] : cfg;
  auto fp = identity_parameter(config, "fingerprint");
  auto key = identity_parameter(config, "preprocess_key");
  if (!fp || !key) return std::optional<model_identity>{};
  model_identity id{std::move(*fp), std::move(*key), {}};
  if (auto in = config.find("input"); in != config.end() && in->is_array() && !in->empty() && (*in)[0].contains("name"))
    id.input = (*in)[0]["name"].get<std::string>();
  return std::optional<model_identity>(std::move(id));
}

inline bool grpc_model_ready(const endpoint_address& a, const std::string& model, const client_options& opts) {
  auto ch = grpc_client::make_channel(a, opts);
  const auto& schema = net::grpc::kserve_schema::get();
  auto req = schema.make("ModelReadyRequest");
  req->GetReflection()->SetString(req.get(), req->GetDescriptor()->FindFieldByName("name"), model);
  auto resp = schema.make("ModelReadyResponse");
  error_info err;
  if (!grpc_client::unary(*ch, "ModelReady", *req, *resp, opts, "ModelReady", err).ok()) return false;
  return resp->GetReflection()->GetBool(*resp, resp->GetDescriptor()->FindFieldByName("ready"));
}

// SystemSharedMemoryRegister (`key` set) / SystemSharedMemoryUnregister.
inline shm_call_result grpc_shm_call(const endpoint_address& a, const std::string& region, const std::string& key,
                                     std::size_t bytes, const client_options& opts) {
  auto ch = grpc_client::make_channel(a, opts);
  const auto& schema = net::grpc::kserve_schema::get();
  const bool reg = !key.empty();
  auto req = schema.make(reg ? "SystemSharedMemoryRegisterRequest" : "SystemSharedMemoryUnregisterRequest");
  const auto* d = req->GetDescriptor();
  const auto* rr = req->GetReflection();
  rr->SetString(req.get(), d->FindFieldByName("name"), region);
  if (reg) {
    rr->SetString(req.get(), d->FindFieldByName("key"), key);
    rr->SetUInt64(req.get(), d->FindFieldByName("offset"), 0);
    rr->SetUInt64(req.get(), d->FindFieldByName("byte_size"), bytes);
  }
  auto resp = schema.make(reg ? "SystemSharedMemoryRegisterResponse" : "SystemSharedMemoryUnregisterResponse");
  error_info err;
  const auto s = grpc_client::unary(*ch, reg ? "SystemSharedMemoryRegister" : "SystemSharedMemoryUnregister", *req,
                                    *resp, opts, "shared memory region '" + region + "' on " + a.url, err);
  if (s.ok()) return {true, true, {}};
  const bool answered =
      s.error_code() != ::grpc::StatusCode::UNAVAILABLE && s.error_code() != ::grpc::StatusCode::DEADLINE_EXCEEDED;
  return {false, answered, err.message};
}

inline result<model_metadata> grpc_fetch_metadata(const endpoint_address& a, const std::string& model,
                                                  const client_options& opts) {
  JITEMBED_ASSIGN_OR_RETURN(auto j, grpc_client::fetch_json(a, "ModelMetadata", "ModelMetadataRequest",
                                                            "ModelMetadataResponse", model, opts));
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

class grpc_transport final : public transport {
 public:
  grpc_transport(const client_options& opts, client_executor& exec, attempt_events& events)
      : opts_(opts), exec_(exec), events_(events) {}

  void send(const attempt_ptr& a, deferred&) override {
    auto& ep = *a->ep;
    auto& ch = channels_[&ep];
    if (!ch) ch = grpc_client::make_channel(ep.addr, opts_);
    auto call = std::make_shared<grpc_client::call>();
    const auto remaining =
        std::chrono::duration_cast<std::chrono::microseconds>(a->call->deadline - clock::now()).count();
    const shm_use* shm = a->shm ? &*a->shm : nullptr;
    call->request =
        grpc_client::infer_request(*a->call, std::max<std::int64_t>(1, remaining), offers_compression(opts_, ep.addr),
                                   shm ? nullptr : packed_rows(opts_, *a->call), shm);
    call->ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::microseconds(std::max<std::int64_t>(1, remaining)));
    if (!opts_.auth_token.empty()) call->ctx.AddMetadata("authorization", "Bearer " + opts_.auth_token);
    a->io = call;
    grpc_transport* const self = this;  // close() waits for every callback
    {
      std::lock_guard lk(mu_);
      ++in_flight_;
    }
    ch->stub->UnaryCall(&call->ctx, grpc_client::method("ModelInfer"), ::grpc::StubOptions(), &call->request,
                        &call->response, [self, a, call, ch](::grpc::Status s) {
                          // on a gRPC thread: the answer is handled on the client's executor
                          self->exec_.post([self, a, call, s = std::move(s)] { self->complete(a, *call, s); });
                          std::lock_guard lk(self->mu_);
                          if (--self->in_flight_ == 0) self->idle_.notify_all();
                        });
  }

  void abandon(remote_attempt& a) override {
    if (a.io) std::static_pointer_cast<grpc_client::call>(a.io)->ctx.TryCancel();
  }

  void forget(const endpoint_state& e) override { channels_.erase(&e); }

  result<std::optional<model_identity>> identity(const endpoint_address& a, const std::string& model) override {
    return grpc_fetch_identity(a, model, opts_);
  }
  result<model_metadata> metadata(const endpoint_address& a, const std::string& model) override {
    return grpc_fetch_metadata(a, model, opts_);
  }
  bool ready(const endpoint_address& a, const std::string& model) override { return grpc_model_ready(a, model, opts_); }
  shm_call_result shared_memory(const endpoint_address& a, const std::string& region, const std::string& key,
                                std::size_t bytes) override {
    return grpc_shm_call(a, region, key, bytes, opts_);
  }

  // Waits for the callbacks of the calls in flight (abandon() cancelled them).
  void close() override {
    std::unique_lock lk(mu_);
    idle_.wait(lk, [&] { return in_flight_ == 0; });
  }

 private:
  void complete(const attempt_ptr& a, grpc_client::call& call, const ::grpc::Status& s) {
    events_.complete(a, [&](deferred& d) { judge(a, call, s, d); });
  }

  void judge(const attempt_ptr& a, grpc_client::call& call, const ::grpc::Status& s, deferred& d) {
    const auto& url = a->ep->addr.url;
    if (s.ok()) {
      auto r = grpc_client::infer_result(call.response, *a->call, url, opts_.max_response_bytes,
                                         a->shm ? &*a->shm : nullptr);
      events_.on_answer(a, {attempt_fault::none, std::move(r)}, d);
    } else if (s.error_code() == ::grpc::StatusCode::UNAVAILABLE && call.ctx.GetServerTrailingMetadata().empty()) {
      // no answer from a server (connect failure, reset): a transport error
      events_.on_no_answer(a, "gRPC call to " + url + " failed: " + s.error_message(), false, d);
    } else {
      auto e = grpc_client::call_error(s, call.ctx, "model '" + a->call->model + "' on " + url);
      events_.on_answer(a, {grpc_client::fault_of(e.code), std::move(e)}, d);
    }
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
