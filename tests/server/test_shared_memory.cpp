// Triton's system shared-memory extension: register / status / unregister over HTTP, inputs read from and
// outputs written to POSIX shared-memory objects equal to the socket path's bytes, every bad case (a
// region not registered, out of bounds, too small, truncated by its owner), a region unregistered while a
// request uses it, and the pipeline's own overload (what a gRPC front end calls).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "jitembed/models/reference_factory.hpp"
#include "jitembed/server/detail/pipeline.hpp"
#include "jitembed/server/shm/detail/transfer.hpp"
#include "server_test_util.hpp"

using namespace server_test;
using jitembed::server::server_config;
using jitembed::server::service;

namespace shm_tests {

namespace sd = jitembed::server::detail;

// A POSIX shared-memory object as tritonclient's create_shared_memory_region makes one; unlinked at the end.
struct shm_object {
  std::string key;
  std::size_t size = 0;
  int fd = -1;
  std::byte* map = nullptr;

  shm_object(std::string name, std::size_t n)
      : key("/jitembed-test-" + std::to_string(::getpid()) + "-" + name), size(n) {
    ::shm_unlink(key.c_str());
    fd = ::shm_open(key.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(n)) == 0);
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED);
    map = static_cast<std::byte*>(p);
    std::memset(map, 0xAB, n);
  }
  shm_object(const shm_object&) = delete;
  shm_object& operator=(const shm_object&) = delete;
  ~shm_object() {
    if (map) ::munmap(map, size);
    if (fd >= 0) ::close(fd);
    ::shm_unlink(key.c_str());
  }
  void put(std::size_t at, std::string_view bytes) {
    REQUIRE(at + bytes.size() <= size);
    std::memcpy(map + at, bytes.data(), bytes.size());
  }
  std::string get(std::size_t at, std::size_t n) const { return {reinterpret_cast<const char*>(map + at), n}; }
  // Shrinks the object under the server (its mapping here is not touched past the new end).
  void truncate(std::size_t n) { REQUIRE(::ftruncate(fd, static_cast<off_t>(n)) == 0); }
};

std::string register_body(const shm_object& o, std::uint64_t offset, std::uint64_t byte_size) {
  return nlohmann::json{{"key", o.key}, {"offset", offset}, {"byte_size", byte_size}}.dump();
}

reply register_region(service& s, const std::string& name, const shm_object& o, std::uint64_t offset,
                      std::uint64_t byte_size, http::header_list headers = {}) {
  return call(s, "POST", "/v2/systemsharedmemory/region/" + name + "/register", register_body(o, offset, byte_size),
              std::move(headers));
}

std::string error_of(const reply& r) { return ks::parse_error_body(r.body).value_or("<no error body>"); }

