// The model repository without LibTorch: config.pbtxt parsing (round trips of Triton configs, refused and
// ignored fields), and repositories of jitembed-backend models loaded into a service: per-model failures in
// the index while the good models serve, load / unload re-reading the directory, fingerprints.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/server/repository/config.hpp"
#include "jitembed/server/repository/local_models.hpp"
#include "jitembed/server/repository/model_repository.hpp"
#include "server/server_test_util.hpp"

using namespace jitembed;
using namespace jitembed::server;
using namespace server_test;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& name) {
    path = fs::temp_directory_path() /
           ("jitembed_repo_" + std::to_string(::getpid()) + "_" + name + "_" +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// A text-embed model of the jitembed backend (small: L 8, D 16).
std::string text_model_config(const std::string& name, const std::string& extra = {}) {
  return "name: \"" + name + "\"\nbackend: \"jitembed\"\nmax_batch_size: 8\n" +
         "parameters { key: \"model\" value { string_value: \"text-embed\" } }\n"
         "parameters { key: \"text_max_length\" value { string_value: \"8\" } }\n"
         "parameters { key: \"text_dim\" value { string_value: \"16\" } }\n" +
         extra;
}

repository_model_config parsed(const std::string& text) {
  auto c = parse_repository_config(text, "m/config.pbtxt");
  INFO(text);
  REQUIRE_MESSAGE(c, (c ? "" : c.error().message));
  return *c;
}

void check_refused(const std::string& text, const std::string& field) {
  auto c = parse_repository_config(text, "dir/m/config.pbtxt");
  INFO(text);
  REQUIRE_FALSE(c);
  CHECK(c.error().code == errc::invalid_argument);
  CHECK_MESSAGE(c.error().message.find("dir/m/config.pbtxt") != std::string::npos, c.error().message);
  CHECK_MESSAGE(c.error().message.find("'" + field) != std::string::npos, c.error().message);
}

const repository_entry* entry(const std::vector<repository_entry>& idx, const std::string& name, const std::string& version = {}) {
  for (const auto& e : idx)
    if (e.name == name && e.version == version) return &e;
  return nullptr;
}

}  // namespace

TEST_CASE("repository config: the Triton test peer's config.pbtxt files parse") {
  for (const char* m : {"jit_embed", "jit_embed_fp16"}) {
    const fs::path p = fs::path(JITEMBED_TEST_DATA_DIR).parent_path() / "triton" / "models" / m / "config.pbtxt";
    auto c = read_repository_config(p);
    REQUIRE_MESSAGE(c, (c ? "" : c.error().message));
    CHECK(c->name == m);
    CHECK(c->backend == "python");
    CHECK(c->max_batch_size == 64);
    REQUIRE(c->inputs.size() == 1);
    CHECK(c->inputs[0] == repository_tensor{"INPUT0", "TYPE_STRING", {1}});
    REQUIRE(c->outputs.size() == 1);
    CHECK(c->outputs[0].name == "EMBEDDING");
    CHECK(c->outputs[0].data_type == (std::string(m) == "jit_embed" ? "TYPE_FP32" : "TYPE_FP16"));
    CHECK(c->outputs[0].dims == std::vector<std::int64_t>{8});
    CHECK(c->dynamic_batching);
    CHECK(c->max_queue_delay_us == 2000);
    CHECK(c->kind == instance_kind::cpu);
    CHECK(c->instance_count == 1);
    CHECK(c->parameters.at("modulus") == (std::string(m) == "jit_embed" ? "65521" : "2039"));
    CHECK(c->ignored.empty());
  }
}

TEST_CASE("repository config: every supported field, in Triton's syntax variants") {
  const auto c = parsed(R"pb(
# a comment
name: "vae"
platform: "pytorch_libtorch"
max_batch_size: 32
input [ { name: "INPUT__0" data_type: TYPE_UINT8 format: FORMAT_NHWC dims: [ 256, 256, 3 ] } ]
output { name: "OUTPUT__1" data_type: TYPE_FP16 dims: [ -1, 32 ] label_filename: "labels.txt" }
output < name: "OUTPUT__0" data_type: TYPE_BF16 dims: 4 dims: 32 dims: 32 >
dynamic_batching {
  preferred_batch_size: [ 8, 16 ]
  max_queue_delay_microseconds: 250
  preserve_ordering: true
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 50000 max_queue_size: 64 allow_timeout_override: true }
}
instance_group [ { name: "g" kind: KIND_GPU count: 2 gpus: [ 1 ] rate_limiter { resources [ { name: "R1" count: 4 } ] priority: 2 } },
                 { kind: KIND_GPU gpus: 1 } ]
version_policy: { specific: { versions: [ 1, 3 ] } }
default_model_filename: "weights.pt"
parameters: { key: "modality" value: { string_value: "image" } }
parameters [ { key: "batch_transform" value { string_value: "nchw_signed" } } ]
optimization { graph { level: 1 } priority: PRIORITY_MAX input_pinned_memory { enable: true } eager_batching: true
               cuda { graphs: true graph_spec [ { batch_size: 4 input [ { key: "INPUT__0" value { dim: [ 256, 256, 3 ] } } ] } ] } }
model_metrics { metric_control [ { metric_identifier { family: "nv_inference_request_duration" } histogram_options { buckets: [ 1, 10 ] } } ] }
model_warmup [ { name: "w" batch_size: 1 inputs { key: "INPUT__0" value { data_type: TYPE_UINT8 dims: [ 4 ] zero_data: true } } } ]
response_cache { enable: true }
metric_tags { key: "team" value: "vision" }
)pb");
  CHECK(c.name == "vae");
  CHECK(c.platform == "pytorch_libtorch");
  CHECK(c.backend.empty());
  CHECK(c.max_batch_size == 32);
  REQUIRE(c.inputs.size() == 1);
  CHECK(c.inputs[0] == repository_tensor{"INPUT__0", "TYPE_UINT8", {256, 256, 3}});
  REQUIRE(c.outputs.size() == 2);
  CHECK(c.outputs[0] == repository_tensor{"OUTPUT__1", "TYPE_FP16", {-1, 32}});
  CHECK(c.outputs[1] == repository_tensor{"OUTPUT__0", "TYPE_BF16", {4, 32, 32}});
  CHECK(c.preferred_batch_sizes == std::vector<std::size_t>{8, 16});
  CHECK(c.max_queue_delay_us == 250);
  CHECK(c.default_timeout_us == 50000);
  CHECK(c.max_queue_size == 64);
  CHECK(c.kind == instance_kind::gpu);
  CHECK(c.gpu == 1);
  CHECK(c.instance_count == 3);  // 2 + the default count 1
  CHECK(c.policy.which == version_policy::kind::specific);
  CHECK(c.policy.versions == std::vector<std::string>{"1", "3"});
  CHECK(c.default_model_filename == "weights.pt");
  CHECK(c.parameters.size() == 2);
  CHECK(c.parameters.at("batch_transform") == "nchw_signed");
  CHECK(dtype_from_triton(c.outputs[1].data_type) == dtype::bf16);
  const std::vector<std::string> ignored = {"optimization", "model_warmup", "metric_tags", "response_cache", "model_metrics", "input[0].format",
                                            "output[0].label_filename", "dynamic_batching.preserve_ordering",
                                            "dynamic_batching.default_queue_policy.allow_timeout_override", "instance_group[0].name",
                                            "instance_group[0].rate_limiter"};
  CHECK(c.ignored == ignored);

  CHECK(parsed("backend: \"jitembed\" version_policy { all {} }").policy.which == version_policy::kind::all);
  const auto latest = parsed("backend: \"jitembed\" version_policy { latest { num_versions: 2 } }").policy;
  CHECK(latest.which == version_policy::kind::latest);
  CHECK(latest.num_versions == 2);
  CHECK(parsed("backend: \"jitembed\"").policy == version_policy{});
  CHECK(parsed("backend: \"jitembed\" instance_group [ { kind: KIND_AUTO } ]").kind == instance_kind::cpu);
  CHECK(parsed("backend: \"jitembed\" instance_group [ { gpus: [ 0 ] } ]").kind == instance_kind::gpu);
  CHECK_FALSE(parsed("backend: \"jitembed\"").dynamic_batching);
  CHECK(parsed("backend: \"jitembed\" model_transaction_policy { decoupled: false }").ignored == std::vector<std::string>{"model_transaction_policy"});
}

