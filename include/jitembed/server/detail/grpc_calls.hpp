// The gRPC front end's calls (server/grpc_server.hpp is the API): method routing, the unary reactor that
// answers health, metadata, config, statistics, repository and ModelInfer calls through the service core,
// and the ModelStreamInfer reactor. JSON-shaped answers reuse the HTTP API's renderings through
// protobuf's JSON parser (Triton's gRPC messages share the HTTP JSON's field names).
#pragma once

#include <google/protobuf/message.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/server_callback.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "jitembed/core/error.hpp"
#include "jitembed/net/grpc/infer_codec.hpp"
#include "jitembed/net/grpc/kserve_schema.hpp"
#include "jitembed/net/grpc/status.hpp"
#include "jitembed/server/detail/service_core.hpp"
#include "jitembed/server/grpc_options.hpp"

namespace jitembed::server::detail {

namespace pb = google::protobuf;

enum class grpc_method : std::uint8_t {
  server_live,
  server_ready,
  model_ready,
  server_metadata,
  model_metadata,
  model_infer,
  model_stream_infer,
  model_config,
  model_statistics,
  repository_index,
  repository_load,
  repository_unload,
  shm_status,
  shm_register,
  shm_unregister,
  cuda_shm_status,
  cuda_shm_register,
  cuda_shm_unregister,
  unknown
};

struct grpc_method_info {
  std::string_view name;
  grpc_method method;
  std::string_view request;  // message type
};

inline constexpr grpc_method_info kGrpcMethods[] = {
    {"ServerLive", grpc_method::server_live, "ServerLiveRequest"},
    {"ServerReady", grpc_method::server_ready, "ServerReadyRequest"},
    {"ModelReady", grpc_method::model_ready, "ModelReadyRequest"},
    {"ServerMetadata", grpc_method::server_metadata, "ServerMetadataRequest"},
    {"ModelMetadata", grpc_method::model_metadata, "ModelMetadataRequest"},
    {"ModelInfer", grpc_method::model_infer, "ModelInferRequest"},
    {"ModelStreamInfer", grpc_method::model_stream_infer, "ModelInferRequest"},
    {"ModelConfig", grpc_method::model_config, "ModelConfigRequest"},
    {"ModelStatistics", grpc_method::model_statistics, "ModelStatisticsRequest"},
    {"RepositoryIndex", grpc_method::repository_index, "RepositoryIndexRequest"},
    {"RepositoryModelLoad", grpc_method::repository_load, "RepositoryModelLoadRequest"},
    {"RepositoryModelUnload", grpc_method::repository_unload, "RepositoryModelUnloadRequest"},
    {"SystemSharedMemoryStatus", grpc_method::shm_status, "SystemSharedMemoryStatusRequest"},
    {"SystemSharedMemoryRegister", grpc_method::shm_register, "SystemSharedMemoryRegisterRequest"},
    {"SystemSharedMemoryUnregister", grpc_method::shm_unregister, "SystemSharedMemoryUnregisterRequest"},
    {"CudaSharedMemoryStatus", grpc_method::cuda_shm_status, "CudaSharedMemoryStatusRequest"},
    {"CudaSharedMemoryRegister", grpc_method::cuda_shm_register, "CudaSharedMemoryRegisterRequest"},
    {"CudaSharedMemoryUnregister", grpc_method::cuda_shm_unregister, "CudaSharedMemoryUnregisterRequest"},
};

// "/inference.GRPCInferenceService/ModelInfer" -> its entry; nullptr for any other path.
inline const grpc_method_info* find_grpc_method(std::string_view path) {
  const std::string_view svc = net::grpc::kServiceName;
  if (path.size() < svc.size() + 2 || path[0] != '/' || path.substr(1, svc.size()) != svc ||
      path[svc.size() + 1] != '/')
    return nullptr;
  const auto name = path.substr(svc.size() + 2);
  for (const auto& m : kGrpcMethods)
    if (m.name == name) return &m;
  return nullptr;
}

inline bool parse_message(const ::grpc::ByteBuffer& in, pb::Message& msg) {
  ::grpc::ByteBuffer copy(in);  // the reader takes a non-const buffer; copying a ByteBuffer shares its slices
  ::grpc::ProtoBufferReader reader(&copy);
  return msg.ParseFromZeroCopyStream(&reader);
}

inline ::grpc::ByteBuffer serialize_message(const pb::Message& msg) {
  const std::string bytes = msg.SerializeAsString();
  ::grpc::Slice s(bytes.data(), bytes.size());
  return ::grpc::ByteBuffer(&s, 1);
}

// A response message of `type` filled from JSON that Triton's HTTP API answers (same field names).
inline result<::grpc::ByteBuffer> json_message(std::string_view type, const nlohmann::ordered_json& j) {
  auto msg = net::grpc::kserve_schema::get().make(type);
  pb::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;
  const auto st = pb::util::JsonStringToMessage(j.dump(), msg.get(), opts);
  if (!st.ok()) return fail(errc::internal, "rendering " + std::string(type) + ": " + std::string(st.message()));
  return serialize_message(*msg);
}

inline std::string string_field(const pb::Message& m, const char* name) {
  const auto* f = m.GetDescriptor()->FindFieldByName(name);
  return f ? m.GetReflection()->GetString(m, f) : std::string();
}

// A map<string, ModelRepositoryParameter> as the HTTP load request's "parameters" object.
inline nlohmann::json repository_parameters(const pb::Message& m) {
  const auto* field = m.GetDescriptor()->FindFieldByName("parameters");
  const auto* r = m.GetReflection();
  nlohmann::json out = nlohmann::json::object();
  for (int i = 0; i < r->FieldSize(m, field); ++i) {
    const auto& entry = r->GetRepeatedMessage(m, field, i);
    const auto* ed = entry.GetDescriptor();
    const std::string key = entry.GetReflection()->GetString(entry, ed->map_key());
    const auto& v = entry.GetReflection()->GetMessage(entry, ed->map_value());
    const auto* vr = v.GetReflection();
    const auto* vd = v.GetDescriptor();
    if (const auto* f = vd->FindFieldByName("bool_param"); vr->HasField(v, f))
      out[key] = vr->GetBool(v, f);
    else if (const auto* f2 = vd->FindFieldByName("int64_param"); vr->HasField(v, f2))
      out[key] = vr->GetInt64(v, f2);
    else if (const auto* f3 = vd->FindFieldByName("string_param"); vr->HasField(v, f3))
      out[key] = vr->GetString(v, f3);
    else if (const auto* f4 = vd->FindFieldByName("bytes_param"); vr->HasField(v, f4))
      out[key] = vr->GetString(v, f4);
  }
  return out;
}

// The request's bearer token, when the service requires one.
inline bool grpc_authorized(const service_core& core, const ::grpc::GenericCallbackServerContext& ctx) {
  const auto& md = ctx.client_metadata();
  const auto it = md.find("authorization");
  const std::string_view value =
      it == md.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
  return core.authorized(value);
}

// Adds the gRPC deadline as the request's KServe "timeout" (microseconds) unless it carries one.
inline void apply_deadline(net::kserve::infer_request& req, std::chrono::system_clock::time_point deadline) {
  if (deadline == std::chrono::system_clock::time_point::max()) return;
  if (req.parameters.is_object() && req.parameters.contains("timeout")) return;
  const auto left =
      std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::system_clock::now()).count();
  req.parameters["timeout"] = static_cast<std::uint64_t>(left > 1 ? left : 1);
}

