// Triton's CUDA shared-memory extension without a GPU: the routes and their errors on a server without a
// CUDA backend, and with an in-memory fake backend (core/cuda_ipc.hpp) the registrations, one namespace of
// names with system regions, inputs read from and outputs written to "device" memory equal to the socket
// path's bytes, bounds, copy failures, and a region unregistered while a request holds it. The real
// backend (cudaIpcOpenMemHandle across processes) is tests/cuda/test_cuda_shared_memory.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "../batching/eventually.hpp"
#include "jitembed/core/cuda_ipc.hpp"
#include "jitembed/server/detail/base64.hpp"
#include "jitembed/server/shm/detail/registry.hpp"
#include "server_test_util.hpp"

namespace cuda_shm_tests {

using namespace server_test;
using jitembed::server::server_config;
using jitembed::server::service;
namespace sd = jitembed::server::detail;

// "Device memory of another process": allocations by handle, what the server opened and closed, and
// whether any copy left an open mapping.
struct fake_gpu {
  std::mutex mu;
  std::map<std::string, std::vector<std::byte>> allocations;  // handle bytes -> memory
  std::set<const std::byte*> open_bases;
  int opens = 0, closes = 0, devices = 1;
  bool fail_copies = false;
  bool copy_outside = false;  // a copy that did not lie inside an open mapping

  // A new allocation of `size` bytes filled with 0xAB; its 64-byte handle.
  std::string allocate(const std::string& id, std::size_t size) {
    std::string h = "fake-ipc-" + id;
    h.resize(jitembed::cuda_ipc_handle_size, '\0');
    std::lock_guard lock(mu);
    allocations[h].assign(size, std::byte{0xAB});
    return h;
  }
  std::vector<std::byte>& memory(const std::string& handle) { return allocations.at(handle); }
  void put(const std::string& handle, std::size_t at, std::string_view bytes) {
    std::memcpy(memory(handle).data() + at, bytes.data(), bytes.size());
  }
  std::string get(const std::string& handle, std::size_t at, std::size_t n) {
    return {reinterpret_cast<const char*>(memory(handle).data() + at), n};
  }
  bool is_open(const std::string& handle) {
    std::lock_guard lock(mu);
    return open_bases.contains(memory(handle).data());
  }
  bool inside(const std::byte* p, std::size_t n) {
    for (auto& [h, m] : allocations)
      if (open_bases.contains(m.data()) && p >= m.data() && p + n <= m.data() + m.size()) return true;
    return false;
  }
};

struct fake_backend {
  std::shared_ptr<fake_gpu> gpu;

  jitembed::result<jitembed::cuda_ipc_mapping> open(std::span<const std::byte> handle, int device) {
    std::lock_guard lock(gpu->mu);
    if (device >= gpu->devices)
      return jitembed::fail(jitembed::errc::invalid_argument, "cudaErrorInvalidDevice (invalid device ordinal)");
    auto it = gpu->allocations.find(std::string(reinterpret_cast<const char*>(handle.data()), handle.size()));
    if (it == gpu->allocations.end())
      return jitembed::fail(jitembed::errc::invalid_argument, "cudaErrorInvalidValue (invalid argument)");
    ++gpu->opens;
    gpu->open_bases.insert(it->second.data());
    return jitembed::cuda_ipc_mapping{it->second.data(), it->second.size()};
  }
  jitembed::result<void> copy_to_host(int, const void* src, std::span<std::byte> dst) {
    std::lock_guard lock(gpu->mu);
    if (gpu->fail_copies) return jitembed::fail(jitembed::errc::io_error, "cudaErrorIllegalAddress (fake)");
    if (!gpu->inside(static_cast<const std::byte*>(src), dst.size())) gpu->copy_outside = true;
    std::memcpy(dst.data(), src, dst.size());
    return {};
  }
  jitembed::result<void> copy_to_device(int, void* dst, std::span<const std::byte> src) {
    std::lock_guard lock(gpu->mu);
    if (gpu->fail_copies) return jitembed::fail(jitembed::errc::io_error, "cudaErrorIllegalAddress (fake)");
    if (!gpu->inside(static_cast<const std::byte*>(dst), src.size())) gpu->copy_outside = true;
    std::memcpy(dst, src.data(), src.size());
    return {};
  }
  void close(int, void* base) noexcept {
    std::lock_guard lock(gpu->mu);
    ++gpu->closes;
    gpu->open_bases.erase(static_cast<const std::byte*>(base));
  }
};
static_assert(jitembed::cuda_ipc_backend<fake_backend>);

std::string base64(std::string_view in) {
  static constexpr char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (std::uint8_t(in[i]) << 16) | (std::uint8_t(in[i + 1]) << 8) | std::uint8_t(in[i + 2]);
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], k[v & 63]};
  }
  if (i + 1 == in.size()) {
    const unsigned v = std::uint8_t(in[i]) << 16;
    out += {k[v >> 18], k[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const unsigned v = (std::uint8_t(in[i]) << 16) | (std::uint8_t(in[i + 1]) << 8);
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], '='};
  }
  return out;
}