TEST_CASE("repository config: each result-changing field that is not implemented is refused, naming it and the file") {
  const std::string in = "input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 4 ] ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"runtime: \"model.py\"", "runtime"},
      {"batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: \"n\" data_type: TYPE_INT32 source_input: \"x\" } ]", "batch_input"},
      {"batch_output [ { target_name: \"y\" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: \"x\" } ]", "batch_output"},
      {"sequence_batching { max_sequence_idle_microseconds: 5000 oldest { max_candidate_sequences: 4 } }", "sequence_batching"},
      {"ensemble_scheduling { step [ { model_name: \"a\" model_version: -1 input_map { key: \"x\" value: \"y\" } } ] }", "ensemble_scheduling"},
      {"cc_model_filenames { key: \"7.5\" value: \"model_t4.pt\" }", "cc_model_filenames"},
      {"model_operations { op_library_filename: \"libops.so\" }", "model_operations"},
      {"model_repository_agents { agents [ { name: \"checksum\" parameters { key: \"MD5:1\" value: \"x\" } } ] }", "model_repository_agents"},
      {"model_transaction_policy { decoupled: true }", "model_transaction_policy.decoupled"},
      {"optimization { execution_accelerators { cpu_execution_accelerator [ { name: \"openvino\" } ] } }", "optimization.execution_accelerators"},
      {in + "reshape { shape: [ 2, 2 ] } } ]", "input[0].reshape"},
      {in + "is_shape_tensor: true } ]", "input[0].is_shape_tensor"},
      {in + "allow_ragged_batch: true } ]", "input[0].allow_ragged_batch"},
      {in + "optional: true } ]", "input[0].optional"},
      {"output [ { name: \"y\" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 4 ] } } ]", "output[0].reshape"},
      {"dynamic_batching { default_queue_policy { timeout_action: DELAY } }", "dynamic_batching.default_queue_policy.timeout_action"},
      {"instance_group [ { kind: KIND_GPU gpus: [ 0 ] secondary_devices [ { kind: KIND_NVDLA device_id: 0 } ] } ]", "instance_group[0].secondary_devices"},
      {"instance_group [ { kind: KIND_MODEL } ]", "instance_group[0].kind KIND_MODEL"},
      {"instance_group [ { kind: KIND_GPU gpus: [ 0, 1 ] } ]", "instance_group[0].gpus"},
      {"instance_group [ { kind: KIND_CPU }, { kind: KIND_GPU } ]", "instance_group[1].kind"},
  };
  for (const auto& [text, field] : cases) check_refused("backend: \"jitembed\"\n" + text, field);
}