// The serialized BYTES elements of `rows` (uint32-LE length + bytes each).
std::string bytes_elements(const std::vector<std::string_view>& rows) {
  auto b = ks::encode_bytes_elements(rows).value();
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

ks::json shm_params(const std::string& region, std::uint64_t byte_size, std::uint64_t offset = 0) {
  ks::json p{{"shared_memory_region", region}, {"shared_memory_byte_size", byte_size}};
  if (offset) p["shared_memory_offset"] = offset;
  return p;
}

// A request whose BYTES input "text" of `rows` rows is in region `region`, and whose outputs are `outputs`.
encoded_request shm_request(std::int64_t rows, const ks::json& input_params,
                            std::vector<ks::requested_output> outputs) {
  ks::infer_request r;
  r.id = "shm-1";
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

ks::requested_output shm_output(std::string name, const std::string& region, std::uint64_t byte_size,
                                std::uint64_t offset = 0) {
  ks::requested_output o;
  o.name = std::move(name);
  o.parameters = shm_params(region, byte_size, offset);
  return o;
}

ks::requested_output binary_output(std::string name) {
  ks::requested_output o;
  o.name = std::move(name);
  o.binary_data = true;
  return o;
}

std::string data_of(const ks::infer_tensor& t) { return {reinterpret_cast<const char*>(t.data.data()), t.data.size()}; }

const std::vector<std::string_view> kRows = {"a photo of a cat", "", "a dog"};

}  // namespace shm_tests

using namespace shm_tests;

TEST_CASE("shared memory: register, status, unregister over HTTP (Triton's routes and JSON)") {
  auto s = service::create(text_config()).value();
  shm_object a("reg-a", 256), b("reg-b", 64);

  const auto meta = nlohmann::json::parse(call(s, "GET", "/v2").body);
  const auto ext = meta["extensions"].get<std::vector<std::string>>();
  CHECK(std::find(ext.begin(), ext.end(), "system_shared_memory") != ext.end());

  CHECK(call(s, "GET", "/v2/systemsharedmemory/status").body == "[]");
  REQUIRE(register_region(s, "in", a, 16, 200).status == 200);
  REQUIRE(register_region(s, "out", b, 0, 64).status == 200);
  const auto all = nlohmann::json::parse(call(s, "GET", "/v2/systemsharedmemory/status").body);
  CHECK(all == nlohmann::json::parse(R"([{"name":"in","key":")" + a.key +
                                     R"(","offset":16,"byte_size":200},{"name":"out","key":")" + b.key +
                                     R"(","offset":0,"byte_size":64}])"));
  auto one = call(s, "GET", "/v2/systemsharedmemory/region/out/status");
  CHECK(one.status == 200);
  CHECK(one.body == R"([{"name":"out","key":")" + b.key + R"(","offset":0,"byte_size":64}])");

  // A name registered twice: Triton's message; the first registration stays.
  auto dup = register_region(s, "in", b, 0, 8);
  CHECK(dup.status == 400);
  CHECK(error_of(dup) == "shared memory region 'in' already in manager");
  CHECK(ks::parse_error_code(dup.body) == errc::invalid_argument);

  // Bad registrations: each a 400 naming the region.
  auto past = register_region(s, "big", b, 8, 64);
  CHECK(past.status == 400);
  CHECK(error_of(past) ==
        "shared memory region 'big': offset 8 + byte_size 64 is past the end of the 64-byte object '" + b.key + "'");
  auto missing = call(s, "POST", "/v2/systemsharedmemory/region/nokey/register",
                      R"({"key":"/jitembed-test-no-such-object","offset":0,"byte_size":8})");
  CHECK(missing.status == 400);
  CHECK(
      error_of(missing) ==
      "shared memory region 'nokey': cannot open shared memory object '/jitembed-test-no-such-object': No such file or "
      "directory");
  auto slash = call(s, "POST", "/v2/systemsharedmemory/region/slash/register",
                    R"({"key":"/../etc/passwd","offset":0,"byte_size":8})");
  CHECK(slash.status == 400);
  CHECK(error_of(slash) ==
        "shared memory region 'slash': key '/../etc/passwd' is not a shared memory object name ('/name')");
  CHECK(error_of(register_region(s, "zero", b, 0, 0)) == "shared memory region 'zero': byte_size is 0");
  // A symbolic link in the shared-memory folder is not followed (the server's writes stay in shm objects).
  {
    const std::string link = "/jitembed-test-" + std::to_string(::getpid()) + "-link";
    ::unlink(("/dev/shm" + link).c_str());
    REQUIRE(::symlink(("/dev/shm" + b.key).c_str(), ("/dev/shm" + link).c_str()) == 0);
    auto linked = call(s, "POST", "/v2/systemsharedmemory/region/link/register",
                       nlohmann::json{{"key", link}, {"offset", 0}, {"byte_size", 8}}.dump());
    ::unlink(("/dev/shm" + link).c_str());
    CHECK(linked.status == 400);
    CHECK(error_of(linked) == "shared memory region 'link': cannot open shared memory object '" + link +
                                  "': Too many levels of symbolic links");
  }
  auto no_key = call(s, "POST", "/v2/systemsharedmemory/region/x/register", R"({"offset":0,"byte_size":8})");
  CHECK(no_key.status == 400);
  CHECK(error_of(no_key) == "shared memory register request has no string 'key'");
  CHECK(error_of(call(s, "POST", "/v2/systemsharedmemory/region/x/register", "not json")) ==
        "shared memory register request body is not a JSON object");
  CHECK(error_of(call(s, "POST", "/v2/systemsharedmemory/region/x/register", R"({"key":"/k","byte_size":-1})")) ==
        "shared memory register request has no non-negative integer 'byte_size'");
  CHECK(nlohmann::json::parse(call(s, "GET", "/v2/systemsharedmemory/status").body).size() == 2);

  auto unknown = call(s, "GET", "/v2/systemsharedmemory/region/nope/status");
  CHECK(unknown.status == 404);
  CHECK(error_of(unknown) == "Unable to find system shared memory region: 'nope'");
  CHECK(call(s, "GET", "/v2/systemsharedmemory/region/in/register").status == 405);

  CHECK(call(s, "POST", "/v2/systemsharedmemory/region/in/unregister").status == 200);
  CHECK(call(s, "POST", "/v2/systemsharedmemory/region/never/unregister").status == 200);  // as Triton: no error
  CHECK(call(s, "GET", "/v2/systemsharedmemory/status").body ==
        R"([{"name":"out","key":")" + b.key + R"(","offset":0,"byte_size":64}])");
  REQUIRE(register_region(s, "in", a, 0, 256).status == 200);  // the name is free again
  CHECK(call(s, "POST", "/v2/systemsharedmemory/unregister").status == 200);
  CHECK(call(s, "GET", "/v2/systemsharedmemory/status").body == "[]");
}