std::string cuda_body(std::string_view handle, std::int64_t device, std::uint64_t byte_size) {
  return nlohmann::json{{"raw_handle", {{"b64", base64(handle)}}}, {"device_id", device}, {"byte_size", byte_size}}
      .dump();
}

reply register_cuda(service& s, const std::string& name, std::string_view handle, std::uint64_t byte_size,
                    std::int64_t device = 0) {
  return call(s, "POST", "/v2/cudasharedmemory/region/" + name + "/register", cuda_body(handle, device, byte_size));
}

std::string error_of(const reply& r) { return ks::parse_error_body(r.body).value_or("<no error body>"); }

std::string bytes_elements(const std::vector<std::string_view>& rows) {
  auto b = ks::encode_bytes_elements(rows).value();
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

ks::json shm_params(const std::string& region, std::uint64_t byte_size, std::uint64_t offset = 0) {
  ks::json p{{"shared_memory_region", region}, {"shared_memory_byte_size", byte_size}};
  if (offset) p["shared_memory_offset"] = offset;
  return p;
}

// A request whose BYTES input "text" ([rows, 1]) is in a region, and whose outputs are `outputs`.
encoded_request region_request(std::int64_t rows, const ks::json& input_params,
                               std::vector<ks::requested_output> outputs) {
  ks::infer_request r;
  r.id = "cuda-1";
  ks::infer_tensor t;
  t.name = "text";
  t.type = ks::datatype::bytes;
  t.shape = {rows, 1};
  t.parameters = input_params;
  r.inputs.push_back(std::move(t));
  r.outputs = std::move(outputs);
  auto m = ks::encode_request(r).value();
  encoded_request e;
  e.body = m.flatten();
  if (m.header_length) e.headers.emplace_back("Inference-Header-Content-Length", std::to_string(*m.header_length));
  return e;
}

ks::requested_output region_output(std::string name, const std::string& region, std::uint64_t byte_size,
                                   std::uint64_t offset = 0) {
  ks::requested_output o;
  o.name = std::move(name);
  o.parameters = shm_params(region, byte_size, offset);
  return o;
}

ks::requested_output body_output(std::string name) {
  ks::requested_output o;
  o.name = std::move(name);
  o.binary_data = true;
  return o;
}

std::string data_of(const ks::infer_tensor& t) { return {reinterpret_cast<const char*>(t.data.data()), t.data.size()}; }

const std::vector<std::string_view> kRows = {"a photo of a cat", "", "a dog"};

server_config with_fake(server_config c, const std::shared_ptr<fake_gpu>& gpu) {
  c.cuda_ipc = jitembed::any_cuda_ipc_backend(fake_backend{gpu});
  return c;
}

std::vector<std::string> extensions(service& s) {
  return nlohmann::json::parse(call(s, "GET", "/v2").body)["extensions"].get<std::vector<std::string>>();
}

TEST_CASE("CUDA shared memory: base64 of raw_handle") {
  const auto d = [](std::string_view t) -> std::optional<std::string> {
    auto r = sd::decode_base64(t);
    if (!r) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(r->data()), r->size());
  };
  CHECK(d("") == "");
  CHECK(d("Zg==") == "f");
  CHECK(d("Zm8=") == "fo");
  CHECK(d("Zm9v") == "foo");
  CHECK(d("Zm9vYmFy") == "foobar");
  CHECK(d(base64(std::string("\0\xff\x10 handle", 10))) == std::string("\0\xff\x10 handle", 10));
  CHECK_FALSE(d("Zm9"));       // not a multiple of 4
  CHECK_FALSE(d("Zm=v"));      // padding inside
  CHECK_FALSE(d("Zm9v!A=="));  // outside the alphabet
  CHECK_FALSE(d("Zh=="));      // bits left over
  CHECK_FALSE(d("===="));
}

