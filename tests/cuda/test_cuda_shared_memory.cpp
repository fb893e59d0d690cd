// Triton's CUDA shared-memory extension end to end on a GPU: this process allocates device memory and makes
// cudaIpcMemHandle_t's of it; a server with cuda::ipc_backend runs in ANOTHER process (CUDA refuses to open
// a handle in the process that made it): /proc/self/exe started again with JITEMBED_CUDA_SHM_SERVER set,
// which runs the server part from a static initializer, before doctest's main and before any CUDA call.
// Checked: an input read from a CUDA region, outputs written to one (bytes equal to the CPU socket path's),
// a bad handle answered 400 naming the region. Skips without a device.
#include <doctest/doctest.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include "jitembed/cuda/check.hpp"
#include "jitembed/cuda/ipc_backend.hpp"
#include "jitembed/net/kserve.hpp"
#include "jitembed/server.hpp"

extern char** environ;

namespace cuda_shm {

using namespace jitembed;
namespace ks = jitembed::net::kserve;
namespace http = jitembed::net::http;
using json = nlohmann::json;

constexpr const char* kServerEnv = "JITEMBED_CUDA_SHM_SERVER";
const std::vector<std::string_view> kRows = {"a photo of a cat", "", "a dog"};

server::server_config text_config() {
  server::server_config c;
  c.preprocess_threads = 1;
  server::model_config m;
  m.name = "text-embed";
  m.params = json{{"text_dim", 8}, {"text_max_length", 8}};
  c.models.push_back(m);
  return c;
}

struct reply {
  int status = 0;
  std::string body;
};

reply call(server::service& s, std::string method, std::string target, std::string body = {},
           http::header_list headers = {}) {
  auto p = std::make_shared<std::promise<reply>>();
  auto fut = p->get_future();
  http::request req;
  req.method = std::move(method);
  req.target = std::move(target);
  req.body = std::move(body);
  req.headers = std::move(headers);
  s.handle(std::move(req), [p](http::response r) {
    reply out{r.status, r.body};
    for (auto piece : r.pieces) out.body.append(reinterpret_cast<const char*>(piece.data()), piece.size());
    p->set_value(std::move(out));
  });
  return fut.get();
}

// An infer call of the "text" rows: in the body (input_params null) or where input_params say; outputs as given.
reply infer(server::service& s, std::int64_t rows, const ks::json& input_params,
            std::vector<ks::requested_output> outputs) {
  ks::infer_request r;
  r.id = "cuda-ipc";
  if (input_params.is_null()) {
    r.inputs.push_back(ks::infer_tensor::from_strings("text", {rows, 1}, kRows, true));
  } else {
    ks::infer_tensor t;
    t.name = "text";
    t.type = ks::datatype::bytes;
    t.shape = {rows, 1};
    t.parameters = input_params;
    r.inputs.push_back(std::move(t));
  }
  r.outputs = std::move(outputs);
  auto m = ks::encode_request(r).value();
  http::header_list h;
  if (m.header_length) h.emplace_back("Inference-Header-Content-Length", std::to_string(*m.header_length));
  return call(s, "POST", "/v2/models/text-embed/infer", m.flatten(), std::move(h));
}

ks::requested_output output(std::string name, const ks::json& params = nullptr) {
  ks::requested_output o;
  o.name = std::move(name);
  if (params.is_null())
    o.binary_data = true;
  else
    o.parameters = params;
  return o;
}

ks::json region(const std::string& name, std::uint64_t byte_size, std::uint64_t offset = 0) {
  ks::json p{{"shared_memory_region", name}, {"shared_memory_byte_size", byte_size}};
  if (offset) p["shared_memory_offset"] = offset;
  return p;
}

std::string base64(std::string_view in) {
  static constexpr char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < in.size(); i += 3) {
    unsigned v = std::uint8_t(in[i]) << 16;
    if (i + 1 < in.size()) v |= std::uint8_t(in[i + 1]) << 8;
    if (i + 2 < in.size()) v |= std::uint8_t(in[i + 2]);
    out += k[v >> 18];
    out += k[(v >> 12) & 63];
    out += i + 1 < in.size() ? k[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? k[v & 63] : '=';
  }
  return out;
}

std::string elements() {
  auto b = ks::encode_bytes_elements(kRows).value();
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// The server process: reads spec.json from `dir`, serves the requests the test needs through a service
// with the cudart backend, writes what it saw to result.json. Exit code 0 when it got that far.
int run_server(const std::string& dir) {
  std::ifstream in(dir + "/spec.json");
  const json spec = json::parse(in, nullptr, false);
  if (spec.is_discarded()) return 3;
  auto cfg = text_config();
  cfg.cuda_ipc = any_cuda_ipc_backend(cuda::ipc_backend{});
  auto s = server::service::create(cfg);
  if (!s) return 4;
  json out;
  out["metadata"] = json::parse(call(*s, "GET", "/v2").body);
  const auto reg = [&](const std::string& name, const std::string& handle_b64, std::uint64_t size) {
    auto r =
        call(*s, "POST", "/v2/cudasharedmemory/region/" + name + "/register",
             json{{"raw_handle", {{"b64", handle_b64}}}, {"device_id", spec["device"]}, {"byte_size", size}}.dump());
    return json{{"status", r.status}, {"body", r.body}};
  };
  out["register_in"] = reg("in", spec["input_handle"], spec["input_size"]);
  out["register_out"] = reg("out", spec["output_handle"], spec["output_size"]);
  out["register_bad"] = reg("bad", base64(std::string(cuda_ipc_handle_size, '\x5a')), 64);
  out["status"] = json::parse(call(*s, "GET", "/v2/cudasharedmemory/status").body);
  const std::uint64_t n = spec["elements_size"];
  auto r = infer(*s, 3, region("in", n, spec["input_offset"]),
                 {output("pooled", region("out", 96)), output("mask", region("out", 24, 200))});
  out["infer"] = json{{"status", r.status}, {"body", r.body}};
  // Past the end of the region: the same 400 as a system region, nothing copied.
  auto past = infer(*s, 3, region("in", n, 250), {});
  out["infer_past"] = json{{"status", past.status}, {"body", past.body}};
  out["unregister"] = call(*s, "POST", "/v2/cudasharedmemory/unregister").status;
  out["status_after"] = json::parse(call(*s, "GET", "/v2/cudasharedmemory/status").body);
  std::ofstream(dir + "/result.json") << out.dump();
  return 0;
}

// In the server process only: runs before main and never returns.
const bool kServerRan = [] {
  if (const char* dir = std::getenv(kServerEnv)) std::_Exit(run_server(dir));
  return false;
}();

bool have_device() {
  if (cuda::device_count() > 0) return true;
  std::printf("no CUDA device: skipping\n");
  return false;
}

// Starts this executable as the server process and waits for it (at most two minutes). Its exit status.
int run_server_process(const std::string& dir) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  env_strings.push_back(std::string(kServerEnv) + "=" + dir);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  char arg0[] = "test_cuda";
  char* argv[] = {arg0, nullptr};
  pid_t pid = 0;
  if (::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) return -1;
  auto waited = std::async(std::launch::async, [pid] {
    int st = 0;
    ::waitpid(pid, &st, 0);
    return st;
  });
  bool killed = false;
  if (waited.wait_for(std::chrono::minutes(2)) != std::future_status::ready) {
    ::kill(pid, SIGKILL);
    killed = true;
  }
  const int st = waited.get();
  if (killed) return -2;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -3;
}

std::string ipc_handle(void* p) {
  cudaIpcMemHandle_t h;
  JITEMBED_CUDA_CHECK(cudaIpcGetMemHandle(&h, p));
  return base64(std::string_view(reinterpret_cast<const char*>(&h), sizeof h));
}

}  // namespace cuda_shm