TEST_CASE("shared memory: bearer auth applies to the routes") {
  server_config c = text_config();
  c.auth_token = "s3cret";
  auto s = service::create(c).value();
  shm_object a("auth", 64);
  CHECK(register_region(s, "r", a, 0, 64).status == 401);
  CHECK(call(s, "GET", "/v2/systemsharedmemory/status").status == 401);
  CHECK(call(s, "POST", "/v2/systemsharedmemory/unregister").status == 401);
  CHECK(register_region(s, "r", a, 0, 64, {{"Authorization", "Bearer s3cret"}}).status == 200);
  CHECK(call(s, "GET", "/v2/systemsharedmemory/status", {}, {{"Authorization", "Bearer s3cret"}}).status == 200);
}

TEST_CASE("shared memory: BYTES input and outputs through regions equal the socket path's bytes") {
  auto s = service::create(text_config()).value();
  // The socket path: the same rows in the body, outputs binary.
  auto plain =
      infer(s, "text-embed", bytes_request("text", kRows, true, {binary_output("pooled"), binary_output("mask")}));
  REQUIRE(plain.status == 200);
  const auto ref = decode(plain);
  const std::string pooled = data_of(*ref.find_output("pooled"));
  const std::string mask = data_of(*ref.find_output("mask"));
  REQUIRE(pooled.size() == 3 * 8 * 4);
  REQUIRE(mask.size() == 3 * 8);

  const std::string elems = bytes_elements(kRows);
  shm_object in("io-in", 4096), out("io-out", 4096);
  in.put(100, elems);  // the region starts at 64 in the object; the input at offset 36 into the region
  REQUIRE(register_region(s, "input", in, 64, 1024).status == 200);
  REQUIRE(register_region(s, "output", out, 128, 512).status == 200);

  SUBCASE("input and both outputs in regions") {
    auto r = infer(s, "text-embed",
                   shm_request(3, shm_params("input", elems.size(), 36),
                               {shm_output("pooled", "output", 96, 0), shm_output("mask", "output", 100, 200)}));
    REQUIRE_MESSAGE(r.status == 200, r.body);
    // No binary section: every output travelled through its region.
    CHECK(r.header("Inference-Header-Content-Length").empty());
    // As Triton's HTTP endpoint: an output in a region is name, datatype and shape, nothing else.
    CHECK(r.body == R"({"id":"shm-1","model_name":"text-embed","model_version":"1","outputs":[)"
                    R"({"name":"mask","datatype":"UINT8","shape":[3,8]},)"
                    R"({"name":"pooled","datatype":"FP32","shape":[3,8]}]})");
    CHECK(out.get(128, pooled.size()) == pooled);
    CHECK(out.get(128 + 200, mask.size()) == mask);
    CHECK(out.get(128 + 96, 1) == "\xAB");  // untouched between the outputs
    CHECK(out.get(127, 1) == "\xAB");       // nor before the region
  }
  SUBCASE("input in a region, outputs in the body") {
    auto r =
        infer(s, "text-embed",
              shm_request(3, shm_params("input", elems.size(), 36), {binary_output("pooled"), binary_output("mask")}));
    REQUIRE(r.status == 200);
    const auto resp = decode(r);
    CHECK(data_of(*resp.find_output("pooled")) == pooled);
    CHECK(data_of(*resp.find_output("mask")) == mask);
  }
  SUBCASE("input in the body, one output in a region and one in the body") {
    auto r = infer(s, "text-embed",
                   bytes_request("text", kRows, true, {shm_output("pooled", "output", 512), binary_output("mask")}));
    REQUIRE(r.status == 200);
    const auto hl = std::stoull(r.header("Inference-Header-Content-Length"));
    const auto header = nlohmann::json::parse(r.body.substr(0, hl));
    CHECK(header["outputs"][1] == nlohmann::json{{"name", "pooled"}, {"datatype", "FP32"}, {"shape", {3, 8}}});
    CHECK(header["outputs"][0]["parameters"]["binary_data_size"] == mask.size());
    CHECK(r.body.substr(hl) == mask);  // the binary section holds only the output in the body
    CHECK(out.get(128, pooled.size()) == pooled);
  }
  SUBCASE("a request without outputs listed gets every output in the body") {
    auto r = infer(s, "text-embed", shm_request(3, shm_params("input", elems.size(), 36), {}));
    REQUIRE(r.status == 200);
    CHECK(decode(r).outputs.size() == 3);
  }
}