TEST_CASE("CUDA shared memory: a server without a CUDA backend refuses registration and does not advertise it") {
  auto s = service::create(text_config()).value();
  const auto ext = extensions(s);
  CHECK(std::find(ext.begin(), ext.end(), "cuda_shared_memory") == ext.end());
  CHECK(std::find(ext.begin(), ext.end(), "system_shared_memory") != ext.end());

  auto r = register_cuda(s, "c", std::string(64, 'h'), 64);
  CHECK(r.status == 400);
  CHECK(ks::parse_error_code(r.body) == errc::invalid_argument);
  CHECK(error_of(r) == "CUDA shared memory: this server was built without CUDA");
  CHECK(call(s, "GET", "/v2/cudasharedmemory/status").body == "[]");
  auto unknown = call(s, "GET", "/v2/cudasharedmemory/region/c/status");
  CHECK(unknown.status == 404);
  CHECK(error_of(unknown) == "Unable to find CUDA shared memory region: 'c'");
  CHECK(call(s, "POST", "/v2/cudasharedmemory/region/c/unregister").status == 200);
  CHECK(call(s, "POST", "/v2/cudasharedmemory/unregister").status == 200);
  CHECK(call(s, "GET", "/v2/cudasharedmemory/region/c/register").status == 405);
  CHECK(call(s, "PUT", "/v2/cudasharedmemory/status").status == 405);

  sd::shared_memory_registry bare;
  CHECK_FALSE(bare.has_cuda());
  CHECK(bare.register_cuda_region("c", {}, 0, 8).error().message ==
        "CUDA shared memory: this server was built without CUDA");
}