TEST_CASE("repository config: syntax errors, unknown fields and bad values are invalid_argument naming the file") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"max_batch_size: \"eight\"", "config.pbtxt:1:"},
      {"name: \"m\"\nmax_batch_sise: 8", "max_batch_sise"},                                         // a typo
      {"dynamic_batching { max_queue_delay_microsecond: 100 }", "max_queue_delay_microsecond"},    // inside a supported message
      {"optimization { graph_level: 1 }", "graph_level"},                                         // inside an ignored one
      {"brand_new_field: 1", "brand_new_field"},
      {"dynamic_batching {} sequence_batching {}", "oneof"},
      {"max_batch_size: -1", "max_batch_size"},
      {"input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 0 ] } ]", "input[0].dims"},
      {"input [ { name: \"x\" dims: [ 4 ] } ]", "data_type"},
      {"output [ { data_type: TYPE_FP32 dims: [ 4 ] } ]", "output[0].name"},
      {"input [ { name: \"x\" data_type: TYPE_FP32 dims: 1 }, { name: \"x\" data_type: TYPE_FP32 dims: 1 } ]", "declared twice"},
      {"instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]", "KIND_CPU"},
      {"version_policy { specific { } }", "specific"},
      {"dynamic_batching { preferred_batch_size: [ 0 ] }", "preferred_batch_size"},
  };
  for (const auto& [text, what] : cases) {
    auto c = parse_repository_config(text, "repo/m/config.pbtxt");
    INFO(text);
    REQUIRE_FALSE(c);
    CHECK(c.error().code == errc::invalid_argument);
    CHECK_MESSAGE(c.error().message.find("repo/m/config.pbtxt") != std::string::npos, c.error().message);
    CHECK_MESSAGE(c.error().message.find(what) != std::string::npos, c.error().message);
  }
  auto missing = read_repository_config("/nonexistent/jitembed/config.pbtxt");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == errc::io_error);
}

