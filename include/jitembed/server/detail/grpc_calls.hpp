// The gRPC front end's calls (server/grpc_server.hpp is the API): the unary reactor, which answers ModelInfer
// here and every other call through server/grpc/messages.hpp, and the ModelStreamInfer reactor.
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/server_callback.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "jitembed/core/error.hpp"
#include "jitembed/net/grpc/infer_codec.hpp"
#include "jitembed/net/grpc/kserve_schema.hpp"
#include "jitembed/net/grpc/status.hpp"
#include "jitembed/server/detail/service_core.hpp"
#include "jitembed/server/grpc/messages.hpp"
#include "jitembed/server/grpc/methods.hpp"
#include "jitembed/server/grpc_options.hpp"

namespace jitembed::server::detail {

namespace pb = google::protobuf;

// The request's bearer token, when the service requires one.
inline bool grpc_authorized(const service_core& core, const ::grpc::GenericCallbackServerContext& ctx) {
  const auto& md = ctx.client_metadata();
  const auto it = md.find("authorization");
  const std::string_view value =
      it == md.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
  return core.authorized(value);
}

// Decodes a ModelInferRequest and runs it; the gRPC deadline becomes its KServe "timeout" (microseconds)
// unless it carries one. `done` gets the decoder's or the pipeline's answer.
inline void run_infer(service_core& core, std::shared_ptr<const pb::Message> msg,
                      std::chrono::system_clock::time_point deadline, infer_completion done) {
  auto req = net::grpc::decode_infer_request(*msg, core.config().protocol);
  if (!req) return done(req.error());
  if (deadline != std::chrono::system_clock::time_point::max() &&
      !(req->parameters.is_object() && req->parameters.contains("timeout"))) {
    const auto left =
        std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::system_clock::now()).count();
    req->parameters["timeout"] = static_cast<std::uint64_t>(left > 1 ? left : 1);
  }
  std::string name = req->model, version = req->version;
  core.pipeline().infer(std::move(name), std::move(version), std::move(*req), std::move(msg), std::move(done));
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
  void fail(const error_info& e) {
    ctx_->AddTrailingMetadata(std::string(net::grpc::kErrcMetadataKey), std::string(to_string(e.code)));
    Finish(net::grpc::to_status(e));
  }

  void run() {
    if (method_->method == grpc_method::model_infer) return infer();
    reply(grpc_query(core_, method_->method, *request_));
  }

  void infer() {  // the reactor lives until Finish: the completion may use `this`
    run_infer(core_, std::move(request_), ctx_->deadline(), [this](result<infer_output> r) {
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

// ModelStreamInfer: every request read is run at once; each answer is written as it completes (a failed
// request answers an error_message, the stream goes on). Reads pause at grpc_stream_limits (grpc_options.hpp).
// The call finishes once the client has half-closed and every answer is written.
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
      run_infer(core_, msg, ctx_->deadline(), [this, id = string_field(*msg, "id")](result<infer_output> r) {
        complete(r ? net::grpc::encode_infer_response(**r, *r, /*stream=*/true)
                   : net::grpc::encode_stream_error(r.error(), id));
      });
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
  auto text = read_file(path);
  if (!text) return fail(errc::io_error, "cannot read the gRPC TLS " + std::string(what) + " '" + path + "'");
  return std::move(*text);
}

}  // namespace jitembed::server::detail