TEST_CASE("CUDA shared memory: register, status, unregister, one namespace of names with system regions") {
  auto gpu = std::make_shared<fake_gpu>();
  auto s = service::create(with_fake(text_config(), gpu)).value();
  const auto ext = extensions(s);
  CHECK(std::find(ext.begin(), ext.end(), "cuda_shared_memory") != ext.end());

  const auto a = gpu->allocate("a", 256), b = gpu->allocate("b", 64);
  CHECK(call(s, "GET", "/v2/cudasharedmemory/status").body == "[]");
  REQUIRE(register_cuda(s, "in", a, 200).status == 200);
  REQUIRE(register_cuda(s, "out", b, 64).status == 200);
  CHECK(call(s, "GET", "/v2/cudasharedmemory/status").body ==
        R"([{"name":"in","device_id":0,"byte_size":200},{"name":"out","device_id":0,"byte_size":64}])");
  auto one = call(s, "GET", "/v2/cudasharedmemory/region/out/status");
  CHECK(one.status == 200);
  CHECK(one.body == R"([{"name":"out","device_id":0,"byte_size":64}])");
  CHECK(gpu->opens == 2);

  // One namespace: a CUDA name is taken for system regions too, and the other way round (Triton's message).
  auto dup = register_cuda(s, "in", b, 8);
  CHECK(dup.status == 400);
  CHECK(error_of(dup) == "shared memory region 'in' already in manager");
  auto sys = call(s, "POST", "/v2/systemsharedmemory/region/in/register",
                  R"({"key":"/jitembed-test-unused","offset":0,"byte_size":8})");
  CHECK(sys.status == 400);
  CHECK(error_of(sys) == "shared memory region 'in' already in manager");
  // Each extension's status and unregister see only its own regions.
  CHECK(call(s, "GET", "/v2/systemsharedmemory/status").body == "[]");
  CHECK(call(s, "GET", "/v2/systemsharedmemory/region/in/status").status == 404);
  CHECK(call(s, "POST", "/v2/systemsharedmemory/region/in/unregister").status == 200);
  CHECK(call(s, "POST", "/v2/systemsharedmemory/unregister").status == 200);
  CHECK(nlohmann::json::parse(call(s, "GET", "/v2/cudasharedmemory/status").body).size() == 2);
  CHECK(gpu->closes == 0);

  // Bad registrations: each a 400 naming the region, and no mapping left open.
  const auto bad = [&](const std::string& name, const std::string& body, const std::string& message) {
    auto r = call(s, "POST", "/v2/cudasharedmemory/region/" + name + "/register", body);
    CHECK(r.status == 400);
    CHECK(ks::parse_error_code(r.body) == errc::invalid_argument);
    CHECK(error_of(r) == message);
  };
  bad("x", "not json", "CUDA shared memory register request body is not a JSON object");
  bad("x", R"({"device_id":0,"byte_size":8})",
      R"(CUDA shared memory register request has no 'raw_handle': {"b64": string})");
  bad("x", R"({"raw_handle":"abc","device_id":0,"byte_size":8})",
      R"(CUDA shared memory register request has no 'raw_handle': {"b64": string})");
  bad("x", R"({"raw_handle":{"b64":"%%%%"},"device_id":0,"byte_size":8})",
      "CUDA shared memory region 'x': raw_handle.b64 is not base64");
  bad("x", R"({"raw_handle":{"b64":"Zm9v"},"byte_size":8})",
      "CUDA shared memory register request has no non-negative integer 'device_id'");
  bad("x", R"({"raw_handle":{"b64":"Zm9v"},"device_id":-1,"byte_size":8})",
      "CUDA shared memory register request has no non-negative integer 'device_id'");
  bad("x", R"({"raw_handle":{"b64":"Zm9v"},"device_id":0})",
      "CUDA shared memory register request has no non-negative integer 'byte_size'");
  bad("short", cuda_body("foo", 0, 8),
      "CUDA shared memory region 'short': raw_handle is 3 bytes, a cudaIpcMemHandle_t is 64");
  bad("bogus", cuda_body(std::string(64, 'z'), 0, 8),
      "CUDA shared memory region 'bogus': cannot open raw_handle on device 0: cudaErrorInvalidValue (invalid "
      "argument)");
  bad("dev", cuda_body(a, 3, 8),
      "CUDA shared memory region 'dev': cannot open raw_handle on device 3: cudaErrorInvalidDevice (invalid device "
      "ordinal)");
  bad("huge", cuda_body(a, 1ll << 40, 8), "CUDA shared memory region 'huge': device_id 1099511627776 is not a device");
  bad("zero", cuda_body(a, 0, 0), "CUDA shared memory region 'zero': byte_size is 0");
  bad("big", cuda_body(b, 0, 65),
      "CUDA shared memory region 'big': byte_size 65 is past the end of the 64-byte CUDA allocation");
  CHECK(gpu->opens == 3);  // "big" was opened, then closed at once
  CHECK(gpu->closes == 1);

  CHECK(call(s, "POST", "/v2/cudasharedmemory/region/in/unregister").status == 200);
  CHECK(call(s, "POST", "/v2/cudasharedmemory/region/never/unregister").status == 200);  // as Triton: no error
  CHECK(gpu->closes == 2);
  CHECK_FALSE(gpu->is_open(a));
  CHECK(call(s, "GET", "/v2/cudasharedmemory/status").body == R"([{"name":"out","device_id":0,"byte_size":64}])");
  REQUIRE(register_cuda(s, "in", a, 256).status == 200);  // the name is free again
  CHECK(call(s, "POST", "/v2/cudasharedmemory/unregister").status == 200);
  CHECK(call(s, "GET", "/v2/cudasharedmemory/status").body == "[]");
  CHECK(gpu->opens == gpu->closes);
  CHECK(gpu->open_bases.empty());
}

