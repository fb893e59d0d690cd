// The gRPC front's answers to every call but infer: the core's typed answers written field by field through
// protobuf reflection (Triton's gRPC messages share the HTTP JSON's field names; missing fields are left out).
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "jitembed/core/error.hpp"
#include "jitembed/net/grpc/kserve_schema.hpp"
#include "jitembed/server/detail/answers.hpp"
#include "jitembed/server/detail/service_core.hpp"
#include "jitembed/server/grpc/methods.hpp"

namespace jitembed::server::detail {

// One scalar (repeated: one more element) of field `f`, converted to the field's type; an enum by its name.
template <class T>
void put_scalar(pb::Message& m, const pb::FieldDescriptor* f, const T& x) {
  const auto* r = m.GetReflection();
  const bool rep = f->is_repeated();
  using D = pb::FieldDescriptor;
  if constexpr (std::is_convertible_v<T, std::string_view>) {
    const std::string s{std::string_view(x)};
    if (f->cpp_type() == D::CPPTYPE_STRING) return rep ? r->AddString(&m, f, s) : r->SetString(&m, f, s);
    if (const auto* v = f->cpp_type() == D::CPPTYPE_ENUM ? f->enum_type()->FindValueByName(s) : nullptr)
      return rep ? r->AddEnum(&m, f, v) : r->SetEnum(&m, f, v);
  } else if constexpr (std::is_arithmetic_v<T>) {
    switch (f->cpp_type()) {
      case D::CPPTYPE_BOOL: return rep ? r->AddBool(&m, f, x) : r->SetBool(&m, f, x);
      case D::CPPTYPE_INT32: return rep ? r->AddInt32(&m, f, static_cast<std::int32_t>(x)) : r->SetInt32(&m, f, static_cast<std::int32_t>(x));
      case D::CPPTYPE_INT64: return rep ? r->AddInt64(&m, f, static_cast<std::int64_t>(x)) : r->SetInt64(&m, f, static_cast<std::int64_t>(x));
      case D::CPPTYPE_UINT32: return rep ? r->AddUInt32(&m, f, static_cast<std::uint32_t>(x)) : r->SetUInt32(&m, f, static_cast<std::uint32_t>(x));
      case D::CPPTYPE_UINT64: return rep ? r->AddUInt64(&m, f, static_cast<std::uint64_t>(x)) : r->SetUInt64(&m, f, static_cast<std::uint64_t>(x));
      case D::CPPTYPE_DOUBLE: return rep ? r->AddDouble(&m, f, static_cast<double>(x)) : r->SetDouble(&m, f, static_cast<double>(x));
      default: return;
    }
  }
}

template <class T>
void put(pb::Message& m, const pb::FieldDescriptor* f, const T& x);

// Collects a typed answer's fields into a message.
struct message_fields {
  pb::Message& m;
  template <class T>
  void operator()(std::string_view key, const T& x) const {
    if (const auto* f = m.GetDescriptor()->FindFieldByName(std::string(key))) put(m, f, x);
  }
};
template <class T>
void write_message(pb::Message& m, const T& answer) {
  answer.fields(message_fields{m});
}

// ModelVersionPolicy: a oneof of Latest, All, Specific (int64 versions: one that is not a number has no
// place in it and is left out).
inline void put_policy(pb::Message& m, const version_policy& p) {
  const char* which = p.which == version_policy::kind::all ? "all" : p.which == version_policy::kind::specific ? "specific" : "latest";
  auto& choice = *m.GetReflection()->MutableMessage(&m, m.GetDescriptor()->FindFieldByName(which));
  const auto* d = choice.GetDescriptor();
  if (p.which == version_policy::kind::latest) put_scalar(choice, d->FindFieldByName("num_versions"), p.num_versions);
  if (p.which == version_policy::kind::specific)
    for (const auto& v : p.versions)
      if (is_decimal(v)) put_scalar(choice, d->FindFieldByName("versions"), std::stoll(v));
}

template <class T>
void put(pb::Message& m, const pb::FieldDescriptor* f, const T& x) {
  const auto* r = m.GetReflection();
  if constexpr (is_optional<T>::value) {
    if (x) put(m, f, *x);
  } else if constexpr (std::is_same_v<T, version_policy>) {
    put_policy(*r->MutableMessage(&m, f), x);
  } else if constexpr (requires { x.fields(message_fields{m}); }) {
    write_message(f->is_repeated() ? *r->AddMessage(&m, f) : *r->MutableMessage(&m, f), x);
  } else if constexpr (requires { x.front().first; }) {  // vector<pair<string, T>>: a map
    for (const auto& [k, v] : x) {
      auto& entry = *r->AddMessage(&m, f);
      put(entry, entry.GetDescriptor()->map_key(), k);
      put(entry, entry.GetDescriptor()->map_value(), v);
    }
  } else if constexpr (requires { x.begin(); } && !std::is_convertible_v<T, std::string_view>) {
    for (const auto& v : x) put(m, f, v);
  } else if constexpr (std::is_convertible_v<T, std::string_view> || std::is_arithmetic_v<T>) {
    put_scalar(m, f, x);
  }  // json_text: HTTP only
}

template <class T>
::grpc::ByteBuffer answer_message(std::string_view type, const T& answer) {
  auto msg = net::grpc::kserve_schema::get().make(type);
  write_message(*msg, answer);
  return serialize_message(*msg);
}
inline ::grpc::ByteBuffer bool_message(std::string_view type, const char* field, bool v) {
  auto msg = net::grpc::kserve_schema::get().make(type);
  msg->GetReflection()->SetBool(msg.get(), msg->GetDescriptor()->FindFieldByName(field), v);
  return serialize_message(*msg);
}
inline ::grpc::ByteBuffer empty_message(std::string_view type) {
  return serialize_message(net::grpc::kserve_schema::get().prototype(type));
}

// A shared-memory status: the registry's regions as a map of RegionStatus by name.
inline result<::grpc::ByteBuffer> shm_status_message(service_core& core, std::string_view name, bool cuda) {
  JITEMBED_ASSIGN_OR_RETURN(const auto st, core.shared_memory().status(name, cuda ? shared_memory_kind::cuda
                                                                                   : shared_memory_kind::system));
  std::vector<std::pair<std::string, shared_memory_status>> by_name;
  for (const auto& region : st) by_name.emplace_back(region.name, region);
  auto msg = net::grpc::kserve_schema::get().make(cuda ? "CudaSharedMemoryStatusResponse" : "SystemSharedMemoryStatusResponse");
  put(*msg, msg->GetDescriptor()->FindFieldByName("regions"), by_name);
  return serialize_message(*msg);
}

// A map<string, ModelRepositoryParameter> as the core's repository parameters.
inline repository_parameters repository_parameters_of(const pb::Message& m) {
  const auto* field = m.GetDescriptor()->FindFieldByName("parameters");
  const auto* r = m.GetReflection();
  repository_parameters out;
  for (int i = 0; i < r->FieldSize(m, field); ++i) {
    const auto& entry = r->GetRepeatedMessage(m, field, i);
    const auto* ed = entry.GetDescriptor();
    std::string key = entry.GetReflection()->GetString(entry, ed->map_key());
    const auto& v = entry.GetReflection()->GetMessage(entry, ed->map_value());
    const auto* vr = v.GetReflection();
    const auto* vd = v.GetDescriptor();
    if (const auto* f = vd->FindFieldByName("bool_param"); vr->HasField(v, f))
      out.emplace_back(std::move(key), vr->GetBool(v, f));
    else if (const auto* f2 = vd->FindFieldByName("int64_param"); vr->HasField(v, f2))
      out.emplace_back(std::move(key), vr->GetInt64(v, f2));
    else if (const auto* f3 = vd->FindFieldByName("string_param"); vr->HasField(v, f3))
      out.emplace_back(std::move(key), vr->GetString(v, f3));
    else if (const auto* f4 = vd->FindFieldByName("bytes_param"); vr->HasField(v, f4))
      out.emplace_back(std::move(key), vr->GetString(v, f4));
  }
  return out;
}

// The answer to a unary call that is not ModelInfer (`req` is a `method` request).
inline result<::grpc::ByteBuffer> grpc_query(service_core& core, grpc_method method, const pb::Message& req) {
  const auto name = [&] { return string_field(req, "name"); };
  const auto version = [&] { return string_field(req, "version"); };
  switch (method) {
    case grpc_method::server_live: return bool_message("ServerLiveResponse", "live", true);
    case grpc_method::server_ready: return bool_message("ServerReadyResponse", "ready", bool(core.server_ready()));
    case grpc_method::model_ready:  // Triton answers ready=false (not an error) for a model that is not ready
      return bool_message("ModelReadyResponse", "ready", bool(core.model_ready(name(), version())));
    case grpc_method::server_metadata: return answer_message("ServerMetadataResponse", core.metadata());
    case grpc_method::model_metadata: {
      JITEMBED_ASSIGN_OR_RETURN(const auto a, core.model_metadata_of(name(), version()));
      return answer_message("ModelMetadataResponse", a);
    }
    case grpc_method::model_config: {
      JITEMBED_ASSIGN_OR_RETURN(const auto a, core.model_config_of(name(), version()));
      auto msg = net::grpc::kserve_schema::get().make("ModelConfigResponse");
      write_message(*msg->GetReflection()->MutableMessage(msg.get(), msg->GetDescriptor()->FindFieldByName("config")), a);
      return serialize_message(*msg);
    }
    case grpc_method::model_statistics: {
      JITEMBED_ASSIGN_OR_RETURN(const auto a, core.statistics_of(name(), version()));
      return answer_message("ModelStatisticsResponse", a);
    }
    case grpc_method::repository_index: {
      const auto index = core.repository_index();
      return answer_message("RepositoryIndexResponse", index_answer{{index.begin(), index.end()}});
    }
    case grpc_method::repository_load:
    case grpc_method::repository_unload: {
      const bool load = method == grpc_method::repository_load;
      JITEMBED_TRY(core.repository_call(string_field(req, "model_name"), load, repository_parameters_of(req)));
      return empty_message(load ? "RepositoryModelLoadResponse" : "RepositoryModelUnloadResponse");
    }
    case grpc_method::shm_status:
    case grpc_method::cuda_shm_status: return shm_status_message(core, name(), method == grpc_method::cuda_shm_status);
    case grpc_method::shm_register: {
      const auto* d = req.GetDescriptor();
      const auto* r = req.GetReflection();
      JITEMBED_TRY(core.shared_memory().register_region(name(), string_field(req, "key"),
                                                        r->GetUInt64(req, d->FindFieldByName("offset")),
                                                        r->GetUInt64(req, d->FindFieldByName("byte_size"))));
      return empty_message("SystemSharedMemoryRegisterResponse");
    }
    case grpc_method::cuda_shm_register: {
      const auto* d = req.GetDescriptor();
      const auto* r = req.GetReflection();
      const std::string raw = string_field(req, "raw_handle");  // bytes
      JITEMBED_TRY(core.shared_memory().register_cuda_region(
          name(), std::as_bytes(std::span(raw.data(), raw.size())), r->GetInt64(req, d->FindFieldByName("device_id")),
          r->GetUInt64(req, d->FindFieldByName("byte_size"))));
      return empty_message("CudaSharedMemoryRegisterResponse");
    }
    case grpc_method::shm_unregister:
    case grpc_method::cuda_shm_unregister: {
      const bool cuda = method == grpc_method::cuda_shm_unregister;
      const auto kind = cuda ? shared_memory_kind::cuda : shared_memory_kind::system;
      if (const auto n = name(); n.empty())
        core.shared_memory().unregister_all(kind);
      else
        core.shared_memory().unregister_region(n, kind);
      return empty_message(cuda ? "CudaSharedMemoryUnregisterResponse" : "SystemSharedMemoryUnregisterResponse");
    }
    default: return fail(errc::internal, "method not routed");
  }
}

}  // namespace jitembed::server::detail