TEST_CASE("model repository: per-model failures are in the index while the good models serve") {
  temp_dir d("index");
  const auto& r = d.path;
  write(r / "good" / "config.pbtxt", text_model_config("good", "dynamic_batching { max_queue_delay_microseconds: 100 }\n"
                                                               "model_warmup [ { name: \"w\" batch_size: 1 } ]\n"));
  fs::create_directories(r / "good" / "1");
  write(r / "broken" / "config.pbtxt", "name: \"broken\"\nbackend: \"jitembed\"\nmax_batch_size: [");
  fs::create_directories(r / "broken" / "1");
  write(r / "python" / "config.pbtxt", "backend: \"python\"\nmax_batch_size: 4");
  fs::create_directories(r / "python" / "1");
  write(r / "wrongdims" / "config.pbtxt",
        text_model_config("wrongdims", "output [ { name: \"pooled\" data_type: TYPE_FP32 dims: [ 32 ] } ]\n"));
  fs::create_directories(r / "wrongdims" / "1");
  write(r / "refused" / "config.pbtxt", text_model_config("refused", "sequence_batching { }\n"));
  fs::create_directories(r / "refused" / "1");
  write(r / "noversion" / "config.pbtxt", text_model_config("noversion"));
  write(r / "aoti" / "config.pbtxt", "platform: \"torch_aoti\"\nmax_batch_size: 4");
  fs::create_directories(r / "aoti" / "1");
  write(r / "renamed" / "config.pbtxt", text_model_config("other-name"));
  fs::create_directories(r / "renamed" / "1");
  write(r / "badparam" / "config.pbtxt", text_model_config("badparam", "parameters { key: \"colour\" value { string_value: \"red\" } }\n"));
  fs::create_directories(r / "badparam" / "1");
  fs::create_directories(r / "not-a-model");  // no config.pbtxt: not listed

  std::vector<std::string> logged;
  repository_options opts;
  opts.log = [&](const std::string& line) { logged.push_back(line); };
  auto repo = model_repository::open(r, opts);
  REQUIRE(repo);
  CHECK(repo->model_names() == std::vector<std::string>{"aoti", "badparam", "broken", "good", "noversion", "python", "refused",
                                                         "renamed", "wrongdims"});
  auto s = service::create(server_config{}).value();
  CHECK(repo->load_all(s) == 8);
  CHECK(s.loaded() == std::vector<std::pair<std::string, std::string>>{{"good", "1"}});

  const auto idx = repo->index(s);
  REQUIRE(idx.size() == 9);
  const auto* good = entry(idx, "good", "1");
  REQUIRE(good);
  CHECK(good->state == server::model_state::ready);
  CHECK(good->reason.empty());
  CHECK(good->ignored == std::vector<std::string>{"model_warmup"});
  const auto failed = [&](const std::string& name, errc code, const std::string& text) {
    const auto* e = entry(idx, name);
    REQUIRE_MESSAGE(e, name);
    CHECK(e->state == server::model_state::unavailable);
    CHECK_MESSAGE(e->reason.find(text) != std::string::npos, e->reason);
    auto again = repo->load(s, name);  // the same error as a result
    REQUIRE_FALSE(again);
    CHECK_MESSAGE(again.error().code == code, name, ": ", again.error().message);
  };
  failed("broken", errc::invalid_argument, "config.pbtxt:3:");
  failed("python", errc::unsupported_format, "unknown backend 'python'");
  failed("wrongdims", errc::invalid_argument, "output 'pooled' TYPE_FP32 [32] disagrees with the model text-embed: TYPE_FP32 [16]");
  failed("refused", errc::invalid_argument, "'sequence_batching'");
  failed("noversion", errc::not_found, "no version directory");
  failed("aoti", errc::unsupported_format, "no torch_aoti backend linked");
  failed("renamed", errc::invalid_argument, "differs from its directory");
  failed("badparam", errc::invalid_argument, "parameters 'colour'");
  bool logged_ignored = false, logged_failure = false;
  for (const auto& l : logged) {
    logged_ignored = logged_ignored || (l.find("'good'") != std::string::npos && l.find("model_warmup") != std::string::npos);
    logged_failure = logged_failure || l.find("'broken' failed to load") != std::string::npos;
  }
  CHECK(logged_ignored);
  CHECK(logged_failure);

  // The good model serves, through the service's routes, with the repository attached.
  s.attach(*repo);
  auto res = infer(s, "good", bytes_request("text", {"a caption", "another one"}));
  REQUIRE_MESSAGE(res.status == 200, res.body);
  const auto out = decode(res);
  REQUIRE(out.outputs.size() == 3);
  CHECK(out.outputs[2].shape == std::vector<std::int64_t>{2, 16});

  auto http_idx = call(s, "POST", "/v2/repository/index");
  REQUIRE(http_idx.status == 200);
  const auto j = nlohmann::json::parse(http_idx.body);
  REQUIRE(j.size() == 9);
  bool saw_good = false, saw_broken = false;
  for (const auto& e : j) {
    if (e["name"] == "good") {
      saw_good = true;
      CHECK(e["version"] == "1");
      CHECK(e["state"] == "READY");
      CHECK(e["ignored"] == nlohmann::json::array({"model_warmup"}));
    }
    if (e["name"] == "broken") {
      saw_broken = true;
      CHECK(e["state"] == "UNAVAILABLE");
      CHECK(e["reason"].get<std::string>().find("config.pbtxt") != std::string::npos);
      CHECK_FALSE(e.contains("version"));
    }
  }
  CHECK(saw_good);
  CHECK(saw_broken);

  // Triton publishes the config's parameters at /config; so does the service.
  auto cfg = call(s, "GET", "/v2/models/good/config");
  REQUIRE(cfg.status == 200);
  const auto cj = nlohmann::json::parse(cfg.body);
  CHECK(cj["parameters"]["text_dim"]["string_value"] == "16");
  CHECK(cj["parameters"]["model"]["string_value"] == "text-embed");
  CHECK(cj["max_batch_size"] == 8);
  CHECK(cj["dynamic_batching"]["max_queue_delay_microseconds"] == 100);

  // Detached, the index lists only what is loaded: the never-loaded and failed directories are gone.
  s.detach();
  auto detached = nlohmann::json::parse(call(s, "POST", "/v2/repository/index").body);
  CHECK(detached.size() < j.size());
  for (const auto& e : detached) CHECK(e["state"] == "READY");
}