class grpc_unary_call;
class grpc_stream_call;

class kserve_grpc_service final : public ::grpc::CallbackGenericService {
 public:
  kserve_grpc_service(std::shared_ptr<service_core> core, grpc_stream_limits limits)
      : core_(std::move(core)), stream_limits_(limits) {}
  ::grpc::ServerGenericBidiReactor* CreateReactor(::grpc::GenericCallbackServerContext* ctx) override;
  service_core& core() noexcept { return *core_; }

 private:
  std::shared_ptr<service_core> core_;
  grpc_stream_limits stream_limits_;
};

// One unary call: read the request, answer once (possibly later, from a pipeline thread).
class grpc_unary_call final : public ::grpc::ServerGenericBidiReactor {
 public:
  grpc_unary_call(::grpc::GenericCallbackServerContext* ctx, service_core& core, const grpc_method_info* m)
      : ctx_(ctx), core_(core), method_(m) {
    if (!method_) {
      Finish(::grpc::Status(::grpc::StatusCode::UNIMPLEMENTED, "unknown method " + ctx->method()));
      return;
    }
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) return Finish(::grpc::Status(::grpc::StatusCode::CANCELLED, "no request message"));
    request_ = net::grpc::kserve_schema::get().make(method_->request);
    if (!parse_message(in_, *request_))
      return fail(jitembed::fail(errc::invalid_argument, "the " + std::string(method_->name) +
                                                             " request is not a valid " +
                                                             std::string(method_->request) + " message"));
    in_.Clear();
    const bool health = method_->method == grpc_method::server_live || method_->method == grpc_method::server_ready;
    if (!health && !grpc_authorized(core_, *ctx_)) {
      ctx_->AddTrailingMetadata("www-authenticate", "Bearer");
      return Finish(::grpc::Status(::grpc::StatusCode::UNAUTHENTICATED, std::string(bearer_auth::denied_message)));
    }
    run();
  }
  void OnWriteDone(bool) override {}
  void OnDone() override { delete this; }

 private:
  void reply(result<::grpc::ByteBuffer> r) {
    if (!r) return fail(r.error());
    out_ = std::move(*r);
    StartWriteAndFinish(&out_, ::grpc::WriteOptions(), ::grpc::Status::OK);
  }
  void reply_json(std::string_view type, const result<ojson>& j) {
    if (!j) return fail(j.error());
    reply(json_message(type, *j));
  }
  void reply_bool(std::string_view type, const char* field, bool v) {
    auto msg = net::grpc::kserve_schema::get().make(type);
    msg->GetReflection()->SetBool(msg.get(), msg->GetDescriptor()->FindFieldByName(field), v);
    reply(serialize_message(*msg));
  }
  void fail(const error_info& e) {
    ctx_->AddTrailingMetadata(std::string(net::grpc::kErrcMetadataKey), std::string(to_string(e.code)));
    Finish(net::grpc::to_status(e));
  }

  void run() {
    const auto& req = *request_;
    switch (method_->method) {
      case grpc_method::server_live:
        return reply_bool("ServerLiveResponse", "live", true);
      case grpc_method::server_ready:
        return reply_bool("ServerReadyResponse", "ready", core_.registry().ready());
      case grpc_method::model_ready: {
        // Triton answers ready=false (not an error) for a model that is not ready
        auto r = core_.model_ready(string_field(req, "name"), string_field(req, "version"));
        return reply_bool("ModelReadyResponse", "ready", bool(r));
      }
      case grpc_method::server_metadata:
        return reply_json("ServerMetadataResponse", core_.server_metadata());
      case grpc_method::model_metadata:
        return reply_json("ModelMetadataResponse",
                          core_.metadata_json(string_field(req, "name"), string_field(req, "version")));
      case grpc_method::model_config: {
        auto c = core_.config_json(string_field(req, "name"), string_field(req, "version"));
        if (!c) return fail(c.error());
        return reply_json("ModelConfigResponse", ojson{{"config", std::move(*c)}});
      }
      case grpc_method::model_statistics:
        return reply_json("ModelStatisticsResponse",
                          core_.stats_json(string_field(req, "name"), string_field(req, "version")));
      case grpc_method::repository_index:
        return reply_json("RepositoryIndexResponse", ojson{{"models", core_.repository_index_json()}});
      case grpc_method::repository_load:
      case grpc_method::repository_unload: {
        const bool load = method_->method == grpc_method::repository_load;
        auto params = repository_parameters(req);
        nlohmann::json body = nlohmann::json::object();
        if (!params.empty()) body["parameters"] = std::move(params);
        auto r = core_.repository_call(string_field(req, "model_name"), load, body);
        if (!r) return fail(r.error());
        return reply(serialize_message(net::grpc::kserve_schema::get().prototype(
            load ? "RepositoryModelLoadResponse" : "RepositoryModelUnloadResponse")));
      }
      case grpc_method::shm_status:
      case grpc_method::cuda_shm_status: {
        const bool cuda = method_->method == grpc_method::cuda_shm_status;
        auto st = core_.shared_memory().status(string_field(req, "name"),
                                               cuda ? shared_memory_kind::cuda : shared_memory_kind::system);
        if (!st) return fail(st.error());
        ojson regions = ojson::object();
        for (const auto& r : *st) regions[r["name"].get<std::string>()] = r;
        return reply_json(cuda ? "CudaSharedMemoryStatusResponse" : "SystemSharedMemoryStatusResponse",
                          ojson{{"regions", std::move(regions)}});
      }
      case grpc_method::shm_register: {
        const auto* d = req.GetDescriptor();
        const auto* r = req.GetReflection();
        auto ok = core_.shared_memory().register_region(string_field(req, "name"), string_field(req, "key"),
                                                        r->GetUInt64(req, d->FindFieldByName("offset")),
                                                        r->GetUInt64(req, d->FindFieldByName("byte_size")));
        if (!ok) return fail(ok.error());
        return reply(
            serialize_message(net::grpc::kserve_schema::get().prototype("SystemSharedMemoryRegisterResponse")));
      }
      case grpc_method::cuda_shm_register: {
        const auto* d = req.GetDescriptor();
        const auto* r = req.GetReflection();
        const std::string raw = string_field(req, "raw_handle");  // bytes
        auto ok = core_.shared_memory().register_cuda_region(
            string_field(req, "name"), std::as_bytes(std::span(raw.data(), raw.size())),
            r->GetInt64(req, d->FindFieldByName("device_id")), r->GetUInt64(req, d->FindFieldByName("byte_size")));
        if (!ok) return fail(ok.error());
        return reply(serialize_message(net::grpc::kserve_schema::get().prototype("CudaSharedMemoryRegisterResponse")));
      }
      case grpc_method::shm_unregister:
      case grpc_method::cuda_shm_unregister: {
        const bool cuda = method_->method == grpc_method::cuda_shm_unregister;
        const auto kind = cuda ? shared_memory_kind::cuda : shared_memory_kind::system;
        const auto name = string_field(req, "name");
        if (name.empty())
          core_.shared_memory().unregister_all(kind);
        else
          core_.shared_memory().unregister_region(name, kind);
        return reply(serialize_message(net::grpc::kserve_schema::get().prototype(
            cuda ? "CudaSharedMemoryUnregisterResponse" : "SystemSharedMemoryUnregisterResponse")));
      }
      case grpc_method::model_infer:
        return infer();
      default:
        return fail(jitembed::fail(errc::internal, "method not routed"));
    }
  }

  void infer() {
    auto decoded = net::grpc::decode_infer_request(*request_, core_.config().protocol);
    if (!decoded) return fail(decoded.error());
    apply_deadline(*decoded, ctx_->deadline());
    std::string name = decoded->model, version = decoded->version;
    std::shared_ptr<const pb::Message> storage(std::move(request_));
    // the reactor lives until Finish: the completion may use `this`
    core_.pipeline().infer(std::move(name), std::move(version), std::move(*decoded), storage,
                           [this](result<infer_output> r) {
                             if (!r) return fail(r.error());
                             reply(net::grpc::encode_infer_response(**r, *r, /*stream=*/false));
                           });
  }

  ::grpc::GenericCallbackServerContext* ctx_;
  service_core& core_;
  const grpc_method_info* method_;
  ::grpc::ByteBuffer in_, out_;
  std::unique_ptr<pb::Message> request_;
};