TEST_CASE("shared memory: bad references are 400 naming the region, and nothing is written past a region") {
  auto s = service::create(text_config()).value();
  const std::string elems = bytes_elements(kRows);
  shm_object in("bad-in", 256), out("bad-out", 256);
  in.put(0, elems);
  REQUIRE(register_region(s, "input", in, 0, 128).status == 200);
  REQUIRE(register_region(s, "output", out, 64, 50).status == 200);  // 50 bytes: smaller than pooled (96)
  const auto bad = [&](const encoded_request& e, const std::string& message, errc code = errc::invalid_argument) {
    auto r = infer(s, "text-embed", e);
    CHECK(r.status == 400);
    CHECK(ks::parse_error_code(r.body) == code);
    CHECK(error_of(r) == message);
  };
  const auto in_ok = shm_params("input", elems.size());

  bad(shm_request(3, shm_params("nope", elems.size()), {}),
      "input 'text': shared memory region 'nope' is not registered");
  bad(shm_request(3, shm_params("input", 8, 200), {}),
      "input 'text': shared_memory_offset 200 is past the end of the 128-byte shared memory region 'input'");
  bad(shm_request(3, shm_params("input", 100, 64), {}),
      "input 'text': 100 bytes at shared_memory_offset 64 run past the end of the 128-byte shared memory region "
      "'input'");
  bad(shm_request(3, shm_params("input", elems.size() - 1), {}),
      "input 'text' (shared memory region 'input'): BYTES element 2 at offset 24: length 5 runs past the end of the "
      "32-byte buffer",
      errc::truncated);
  bad(shm_request(2, in_ok, {}),
      "input 'text' (shared memory region 'input'): holds more than the 2 BYTES elements of shape [2,1]");
  bad(shm_request(3, in_ok, {shm_output("pooled", "nope", 96)}),
      "output 'pooled': shared memory region 'nope' is not registered");
  bad(shm_request(3, in_ok, {shm_output("pooled", "output", 96)}),
      "output 'pooled': 96 bytes at shared_memory_offset 0 run past the end of the 50-byte shared memory region "
      "'output'");
  bad(shm_request(3, in_ok, {shm_output("pooled", "output", 8, 51)}),
      "output 'pooled': shared_memory_offset 51 is past the end of the 50-byte shared memory region 'output'");
  // Fits the region, not the output: answered after the model ran, nothing written at all.
  bad(shm_request(3, in_ok, {shm_output("mask", "output", 10, 40)}),
      "output 'mask': 24 bytes do not fit shared_memory_byte_size 10 of shared memory region 'output'");
  CHECK(out.get(0, 256) == std::string(256, '\xAB'));

  // Fixed-size datatype with a byte size other than the shape's.
  {
    ks::infer_request r;
    ks::infer_tensor t;
    t.name = "text";
    t.type = ks::datatype::fp32;
    t.shape = {2};
    t.parameters = shm_params("input", 12);
    r.inputs.push_back(std::move(t));
    const auto m = ks::encode_request(r).value();
    auto rep = call(s, "POST", "/v2/models/text-embed/infer", m.flatten());
    CHECK(rep.status == 400);
    CHECK(error_of(rep) == "input 'text': shared_memory_byte_size 12 does not match shape [2] of FP32");
  }
  // The service still serves.
  CHECK(infer(s, "text-embed", shm_request(3, in_ok, {})).status == 200);
}