TEST_CASE("CUDA shared memory: inputs and outputs through device memory equal the socket path's bytes") {
  auto gpu = std::make_shared<fake_gpu>();
  auto s = service::create(with_fake(text_config(), gpu)).value();
  auto plain = infer(s, "text-embed", bytes_request("text", kRows, true, {body_output("pooled"), body_output("mask")}));
  REQUIRE(plain.status == 200);
  const auto ref = decode(plain);
  const std::string pooled = data_of(*ref.find_output("pooled"));
  const std::string mask = data_of(*ref.find_output("mask"));
  REQUIRE(pooled.size() == 3 * 8 * 4);

  const std::string elems = bytes_elements(kRows);
  const auto in = gpu->allocate("io-in", 1024), out = gpu->allocate("io-out", 1024);
  gpu->put(in, 36, elems);
  REQUIRE(register_cuda(s, "input", in, 512).status == 200);
  REQUIRE(register_cuda(s, "output", out, 512).status == 200);

  SUBCASE("input and both outputs in CUDA regions") {
    auto r =
        infer(s, "text-embed",
              region_request(3, shm_params("input", elems.size(), 36),
                             {region_output("pooled", "output", 96, 0), region_output("mask", "output", 100, 200)}));
    REQUIRE_MESSAGE(r.status == 200, r.body);
    CHECK(r.body == R"({"id":"cuda-1","model_name":"text-embed","model_version":"1","outputs":[)"
                    R"({"name":"mask","datatype":"UINT8","shape":[3,8]},)"
                    R"({"name":"pooled","datatype":"FP32","shape":[3,8]}]})");
    CHECK(gpu->get(out, 0, pooled.size()) == pooled);
    CHECK(gpu->get(out, 200, mask.size()) == mask);
    CHECK(gpu->get(out, 96, 1) == "\xAB");  // untouched between the outputs
  }
  SUBCASE("input in a CUDA region, outputs in the body") {
    auto r =
        infer(s, "text-embed",
              region_request(3, shm_params("input", elems.size(), 36), {body_output("pooled"), body_output("mask")}));
    REQUIRE(r.status == 200);
    CHECK(data_of(*decode(r).find_output("pooled")) == pooled);
    CHECK(data_of(*decode(r).find_output("mask")) == mask);
  }
  SUBCASE("a system-region request beside a CUDA output") {
    auto r = infer(s, "text-embed", bytes_request("text", kRows, true, {region_output("pooled", "output", 96, 300)}));
    REQUIRE(r.status == 200);
    CHECK(gpu->get(out, 300, pooled.size()) == pooled);
  }
  CHECK_FALSE(gpu->copy_outside);
}

TEST_CASE("CUDA shared memory: bad references and copy failures are 400 / errors naming the region") {
  auto gpu = std::make_shared<fake_gpu>();
  auto s = service::create(with_fake(text_config(), gpu)).value();
  const std::string elems = bytes_elements(kRows);
  const auto in = gpu->allocate("bad-in", 256), out = gpu->allocate("bad-out", 256);
  gpu->put(in, 0, elems);
  REQUIRE(register_cuda(s, "input", in, 128).status == 200);
  REQUIRE(register_cuda(s, "output", out, 50).status == 200);
  const auto bad = [&](const encoded_request& e, const std::string& message, errc code = errc::invalid_argument) {
    auto r = infer(s, "text-embed", e);
    CHECK(r.status == (code == errc::invalid_argument ? 400 : 500));
    CHECK(ks::parse_error_code(r.body) == code);
    CHECK(error_of(r) == message);
  };
  const auto in_ok = shm_params("input", elems.size());
  bad(region_request(3, shm_params("input", 8, 200), {}),
      "input 'text': shared_memory_offset 200 is past the end of the 128-byte shared memory region 'input'");
  bad(region_request(3, shm_params("input", 100, 64), {}),
      "input 'text': 100 bytes at shared_memory_offset 64 run past the end of the 128-byte shared memory region "
      "'input'");
  bad(region_request(3, in_ok, {region_output("pooled", "output", 96)}),
      "output 'pooled': 96 bytes at shared_memory_offset 0 run past the end of the 50-byte shared memory region "
      "'output'");
  bad(region_request(3, in_ok, {region_output("mask", "output", 10, 40)}),
      "output 'mask': 24 bytes do not fit shared_memory_byte_size 10 of shared memory region 'output'");
  CHECK(gpu->get(out, 0, 256) == std::string(256, '\xAB'));  // nothing written

  gpu->fail_copies = true;
  auto r = infer(s, "text-embed", region_request(3, in_ok, {}));
  CHECK(ks::parse_error_code(r.body) == errc::io_error);
  CHECK(error_of(r) ==
        "input 'text': reading CUDA shared memory region 'input' failed: cudaErrorIllegalAddress (fake)");
  auto w = infer(s, "text-embed", bytes_request("text", kRows, true, {region_output("mask", "output", 24)}));
  CHECK(ks::parse_error_code(w.body) == errc::io_error);
  CHECK(error_of(w) ==
        "output 'mask': writing CUDA shared memory region 'output' failed: cudaErrorIllegalAddress (fake)");
  gpu->fail_copies = false;
  CHECK(infer(s, "text-embed", region_request(3, in_ok, {region_output("mask", "output", 24)})).status == 200);
  CHECK_FALSE(gpu->copy_outside);
}