TEST_CASE("model repository: load / unload re-read the directory, a failed reload keeps the old version serving") {
  temp_dir d("reload");
  const auto& r = d.path;
  write(r / "m" / "config.pbtxt", text_model_config("m"));
  fs::create_directories(r / "m" / "1");
  write(r / "other" / "config.pbtxt", text_model_config("other"));
  fs::create_directories(r / "other" / "1");
  auto repo = model_repository::open(r);
  REQUIRE(repo);
  auto s = service::create(server_config{}).value();
  s.attach(*repo);
  REQUIRE(call(s, "POST", "/v2/repository/models/m/load").status == 200);
  const auto fp1 = repo->fingerprint("m", "1");
  REQUIRE(fp1);
  auto meta = nlohmann::json::parse(call(s, "GET", "/v2/models/m").body);
  CHECK(meta["parameters"]["fingerprint"] == *fp1);
  const auto pooled_shape = [&] {
    auto res = infer(s, "m", bytes_request("text", {"same caption"}));
    REQUIRE(res.status == 200);
    return decode(res).outputs.at(2).shape;
  };
  CHECK(pooled_shape() == std::vector<std::int64_t>{1, 16});

  // Another parameter value: the load reads it, the fingerprint changes.
  write(r / "m" / "config.pbtxt", text_model_config("m", "parameters { key: \"work\" value { string_value: \"1\" } }\n"));
  REQUIRE(call(s, "POST", "/v2/repository/models/m/load").status == 200);
  const auto fp2 = repo->fingerprint("m", "1");
  REQUIRE(fp2);
  CHECK(*fp2 != *fp1);
  CHECK(nlohmann::json::parse(call(s, "GET", "/v2/models/m").body)["parameters"]["fingerprint"] == *fp2);
  CHECK(nlohmann::json::parse(call(s, "GET", "/v2/models/m/config").body)["parameters"]["work"]["string_value"] == "1");
  // ... and what the model computes follows the file: another text_dim, another output shape
  std::string cfg12 = text_model_config("m");
  cfg12.replace(cfg12.find("\"16\""), 4, "\"12\"");
  write(r / "m" / "config.pbtxt", cfg12);
  REQUIRE(call(s, "POST", "/v2/repository/models/m/load").status == 200);
  CHECK(pooled_shape() == std::vector<std::int64_t>{1, 12});

  // A broken config: the load fails (400, named), the version loaded before keeps serving.
  write(r / "m" / "config.pbtxt", text_model_config("m", "output [ { name: \"nope\" data_type: TYPE_FP32 dims: [ 1 ] } ]\n"));
  auto bad = call(s, "POST", "/v2/repository/models/m/load");
  CHECK(bad.status == 400);
  CHECK(bad.body.find("'nope'") != std::string::npos);
  CHECK(infer(s, "m", bytes_request("text", {"still served"})).status == 200);
  const auto* e = entry(s.repository_index(), "m", "1");
  REQUIRE(e);
  CHECK(e->state == server::model_state::ready);
  CHECK(e->reason.find("'nope'") != std::string::npos);

  // A second version and a policy that keeps both; then the old one's directory is removed.
  write(r / "m" / "config.pbtxt", text_model_config("m", "version_policy { all { } }\n"));
  fs::create_directories(r / "m" / "2");
  REQUIRE(call(s, "POST", "/v2/repository/models/m/load").status == 200);
  CHECK(s.loaded() == std::vector<std::pair<std::string, std::string>>{{"m", "1"}, {"m", "2"}});
  fs::remove_all(r / "m" / "1");
  REQUIRE(call(s, "POST", "/v2/repository/models/m/load").status == 200);
  CHECK(s.loaded() == std::vector<std::pair<std::string, std::string>>{{"m", "2"}});
  // latest 1 with version 3 added: 3 replaces 2
  write(r / "m" / "config.pbtxt", text_model_config("m"));
  fs::create_directories(r / "m" / "3");
  REQUIRE(call(s, "POST", "/v2/repository/models/m/load").status == 200);
  CHECK(s.loaded() == std::vector<std::pair<std::string, std::string>>{{"m", "3"}});
  // ... and when 3 is removed, 2 comes back (the newer stale version goes first)
  fs::remove_all(r / "m" / "3");
  REQUIRE(call(s, "POST", "/v2/repository/models/m/load").status == 200);
  CHECK(s.loaded() == std::vector<std::pair<std::string, std::string>>{{"m", "2"}});

  // unload: every version; the index says so; parameters are refused for repository models.
  CHECK(call(s, "POST", "/v2/repository/models/m/unload", R"({"parameters": {"version": "2"}})").status == 400);
  REQUIRE(call(s, "POST", "/v2/repository/models/m/unload").status == 200);
  CHECK(infer(s, "m", bytes_request("text", {"x"})).status == 404);
  const auto idx = s.repository_index();
  const auto* u = entry(idx, "m");
  REQUIRE(u);
  CHECK(u->state == server::model_state::unavailable);
  CHECK(u->reason == "unloaded");
  const auto* never = entry(idx, "other");
  REQUIRE(never);
  CHECK(never->state == server::model_state::none);  // in the repository, never loaded
  // a model added to the directory after open() is found by index and load
  write(r / "late" / "config.pbtxt", text_model_config("late"));
  fs::create_directories(r / "late" / "1");
  CHECK(entry(s.repository_index(), "late"));
  CHECK(call(s, "POST", "/v2/repository/models/late/load").status == 200);
  // names that are not model directories
  CHECK(call(s, "POST", "/v2/repository/models/..%2F..%2Fetc/load").status != 200);
  CHECK_FALSE(repo->load(s, "../m"));
  CHECK(repo->load(s, "../m").error().code == errc::invalid_argument);
}