TEST_CASE("shared memory: an object truncated by its owner after registration is a 400, and the server goes on") {
  auto s = service::create(text_config()).value();
  const std::string elems = bytes_elements(kRows);
  shm_object in("trunc-in", 4096), out("trunc-out", 4096);
  in.put(1024, elems);
  REQUIRE(register_region(s, "input", in, 1024, 1024).status == 200);
  REQUIRE(register_region(s, "output", out, 1024, 1024).status == 200);
  REQUIRE(
      infer(s, "text-embed", shm_request(3, shm_params("input", elems.size()), {shm_output("pooled", "output", 96)}))
          .status == 200);

  in.truncate(1030);  // the input's bytes now end past the object's end
  auto r = infer(s, "text-embed", shm_request(3, shm_params("input", elems.size()), {}));
  CHECK(r.status == 400);
  CHECK(error_of(r) == "input 'text': shared memory region 'input': its object '" + in.key +
                           "' is now 1030 bytes, short of the " + std::to_string(elems.size()) +
                           " bytes at 1024 (truncated by its owner after registration)");

  out.truncate(512);  // the whole region is past the end now
  auto w = infer(s, "text-embed", bytes_request("text", kRows, true, {shm_output("pooled", "output", 96)}));
  CHECK(w.status == 400);
  CHECK(error_of(w) ==
        "output 'pooled': shared memory region 'output': its object '" + out.key +
            "' is now 512 bytes, short of the 96 bytes at 1024 (truncated by its owner after registration)");
  struct stat st {};
  REQUIRE(::fstat(out.fd, &st) == 0);
  CHECK(st.st_size == 512);  // the server did not grow it back

  // The server is unharmed: the socket path and fresh regions work.
  CHECK(infer(s, "text-embed", bytes_request("text", kRows)).status == 200);
  shm_object fresh("trunc-fresh", 256);
  fresh.put(0, elems);
  REQUIRE(register_region(s, "fresh", fresh, 0, 256).status == 200);
  CHECK(infer(s, "text-embed",
              shm_request(3, shm_params("fresh", elems.size()), {shm_output("pooled", "fresh", 96, 128)}))
            .status == 200);
}