TEST_CASE("CUDA shared memory: a region unregistered while a request holds it is closed when the request ends") {
  auto gpu = std::make_shared<fake_gpu>();
  auto s = service::create(with_fake(text_config(/*sleep_us=*/300000), gpu)).value();
  const std::string elems = bytes_elements(kRows);
  const auto in = gpu->allocate("held-in", 256), out = gpu->allocate("held-out", 256);
  gpu->put(in, 0, elems);
  REQUIRE(register_cuda(s, "input", in, 256).status == 200);
  REQUIRE(register_cuda(s, "output", out, 256).status == 200);
  const auto e = region_request(3, shm_params("input", elems.size()), {region_output("pooled", "output", 96)});
  auto fut = send(s, "POST", "/v2/models/text-embed/infer", e.body, e.headers);  // its regions are held by now
  CHECK(call(s, "POST", "/v2/cudasharedmemory/unregister").status == 200);
  CHECK(call(s, "GET", "/v2/cudasharedmemory/status").body == "[]");
  CHECK(gpu->is_open(out));  // the request in flight still writes into it
  REQUIRE(fut.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  REQUIRE(fut.get().status == 200);
  // The request lets go of its regions as it ends, which is just after its answer is sent.
  CHECK(jitembed::test::eventually([&] { return !gpu->is_open(out) && !gpu->is_open(in); }));
  CHECK(gpu->opens == 2);
  CHECK(gpu->closes == 2);
  const auto plain = decode(infer(s, "text-embed", bytes_request("text", kRows, true, {body_output("pooled")})));
  CHECK(gpu->get(out, 0, 96) == data_of(*plain.find_output("pooled")));
  CHECK(error_of(infer(s, "text-embed", e)) == "input 'text': shared memory region 'input' is not registered");
}

TEST_CASE("CUDA shared memory: the registry directly (what the gRPC front end calls)") {
  auto gpu = std::make_shared<fake_gpu>();
  {
    sd::shared_memory_registry shm{jitembed::any_cuda_ipc_backend(fake_backend{gpu})};
    CHECK(shm.has_cuda());
    const auto h = gpu->allocate("direct", 128);
    const auto raw = std::as_bytes(std::span(h.data(), h.size()));
    REQUIRE(shm.register_cuda_region("c", raw, 0, 128));
    CHECK(shm.register_cuda_region("c", raw, 0, 128).error().message == "shared memory region 'c' already in manager");
    CHECK(shm.register_cuda_region("", raw, 0, 128).error().message == "shared memory region name is empty");
    const auto st = shm.status({}, sd::shared_memory_kind::cuda).value();
    REQUIRE(st.size() == 1);
    CHECK((st[0].name == "c" && st[0].device_id == 0 && st[0].byte_size == 128 && !st[0].key && !st[0].offset));
    CHECK(shm.status("c").code() == errc::not_found);  // not a system region
    shm.unregister_region("c");                        // the system kind: not this region
    CHECK(shm.size() == 1);
    auto held = shm.find("c", "input 'x'").value();
    std::string bytes(16, '\0');
    gpu->put(h, 100, "0123456789abcdef");
    REQUIRE(held->read(100, std::as_writable_bytes(std::span(bytes.data(), bytes.size())), "input 'x'"));
    CHECK(bytes == "0123456789abcdef");
    CHECK(held->read(120, std::as_writable_bytes(std::span(bytes.data(), bytes.size())), "input 'x'").error().message ==
          "input 'x': 16 bytes at shared_memory_offset 120 run past the end of the 128-byte shared memory region 'c'");
    shm.unregister_region("c", sd::shared_memory_kind::cuda);
    CHECK(shm.size() == 0);
    CHECK(gpu->closes == 0);  // `held` keeps it open
    held.reset();
    CHECK(gpu->closes == 1);
    REQUIRE(shm.register_cuda_region("d", raw, 0, 64));
  }
  CHECK(gpu->closes == 2);  // the registry's destructor closes what is left
  CHECK_FALSE(gpu->copy_outside);
}

}  // namespace cuda_shm_tests