TEST_CASE("model repository: the fingerprint follows the version directory's bytes, not its name") {
  temp_dir d("fingerprint");
  const auto& r = d.path;
  write(r / "m" / "config.pbtxt", text_model_config("m", "instance_group [ { count: 1 } ]\n"));
  write(r / "m" / "1" / "weights.bin", std::string(4096, 'a'));
  write(r / "m" / "1" / "sub" / "vocab.txt", "hello\n");
  auto repo = model_repository::open(r);
  REQUIRE(repo);
  auto s = service::create(server_config{}).value();
  REQUIRE(repo->load(s, "m"));
  const auto fp1 = *repo->fingerprint("m", "1");
  CHECK(fp1.find("files=") != std::string::npos);

  // One byte of one file changes it.
  {
    std::fstream f(r / "m" / "1" / "weights.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2000);
    f.put('b');
  }
  REQUIRE(repo->load(s, "m"));
  const auto fp2 = *repo->fingerprint("m", "1");
  CHECK(fp2 != fp1);

  // Renaming the version directory (1 -> 7) does not.
  fs::rename(r / "m" / "1", r / "m" / "7");
  REQUIRE(repo->load(s, "m"));
  CHECK(s.loaded() == std::vector<std::pair<std::string, std::string>>{{"m", "7"}});
  CHECK(*repo->fingerprint("m", "7") == fp2);

  // Fields that cannot change results do not change it either; a result-changing one does.
  write(r / "m" / "config.pbtxt", text_model_config("m", "instance_group [ { count: 2 } ]\ndynamic_batching { max_queue_delay_microseconds: 5 }\n"));
  REQUIRE(repo->load(s, "m"));
  CHECK(*repo->fingerprint("m", "7") == fp2);
  write(r / "m" / "config.pbtxt", text_model_config("m", "parameters { key: \"output_dtype\" value { string_value: \"f16\" } }\n"));
  REQUIRE(repo->load(s, "m"));
  CHECK(*repo->fingerprint("m", "7") != fp2);
}

TEST_CASE("model repository: local_models runs a repository's versions in this process as a server loads them") {
  temp_dir d("local");
  const auto& r = d.path;
  write(r / "m" / "config.pbtxt", text_model_config("m", "version_policy: { all { } }\n"));
  write(r / "m" / "1" / "weights.bin", "one");
  write(r / "m" / "2" / "weights.bin", "two");
  write(r / "m" / "10" / "weights.bin", "ten");
  auto repo = model_repository::open(r);
  REQUIRE(repo);
  local_models local;
  REQUIRE(repo->load(local, "m"));
  CHECK(local.loaded() == std::vector<std::pair<std::string, std::string>>{{"m", "1"}, {"m", "2"}, {"m", "10"}});
  // The newest version is the largest number (10 > 2, not "10" < "2"); each has the repository's fingerprint.
  const models::any_model* newest = local.find("m");
  REQUIRE(newest != nullptr);
  CHECK(newest == local.find("m", "10"));
  CHECK(std::string(newest->version()) == *repo->fingerprint("m", "10"));
  CHECK(std::string(local.find("m", "1")->version()) == *repo->fingerprint("m", "1"));
  CHECK(local.find("m", "1")->version() != newest->version());
  REQUIRE(local.config("m") != nullptr);
  CHECK(local.config("m")->max_batch_size == 8);
  const models::any_model m10 = *newest;  // a handle: stays valid after the unloads below
  // It computes what a service loaded from the same directory answers, bitwise.
  auto s = service::create(server_config{}).value();
  REQUIRE(repo->load(s, "m"));
  const std::string caption = "a red circle";
  auto item = newest->preprocess(as_bytes_view(caption), {});
  REQUIRE(item);
  auto here = newest->run(std::span<const tensor>(&*item, 1));
  REQUIRE(here);
  REQUIRE(here->size() == 1);
  const auto res = infer(s, "m", bytes_request("text", {caption}), "10");
  REQUIRE(res.status == 200);
  const auto served = decode(res);
  std::size_t compared = 0;
  for (const auto& [name, t] : (*here)[0])
    for (const auto& o : served.outputs)
      if (o.name == name) {
        REQUIRE(o.data.size() == t.nbytes());
        CHECK(std::memcmp(o.data.data(), t.data(), t.nbytes()) == 0);
        ++compared;
      }
  CHECK(compared == (*here)[0].size());
  // Unload: one version, then the rest; a missing one is not_found.
  REQUIRE(local.unload("m", "10"));
  CHECK(local.find("m") == local.find("m", "2"));
  CHECK(local.unload("m", "10").error().code == errc::not_found);
  REQUIRE(local.unload("m", ""));
  CHECK(local.find("m") == nullptr);
  CHECK(local.unload("m", "").error().code == errc::not_found);
  CHECK(local.load(model_config{.name = ""}, m10).error().code == errc::invalid_argument);
}

TEST_CASE("model repository: backends resolve by backend or platform, and a registered one replaces the placeholder") {
  repository_backends b;
  CHECK(b.resolve("", "jitembed", "f")->first == "jitembed");
  CHECK(b.resolve("torch_aoti", "", "f")->first == "torch_aoti");
  auto none = b.resolve("", "", "f");
  REQUIRE_FALSE(none);
  CHECK(none.error().code == errc::invalid_argument);
  auto clash = b.resolve("pytorch_libtorch", "jitembed", "f");
  REQUIRE_FALSE(clash);
  CHECK(clash.error().code == errc::invalid_argument);
  auto torch = b.resolve("pytorch_libtorch", "pytorch", "f");  // the two spellings agree, but nothing is linked
  REQUIRE_FALSE(torch);
  CHECK(torch.error().code == errc::unsupported_format);
  CHECK(torch.error().message.find("pytorch") != std::string::npos);

  temp_dir d("backends");
  write(d.path / "a" / "config.pbtxt", "platform: \"torch_aoti\"\nmax_batch_size: 2\nparameters { key: \"model\" value { string_value: \"text-embed\" } }\n"
                                       "parameters { key: \"text_dim\" value { string_value: \"8\" } }\n");
  fs::create_directories(d.path / "a" / "1");
  repository_options o;
  o.backends.add("torch_aoti", [](const models::backend_config& c) { return jitembed_backend_model::create(c); });
  auto repo = model_repository::open(d.path, o);
  REQUIRE(repo);
  auto s = service::create(server_config{}).value();
  auto r = repo->load(s, "a");
  REQUIRE_MESSAGE(r, (r ? "" : r.error().message));
  CHECK(s.loaded().size() == 1);
  CHECK_FALSE(model_repository::open(d.path / "nope"));
  CHECK(model_repository::open(d.path / "nope").error().code == errc::not_found);
}
