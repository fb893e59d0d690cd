// A model repository's config.pbtxt parsed into a plain struct: fields that would change results and are not
// implemented are refused, fields that cannot are listed in `ignored` (table: docs/models.md).
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/message.h>
#include <google/protobuf/text_format.h>

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/core/dtype.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/net/kserve/datatype.hpp"
#include "jitembed/net/protobuf/model_config.hpp"
#include "jitembed/server/config.hpp"

namespace jitembed::server {

// One input or output of a config.pbtxt.
struct repository_tensor {
  std::string name;
  std::string data_type;            // Triton's name, e.g. "TYPE_FP32"
  std::vector<std::int64_t> dims;   // item dims (no batch dim); -1: variable
  friend bool operator==(const repository_tensor&, const repository_tensor&) = default;
};

// Where a model's instances run (instance_group kind; KIND_AUTO is KIND_GPU when `gpus` are listed, else CPU).
enum class instance_kind : std::uint8_t { cpu, gpu };

// What jitembed reads of one config.pbtxt.
struct repository_model_config {
  std::string file;                       // the config.pbtxt it came from (error messages)
  std::string name;                       // empty in the file: the model directory's name
  std::string platform;                   // "pytorch_libtorch", "torch_aoti", ...
  std::string backend;                    // "pytorch", "jitembed", ...
  std::string default_model_filename;     // empty: the backend's default (model.pt, model.pt2)
  std::int64_t max_batch_size = 0;        // 0: the model has no batch dimension (Triton's meaning)
  std::vector<repository_tensor> inputs, outputs;
  bool dynamic_batching = false;          // a dynamic_batching block is present
  std::vector<std::size_t> preferred_batch_sizes;
  std::uint64_t max_queue_delay_us = 0;
  std::uint64_t default_timeout_us = 0;   // default_queue_policy.default_timeout_microseconds
  std::uint32_t max_queue_size = 0;       // default_queue_policy.max_queue_size; 0: unbounded
  std::size_t instance_count = 1;         // sum of the instance groups' counts
  instance_kind kind = instance_kind::cpu;
  int gpu = 0;                            // the GPU of KIND_GPU instances
  version_policy policy;
  std::map<std::string, std::string> parameters;  // parameters { key: .. value { string_value: .. } }
  std::vector<std::string> ignored;       // fields present that cannot change results (not implemented)
};

// Triton's data type name ("TYPE_" + the KServe name) -> dtype (nullopt: TYPE_STRING, TYPE_UINT16, ...).
inline std::optional<dtype> dtype_from_triton(std::string_view t) noexcept {
  const auto d = t.starts_with("TYPE_") ? net::kserve::datatype_from_string(t.substr(5)) : std::nullopt;
  return d ? net::kserve::to_dtype(*d) : std::nullopt;
}

namespace detail {

namespace pb = google::protobuf;

// Reads one message of the schema by field name (the names are this file's own schema: a missing one is a bug).
class pb_reader {
 public:
  explicit pb_reader(const pb::Message& m) : m_(m), r_(m.GetReflection()) {}

  const pb::FieldDescriptor* field(std::string_view name) const {
    const auto* f = m_.GetDescriptor()->FindFieldByName(std::string(name));
    assert(f && "field not in jitembed's ModelConfig schema");
    return f;
  }
  // Set (proto3: a non-default scalar, a present message, a non-empty repeated field).
  bool has(std::string_view name) const {
    const auto* f = field(name);
    return f->is_repeated() ? r_->FieldSize(m_, f) > 0 : r_->HasField(m_, f);
  }
  std::string str(std::string_view name) const { return r_->GetString(m_, field(name)); }
  bool boolean(std::string_view name) const { return r_->GetBool(m_, field(name)); }
  std::string enum_name(std::string_view name) const { return r_->GetEnum(m_, field(name))->name(); }
  std::int64_t integer(std::string_view name) const {
    const auto* f = field(name);
    switch (f->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_INT32: return r_->GetInt32(m_, f);
      case pb::FieldDescriptor::CPPTYPE_INT64: return r_->GetInt64(m_, f);
      case pb::FieldDescriptor::CPPTYPE_UINT32: return r_->GetUInt32(m_, f);
      case pb::FieldDescriptor::CPPTYPE_UINT64: {
        const auto v = r_->GetUInt64(m_, f);
        return v > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(v);
      }
      default: assert(false && "not an integer field"); return 0;
    }
  }
  std::vector<std::int64_t> integers(std::string_view name) const {
    const auto* f = field(name);
    std::vector<std::int64_t> out;
    for (int i = 0; i < r_->FieldSize(m_, f); ++i) {
      switch (f->cpp_type()) {
        case pb::FieldDescriptor::CPPTYPE_INT32: out.push_back(r_->GetRepeatedInt32(m_, f, i)); break;
        case pb::FieldDescriptor::CPPTYPE_INT64: out.push_back(r_->GetRepeatedInt64(m_, f, i)); break;
        default: assert(false && "not a repeated signed integer field");
      }
    }
    return out;
  }
  pb_reader message(std::string_view name) const { return pb_reader(r_->GetMessage(m_, field(name))); }
  std::vector<pb_reader> messages(std::string_view name) const {
    const auto* f = field(name);
    std::vector<pb_reader> out;
    for (int i = 0; i < r_->FieldSize(m_, f); ++i) out.emplace_back(r_->GetRepeatedMessage(m_, f, i));
    return out;
  }