// ModelStreamInfer: every request read is run at once (several in flight); each answer is written as it
// completes (a failed request answers a ModelStreamInferResponse with error_message; the stream goes
// on). The call finishes once the client has half-closed and every answer is written.
// Back-pressure: while the stream holds `window` answers (run or waiting to be written) or `queued_bytes` of
// written-out answers the client has not taken, no further request is read, so a client that never reads
// its answers stalls in gRPC's flow control instead of growing the server (HTTP: one request at a time).
class grpc_stream_call final : public ::grpc::ServerGenericBidiReactor {
 public:
  grpc_stream_call(::grpc::GenericCallbackServerContext* ctx, service_core& core, grpc_stream_limits limits)
      : ctx_(ctx), core_(core), limits_(limits) {
    if (!grpc_authorized(core_, *ctx_)) {
      ctx_->AddTrailingMetadata("www-authenticate", "Bearer");
      finished_ = true;
      Finish(::grpc::Status(::grpc::StatusCode::UNAUTHENTICATED, std::string(bearer_auth::denied_message)));
      return;
    }
    reading_ = true;
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      std::unique_lock lock(mu_);
      reading_ = false;
      reads_done_ = true;
      return maybe_finish(lock);
    }
    std::shared_ptr<pb::Message> msg(net::grpc::kserve_schema::get().make("ModelInferRequest"));
    const bool parsed = parse_message(in_, *msg);
    in_.Clear();
    {
      std::lock_guard lock(mu_);
      ++in_flight_;
    }
    if (!parsed) {
      complete(net::grpc::encode_stream_error(
          jitembed::fail(errc::invalid_argument, "a stream message is not a valid ModelInferRequest"), {}));
    } else {
      auto decoded = net::grpc::decode_infer_request(*msg, core_.config().protocol);
      if (!decoded) {
        complete(net::grpc::encode_stream_error(decoded.error(), string_field(*msg, "id")));
      } else {
        apply_deadline(*decoded, ctx_->deadline());
        std::string name = decoded->model, version = decoded->version, id = decoded->id;
        core_.pipeline().infer(std::move(name), std::move(version), std::move(*decoded),
                               std::shared_ptr<const pb::Message>(msg),
                               [this, id = std::move(id)](result<infer_output> r) {
                                 complete(r ? net::grpc::encode_infer_response(**r, *r, /*stream=*/true)
                                            : net::grpc::encode_stream_error(r.error(), id));
                               });
      }
    }
    std::unique_lock lock(mu_);
    reading_ = false;
    if (resume_reading(lock)) StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock lock(mu_);
    if (!ok) {  // the client went away: drop what is queued
      broken_ = true;
      queue_.clear();
      queued_bytes_ = 0;
    }
    const bool more = !queue_.empty();
    if (more) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= current_.Length();
    } else {
      writing_ = false;
    }
    const bool read = resume_reading(lock);
    if (!more) maybe_finish(lock);
    if (lock.owns_lock()) lock.unlock();
    if (more) StartWrite(&current_);
    if (read) StartRead(&in_);
  }
  void OnDone() override { delete this; }

 private:
  // One request answered: queue its message (one write at a time).
  void complete(::grpc::ByteBuffer b) {
    std::unique_lock lock(mu_);
    --in_flight_;
    if (broken_) return maybe_finish(lock);
    if (writing_) {
      queued_bytes_ += b.Length();
      queue_.push_back(std::move(b));
      return;
    }
    writing_ = true;
    current_ = std::move(b);
    lock.unlock();
    StartWrite(&current_);
  }

  // Under the lock, with no read outstanding: whether the caller starts the next read now (it is then
  // marked outstanding). A broken stream reads no more: its reads count as done.
  bool resume_reading(std::unique_lock<std::mutex>& lock) {
    (void)lock;
    if (reading_ || reads_done_) return false;
    if (broken_) {
      reads_done_ = true;
      return false;
    }
    const std::size_t held = in_flight_ + queue_.size() + (writing_ ? 1 : 0);
    if (held >= limits_.window || queued_bytes_ >= limits_.queued_bytes) return false;
    reading_ = true;
    return true;
  }

  void maybe_finish(std::unique_lock<std::mutex>& lock) {
    if (finished_ || !reads_done_ || in_flight_ != 0 || writing_) return;
    finished_ = true;
    lock.unlock();
    Finish(::grpc::Status::OK);
  }

  ::grpc::GenericCallbackServerContext* ctx_;
  service_core& core_;
  const grpc_stream_limits limits_;
  ::grpc::ByteBuffer in_, current_;
  std::mutex mu_;
  std::deque<::grpc::ByteBuffer> queue_;
  std::size_t in_flight_ = 0, queued_bytes_ = 0;
  bool reading_ = false, reads_done_ = false, writing_ = false, finished_ = false, broken_ = false;
};

inline ::grpc::ServerGenericBidiReactor* kserve_grpc_service::CreateReactor(::grpc::GenericCallbackServerContext* ctx) {
  const auto* m = find_grpc_method(ctx->method());
  if (m && m->method == grpc_method::model_stream_infer) return new grpc_stream_call(ctx, *core_, stream_limits_);
  return new grpc_unary_call(ctx, *core_, m);
}

inline result<std::string> read_pem(const std::string& path, std::string_view what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail(errc::io_error, "cannot read the gRPC TLS " + std::string(what) + " '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace jitembed::server::detail