TEST_CASE("shared memory: a region unregistered while a request uses it stays open until the request ends") {
  auto s = service::create(text_config(/*sleep_us=*/300000)).value();
  const std::string elems = bytes_elements(kRows);
  shm_object in("inuse-in", 256), out("inuse-out", 256);
  in.put(0, elems);
  REQUIRE(register_region(s, "input", in, 0, 256).status == 200);
  REQUIRE(register_region(s, "output", out, 0, 256).status == 200);
  const auto e = shm_request(3, shm_params("input", elems.size()), {shm_output("pooled", "output", 96)});
  // send() returns once the service took the request: its regions are held by then.
  auto fut = send(s, "POST", "/v2/models/text-embed/infer", e.body, e.headers);
  CHECK(call(s, "POST", "/v2/systemsharedmemory/unregister").status == 200);
  CHECK(call(s, "GET", "/v2/systemsharedmemory/status").body == "[]");
  REQUIRE(fut.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  const auto r = fut.get();
  REQUIRE(r.status == 200);
  const auto plain = decode(infer(s, "text-embed", bytes_request("text", kRows, true, {binary_output("pooled")})));
  CHECK(out.get(0, 96) == data_of(*plain.find_output("pooled")));
  // A new request naming the unregistered region is refused.
  CHECK(error_of(infer(s, "text-embed", e)) == "input 'text': shared memory region 'input' is not registered");
}

TEST_CASE("shared memory: the pipeline's decoded-request overload (a gRPC front end) and write_shared_memory_outputs") {
  server_config cfg;
  cfg.preprocess_threads = 1;
  sd::model_registry registry(jitembed::models::reference_factory);
  sd::shared_memory_registry shm;
  sd::inference_pipeline pipeline(registry, cfg, &shm);
  REQUIRE(registry.load(
      jitembed::server::model_config{.name = "text-embed", .params = {{"text_dim", 8}, {"text_max_length", 8}}}));
  const std::string elems = bytes_elements(kRows);
  shm_object in("pipe-in", 256), out("pipe-out", 256);
  in.put(0, elems);
  REQUIRE(shm.register_region("input", in.key, 0, 256));
  REQUIRE(shm.register_region("output", out.key, 0, 256));
  CHECK(shm.register_region("input", in.key, 0, 256).error().message ==
        "shared memory region 'input' already in manager");

  const auto run = [&](ks::infer_request req) {
    std::promise<jitembed::result<sd::infer_output>> p;
    auto fut = p.get_future();
    pipeline.infer("text-embed", "", std::move(req), nullptr,
                   [&p](jitembed::result<sd::infer_output> r) { p.set_value(std::move(r)); });
    REQUIRE(fut.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    return fut.get();
  };
  ks::infer_request req;
  ks::infer_tensor t;
  t.name = "text";
  t.type = ks::datatype::bytes;
  t.shape = {3};
  t.parameters = shm_params("input", elems.size());
  req.inputs.push_back(t);
  req.outputs.push_back(shm_output("pooled", "output", 96, 8));
  auto r = run(req);
  REQUIRE(r);
  const auto* pooled = (*r)->find_output("pooled");
  REQUIRE(pooled);
  CHECK(pooled->data.empty());
  // The protocol-neutral answer says where the output went (the gRPC encoder's input; HTTP writes none of it).
  CHECK(pooled->parameters ==
        ks::json{{"shared_memory_region", "output"}, {"shared_memory_byte_size", 96}, {"shared_memory_offset", 8}});

  // The same rows in the request itself; the response's outputs then written by the protocol-neutral function.
  ks::infer_request plain;
  plain.inputs.push_back(ks::infer_tensor::from_strings("text", {3}, kRows));
  plain.outputs.push_back(binary_output("pooled"));
  auto pr = run(plain);
  REQUIRE(pr);
  CHECK(out.get(8, 96) == data_of(*(*pr)->find_output("pooled")));
  const std::vector<ks::requested_output> to_region = {shm_output("pooled", "output", 96, 128)};
  auto written = sd::write_shared_memory_outputs(shm, *pr, to_region);
  REQUIRE(written);
  CHECK((*written)->find_output("pooled")->data.empty());
  CHECK(out.get(128, 96) == data_of(*(*pr)->find_output("pooled")));  // the original response is unchanged
  const std::vector<ks::requested_output> too_small = {shm_output("pooled", "output", 95, 128)};
  CHECK(sd::write_shared_memory_outputs(shm, *pr, too_small).error().message ==
        "output 'pooled': 96 bytes do not fit shared_memory_byte_size 95 of shared memory region 'output'");

  // The inputs read from regions are bounded like a body (protocol_limits::max_body_bytes), before any read.
  {
    server_config small_cfg = cfg;
    small_cfg.protocol.max_body_bytes = 16;
    sd::inference_pipeline limited(registry, small_cfg, &shm);
    std::promise<jitembed::result<sd::infer_output>> p;
    auto fut = p.get_future();
    limited.infer("text-embed", "", req, nullptr,
                  [&p](jitembed::result<sd::infer_output> x) { p.set_value(std::move(x)); });
    REQUIRE(fut.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    const auto r = fut.get();
    CHECK(r.code() == errc::limit_exceeded);
    CHECK(r.error().message ==
          "input 'text': shared_memory_byte_size 33 brings the inputs in shared memory to 33 bytes > "
          "max_body_bytes 16");
  }

  // A pipeline without a shared-memory registry refuses requests naming regions.
  sd::inference_pipeline bare(registry, cfg);
  std::promise<jitembed::result<sd::infer_output>> p;
  auto fut = p.get_future();
  bare.infer("text-embed", "", req, nullptr, [&p](jitembed::result<sd::infer_output> x) { p.set_value(std::move(x)); });
  REQUIRE(fut.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  CHECK(fut.get().error().message == "the shared memory extension is not enabled in this service");
  registry.shutdown();
}