TEST_CASE("cuda shared memory: a server in another process reads inputs from and writes outputs to device memory") {
  using namespace cuda_shm;
  (void)kServerRan;
  if (!have_device()) return;

  // The expected bytes: the CPU socket path, in this process (no CUDA involved).
  std::string pooled, mask;
  {
    // The response with its binary section: decode_response needs the JSON header's length.
    auto s = server::service::create(text_config()).value();
    ks::infer_request r;
    r.inputs.push_back(ks::infer_tensor::from_strings("text", {3, 1}, kRows, true));
    r.outputs = {output("pooled"), output("mask")};
    auto m = ks::encode_request(r).value();
    auto p = std::make_shared<std::promise<http::response>>();
    auto fut = p->get_future();
    http::request req;
    req.method = "POST";
    req.target = "/v2/models/text-embed/infer";
    req.body = m.flatten();
    if (m.header_length) req.headers.emplace_back("Inference-Header-Content-Length", std::to_string(*m.header_length));
    s.handle(std::move(req), [p](http::response x) { p->set_value(std::move(x)); });
    auto resp = fut.get();
    REQUIRE(resp.status == 200);
    std::string flat = resp.body;
    for (auto piece : resp.pieces) flat.append(reinterpret_cast<const char*>(piece.data()), piece.size());
    const auto hl = http::find_header(resp.headers, "Inference-Header-Content-Length");
    const auto decoded = ks::decode_response(flat, std::stoull(std::string(hl))).value();
    const auto* po = decoded.find_output("pooled");
    const auto* ma = decoded.find_output("mask");
    REQUIRE(po);
    REQUIRE(ma);
    pooled.assign(reinterpret_cast<const char*>(po->data.data()), po->data.size());
    mask.assign(reinterpret_cast<const char*>(ma->data.data()), ma->data.size());
  }
  REQUIRE(pooled.size() == 96);
  REQUIRE(mask.size() == 24);

  int device = 0;
  JITEMBED_CUDA_CHECK(cudaGetDevice(&device));
  const std::string elems = elements();
  constexpr std::size_t in_size = 256, out_size = 1024, in_offset = 16;
  void* d_in = nullptr;
  void* d_out = nullptr;
  JITEMBED_CUDA_CHECK(cudaMalloc(&d_in, in_size));
  JITEMBED_CUDA_CHECK(cudaMalloc(&d_out, out_size));
  JITEMBED_CUDA_CHECK(cudaMemset(d_in, 0, in_size));
  JITEMBED_CUDA_CHECK(cudaMemset(d_out, 0xAB, out_size));
  JITEMBED_CUDA_CHECK(
      cudaMemcpy(static_cast<char*>(d_in) + in_offset, elems.data(), elems.size(), cudaMemcpyHostToDevice));
  JITEMBED_CUDA_CHECK(cudaDeviceSynchronize());

  const auto dir = std::filesystem::temp_directory_path() / ("jitembed-cuda-shm-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "spec.json") << json{
      {"device", device},          {"input_handle", ipc_handle(d_in)}, {"input_size", in_size},
      {"input_offset", in_offset}, {"elements_size", elems.size()},    {"output_handle", ipc_handle(d_out)},
      {"output_size", out_size}}.dump();
  const int rc = run_server_process(dir.string());
  REQUIRE(rc == 0);
  std::ifstream rin(dir / "result.json");
  const json res = json::parse(rin, nullptr, false);
  REQUIRE_FALSE(res.is_discarded());
  INFO(res.dump(2));

  const auto ext = res["metadata"]["extensions"].get<std::vector<std::string>>();
  CHECK(std::find(ext.begin(), ext.end(), "cuda_shared_memory") != ext.end());
  CHECK(res["register_in"]["status"] == 200);
  CHECK(res["register_out"]["status"] == 200);
  CHECK(res["register_bad"]["status"] == 400);
  const auto bad = res["register_bad"]["body"].get<std::string>();
  CHECK(bad.find("CUDA shared memory region 'bad': cannot open raw_handle on device " + std::to_string(device)) !=
        std::string::npos);
  CHECK(res["status"] == json::parse(R"([{"name":"in","device_id":)" + std::to_string(device) +
                                     R"(,"byte_size":256},{"name":"out","device_id":)" + std::to_string(device) +
                                     R"(,"byte_size":1024}])"));
  CHECK(res["infer"]["status"] == 200);
  CHECK(res["infer_past"]["status"] == 400);
  CHECK(res["infer_past"]["body"].get<std::string>().find(
            "run past the end of the 256-byte shared memory region 'in'") != std::string::npos);
  CHECK(res["unregister"] == 200);
  CHECK(res["status_after"] == json::array());

  std::string got(out_size, '\0');
  JITEMBED_CUDA_CHECK(cudaMemcpy(got.data(), d_out, out_size, cudaMemcpyDeviceToHost));
  CHECK(got.substr(0, 96) == pooled);
  CHECK(got.substr(200, 24) == mask);
  CHECK(got.substr(96, 104) == std::string(104, '\xAB'));  // untouched between the outputs
  CHECK(got.substr(224) == std::string(out_size - 224, '\xAB'));
  JITEMBED_CUDA_CHECK(cudaFree(d_in));
  JITEMBED_CUDA_CHECK(cudaFree(d_out));
  std::filesystem::remove_all(dir);
}