 private:
  const pb::Message& m_;
  const pb::Reflection* r_;
};

struct pbtxt_errors final : pb::io::ErrorCollector {
  std::string file, first;
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (first.empty()) first = file + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message;
  }
};

inline error_info refused(const std::string& file, const std::string& field, std::string_view why) {
  return fail(errc::invalid_argument,
              file + ": '" + field + "' is not implemented by jitembed and would change results (" + std::string(why) +
                  "); remove it (docs/models.md lists the supported fields)");
}

}  // namespace detail

// Parses config.pbtxt text; `file` names it in every message. Errors: invalid_argument (text that does not
// parse, an unknown field, a refused field, a bad value), each naming the file and the field.
inline result<repository_model_config> parse_repository_config(std::string_view text, const std::string& file) {
  namespace pb = google::protobuf;
  auto msg = net::protobuf::model_config_schema().make("ModelConfig");
  detail::pbtxt_errors errors;
  errors.file = file;
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), msg.get()))
    return fail(errc::invalid_argument, errors.first.empty() ? file + ": not a ModelConfig in text format" : errors.first);

  const detail::pb_reader m(*msg);
  repository_model_config c;
  c.file = file;
  c.name = m.str("name");
  c.platform = m.str("platform");
  c.backend = m.str("backend");
  c.default_model_filename = m.str("default_model_filename");
  c.max_batch_size = m.integer("max_batch_size");
  if (c.max_batch_size < 0) return fail(errc::invalid_argument, file + ": max_batch_size " + std::to_string(c.max_batch_size) + " is negative");

  // Refused wholesale: each changes what is computed or what a request gets back.
  const std::pair<const char*, const char*> whole[] = {
      {"runtime", "a backend runtime other than the backend's own"},
      {"batch_input", "inputs the backend would derive from the batch"},
      {"batch_output", "outputs scattered by the backend"},
      {"sequence_batching", "stateful sequence scheduling"},
      {"ensemble_scheduling", "a pipeline of other models"},
      {"cc_model_filenames", "a different model file per GPU architecture"},
      {"model_operations", "custom operator libraries loaded into the backend"},
      {"model_repository_agents", "agents that rewrite the repository before loading"}};
  for (auto [f, why] : whole)
    if (m.has(f)) return detail::refused(file, f, why);
  if (m.has("model_transaction_policy")) {
    if (m.message("model_transaction_policy").boolean("decoupled"))
      return detail::refused(file, "model_transaction_policy.decoupled", "decoupled (streaming) responses");
    c.ignored.push_back("model_transaction_policy");
  }
  if (m.has("optimization")) {
    if (m.message("optimization").has("execution_accelerators"))
      return detail::refused(file, "optimization.execution_accelerators", "execution accelerators change the computation");
    c.ignored.push_back("optimization");
  }
  for (const char* f : {"model_warmup", "metric_tags", "response_cache", "model_metrics"})
    if (m.has(f)) c.ignored.emplace_back(f);

  // input / output
  const auto tensors = [&](const char* kind, std::vector<repository_tensor>& out) -> result<void> {
    const auto list = m.messages(kind);
    for (std::size_t i = 0; i < list.size(); ++i) {
      const auto& t = list[i];
      const std::string where = std::string(kind) + "[" + std::to_string(i) + "]";
      repository_tensor rt;
      rt.name = t.str("name");
      if (rt.name.empty()) return fail(errc::invalid_argument, file + ": " + where + ".name is missing");
      rt.data_type = t.enum_name("data_type");
      if (rt.data_type == "TYPE_INVALID") return fail(errc::invalid_argument, file + ": " + where + " ('" + rt.name + "').data_type is missing");
      rt.dims = t.integers("dims");
      for (auto d : rt.dims)
        if (d < -1 || d == 0)
          return fail(errc::invalid_argument,
                      file + ": " + where + ".dims holds " + std::to_string(d) + " (an extent is >= 1, or -1)");
      for (const char* f : {"reshape", "is_shape_tensor", "is_non_linear_format_io"})
        if (t.has(f)) return detail::refused(file, where + "." + f, "the backend would see another shape or layout");
      if (std::string_view(kind) == "input") {
        for (const char* f : {"allow_ragged_batch", "optional"})
          if (t.has(f)) return detail::refused(file, where + "." + f, "ragged or optional inputs change what the model is given");
        if (t.has("format")) c.ignored.push_back(where + ".format");
      } else if (t.has("label_filename")) {
        c.ignored.push_back(where + ".label_filename");
      }
      for (const auto& o : out)
        if (o.name == rt.name) return fail(errc::invalid_argument, file + ": " + kind + " '" + rt.name + "' is declared twice");
      out.push_back(std::move(rt));
    }
    return {};
  };
  JITEMBED_TRY(tensors("input", c.inputs));
  JITEMBED_TRY(tensors("output", c.outputs));

  // dynamic_batching
  if (m.has("dynamic_batching")) {
    const auto d = m.message("dynamic_batching");
    c.dynamic_batching = true;
    for (auto p : d.integers("preferred_batch_size")) {
      if (p < 1) return fail(errc::invalid_argument, file + ": dynamic_batching.preferred_batch_size holds " + std::to_string(p));
      c.preferred_batch_sizes.push_back(static_cast<std::size_t>(p));
    }
    c.max_queue_delay_us = static_cast<std::uint64_t>(d.integer("max_queue_delay_microseconds"));
    for (const char* f : {"preserve_ordering", "priority_levels", "default_priority_level", "priority_queue_policy"})
      if (d.has(f)) c.ignored.push_back(std::string("dynamic_batching.") + f);
    if (d.has("default_queue_policy")) {
      const auto q = d.message("default_queue_policy");
      if (q.enum_name("timeout_action") == "DELAY")
        return detail::refused(file, "dynamic_batching.default_queue_policy.timeout_action", "DELAY serves requests past their timeout");
      c.default_timeout_us = static_cast<std::uint64_t>(q.integer("default_timeout_microseconds"));
      c.max_queue_size = static_cast<std::uint32_t>(q.integer("max_queue_size"));
      if (q.has("allow_timeout_override")) c.ignored.emplace_back("dynamic_batching.default_queue_policy.allow_timeout_override");
    }
  }

  // instance_group
  const auto groups = m.messages("instance_group");
  if (!groups.empty()) c.instance_count = 0;
  std::optional<instance_kind> kind;
  std::optional<int> gpu;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto& g = groups[i];
    const std::string where = "instance_group[" + std::to_string(i) + "]";
    if (g.has("secondary_devices")) return detail::refused(file, where + ".secondary_devices", "instances on secondary devices");
    const std::string k = g.enum_name("kind");
    if (k == "KIND_MODEL") return detail::refused(file, where + ".kind KIND_MODEL", "placement left to the backend");
    const auto gpus = g.integers("gpus");
    if (k == "KIND_CPU" && !gpus.empty())
      return fail(errc::invalid_argument, file + ": " + where + " is KIND_CPU and lists gpus");
    const instance_kind this_kind = (k == "KIND_GPU" || (k == "KIND_AUTO" && !gpus.empty())) ? instance_kind::gpu : instance_kind::cpu;
    if (kind && *kind != this_kind)
      return detail::refused(file, where + ".kind", "instances of one model on both CPU and GPU");
    kind = this_kind;
    for (auto d : gpus) {
      if (d < 0) return fail(errc::invalid_argument, file + ": " + where + ".gpus holds " + std::to_string(d));
      if (gpu && *gpu != d) return detail::refused(file, where + ".gpus", "instances of one model on more than one GPU");
      gpu = static_cast<int>(d);
    }
    const std::int64_t count = g.integer("count");
    if (count < 0) return fail(errc::invalid_argument, file + ": " + where + ".count " + std::to_string(count) + " is negative");
    c.instance_count += count == 0 ? 1 : static_cast<std::size_t>(count);  // Triton's default count is 1
    for (const char* f : {"name", "rate_limiter", "profile", "passive", "host_policy"})
      if (g.has(f)) c.ignored.push_back(where + "." + f);
  }
  if (c.instance_count > 1024) return fail(errc::invalid_argument, file + ": instance_group counts add up to " + std::to_string(c.instance_count) + " (at most 1024)");
  c.kind = kind.value_or(instance_kind::cpu);
  c.gpu = gpu.value_or(0);

  // version_policy
  if (m.has("version_policy")) {
    const auto v = m.message("version_policy");
    if (v.has("all")) {
      c.policy.which = version_policy::kind::all;
    } else if (v.has("specific")) {
      c.policy.which = version_policy::kind::specific;
      for (auto n : v.message("specific").integers("versions")) {
        if (n < 1) return fail(errc::invalid_argument, file + ": version_policy.specific.versions holds " + std::to_string(n));
        c.policy.versions.push_back(std::to_string(n));
      }
      if (c.policy.versions.empty()) return fail(errc::invalid_argument, file + ": version_policy.specific lists no versions");
    } else if (v.has("latest")) {
      const auto n = v.message("latest").integer("num_versions");
      c.policy.num_versions = n == 0 ? 1 : static_cast<std::size_t>(n);  // Triton's default is 1
    }
  }

  // parameters: a map<string, ModelParameter>, i.e. repeated entries with key / value
  for (const auto& e : m.messages("parameters")) c.parameters[e.str("key")] = e.message("value").str("string_value");
  return c;
}

// Reads and parses `path` (io_error when it cannot be read).
inline result<repository_model_config> read_repository_config(const std::filesystem::path& path) {
  const auto text = detail::read_file(path.string());
  if (!text) return fail(errc::io_error, path.string() + ": cannot open the model configuration");
  return parse_repository_config(*text, path.string());
}

}  // namespace jitembed::server
