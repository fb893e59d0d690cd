// jit_client against a real Triton Inference Server (tests/triton/README.md): ctest triton/client runs this
// through run_tritonserver.py, which sets JITEMBED_TRITON_URL. The models compute a function of each row's
// bytes that is exact in float32 / float16; it is recomputed here and compared bit for bit.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "batching/eventually.hpp"
#include "jitembed/client/jit_client.hpp"

namespace {

using namespace jitembed;
using jitembed::client::embed_request;
using jitembed::client::embed_result;
using jitembed::client::jit_client;

constexpr std::size_t kDim = 8;

std::string triton_url() {
  const char* u = std::getenv("JITEMBED_TRITON_URL");
  return u ? u : "";
}

// The models' function: S_j = sum_i b[i] * (i + 1 + j); out[j] = (S_j mod M) / 2^K.
std::vector<float> reference(const std::string& row, std::uint64_t modulus, unsigned scale_log2) {
  std::vector<float> out(kDim);
  for (std::size_t j = 0; j < kDim; ++j) {
    std::uint64_t s = 0;
    for (std::size_t i = 0; i < row.size(); ++i)
      s = (s + static_cast<std::uint64_t>(static_cast<unsigned char>(row[i])) * ((i + 1 + j) % modulus)) % modulus;
    out[j] = static_cast<float>(s) / static_cast<float>(1u << scale_log2);
  }
  return out;
}

float half_to_float(std::uint16_t h) {  // IEEE binary16 -> float (exact)
  const std::uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) v = static_cast<float>(man) / 16777216.0f;  // subnormal: man * 2^-24
  else if (exp == 31) v = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

// Distinct rows of varied lengths (0 .. ~1.5 KB), every byte value appearing.
std::vector<std::string> make_rows(std::size_t n, std::uint32_t seed) {
  std::vector<std::string> rows(n);
  std::uint32_t x = seed * 2654435761u + 12345u;
  for (std::size_t r = 0; r < n; ++r) {
    x = x * 1664525u + 1013904223u;
    const std::size_t len = (r % 5 == 4) ? 0 : (x >> 8) % 1500 + (r % 3);
    rows[r].resize(len);
    for (auto& c : rows[r]) {
      x = x * 1664525u + 1013904223u;
      c = static_cast<char>(x >> 24);
    }
    if (len > 0) rows[r][0] = static_cast<char>(r & 0xff);  // rows differ even when the generator repeats
  }
  return rows;
}

embed_request request_for(const std::string& model, const std::vector<std::string>& rows) {
  embed_request req;
  req.model = model;
  req.input = "INPUT0";
  req.outputs = {"EMBEDDING"};
  for (const auto& r : rows) req.rows.push_back(std::as_bytes(std::span<const char>(r.data(), r.size())));
  return req;
}

client::client_options options(bool binary_outputs) {
  client::client_options o;
  o.endpoints.list = {triton_url()};
  o.binary_outputs = binary_outputs;
  o.hedge.enabled = false;  // one attempt per request: the test compares answers, not latency tricks
  o.request_timeout = std::chrono::milliseconds(30000);
  return o;
}

// Every row's output equals the reference: dtype, shape [N, 8], values bit for bit, in row order.
void check_result(const result<embed_result>& r, const std::vector<std::string>& rows, bool fp16) {
  REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().message));
  const embed_result& e = *r;
  for (std::size_t i = 0; i < e.row_errors.size(); ++i)
    CHECK_MESSAGE(e.row_ok(i), "row " << i << ": " << e.row_errors[i].message);
  const tensor* t = e.find("EMBEDDING");
  REQUIRE(t != nullptr);
  CHECK(e.outputs.size() == 1);
  REQUIRE(t->dtype() == (fp16 ? dtype::f16 : dtype::f32));
  REQUIRE(t->rank() == 2);
  REQUIRE(t->size(0) == static_cast<std::int64_t>(rows.size()));
  REQUIRE(t->size(1) == static_cast<std::int64_t>(kDim));
  REQUIRE(t->is_contiguous());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto want = fp16 ? reference(rows[i], 2039, 6) : reference(rows[i], 65521, 8);
    for (std::size_t j = 0; j < kDim; ++j) {
      float got;
      if (fp16) {
        std::uint16_t h;
        std::memcpy(&h, static_cast<const std::byte*>(t->data()) + (i * kDim + j) * 2, 2);
        got = half_to_float(h);
      } else {
        std::memcpy(&got, static_cast<const std::byte*>(t->data()) + (i * kDim + j) * 4, 4);
      }
      if (got != want[j] && mismatches++ < 5)
        FAIL_CHECK("row " << i << " of " << rows.size() << " [" << j << "]: got " << got << " want " << want[j]);
    }
  }
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("triton: the server is there") {
  REQUIRE_MESSAGE(!triton_url().empty(), "JITEMBED_TRITON_URL is not set: run through tests/triton/run_tritonserver.py");
}

TEST_CASE("triton: FP32 embeddings equal the reference for requests of 1..64 rows") {
  REQUIRE(!triton_url().empty());
  for (const bool binary : {true, false}) {
    CAPTURE(binary);
    auto c = jit_client::create(options(binary));
    REQUIRE_MESSAGE(c.has_value(), (c ? std::string() : c.error().message));
    for (const std::size_t n : {1, 2, 3, 7, 16, 33, 64}) {
      CAPTURE(n);
      const auto rows = make_rows(n, static_cast<std::uint32_t>(n) + (binary ? 0 : 1000));
      auto r = c->embed(request_for("jit_embed", rows)).get();
      check_result(r, rows, false);
      if (r) {
        CHECK(r->model_name == "jit_embed");
        CHECK(r->model_version == "1");
        CHECK(r->endpoint.find("127.0.0.1") != std::string::npos);
      }
    }
    c->close();
  }
}

TEST_CASE("triton: concurrent requests keep their own rows in order (the server batches them together)") {
  REQUIRE(!triton_url().empty());
  auto c = jit_client::create(options(true));
  REQUIRE(c.has_value());
  std::vector<std::vector<std::string>> all;
  std::vector<std::future<result<embed_result>>> futures;
  for (std::uint32_t k = 0; k < 40; ++k) {
    all.push_back(make_rows(1 + k % 9, 5000 + k));
    futures.push_back(c->embed(request_for("jit_embed", all.back())));
  }
  for (std::size_t k = 0; k < futures.size(); ++k) {
    CAPTURE(k);
    check_result(futures[k].get(), all[k], false);
  }
  CHECK(c->stats().in_flight == 0);
  c->close();
}

TEST_CASE("triton: FP16 output in the binary extension") {
  REQUIRE(!triton_url().empty());
  auto c = jit_client::create(options(true));
  REQUIRE(c.has_value());
  for (const std::size_t n : {1, 5, 64}) {
    CAPTURE(n);
    const auto rows = make_rows(n, 77 + static_cast<std::uint32_t>(n));
    check_result(c->embed(request_for("jit_embed_fp16", rows)).get(), rows, true);
  }
}

TEST_CASE("triton: FP16 output as JSON is Triton's 400: invalid_argument") {
  REQUIRE(!triton_url().empty());
  auto c = jit_client::create(options(false));
  REQUIRE(c.has_value());
  auto r = c->embed(request_for("jit_embed_fp16", {"abc"})).get();
  REQUIRE_FALSE(r.has_value());
  CHECK(r.code() == errc::invalid_argument);
  CHECK(r.error().message.find("400") != std::string::npos);
}

TEST_CASE("triton: an unknown model is errc::not_found (HTTP 404)") {
  REQUIRE(!triton_url().empty());
  auto c = jit_client::create(options(true));
  REQUIRE(c.has_value());
  auto r = c->embed(request_for("no_such_model", {"abc", "de"})).get();
  REQUIRE_FALSE(r.has_value());
  CHECK(r.code() == errc::not_found);
  CHECK(r.error().message.find("404") != std::string::npos);
  // the endpoint still serves the models it has
  const std::vector<std::string> rows{"x", "yz"};
  check_result(c->embed(request_for("jit_embed", rows)).get(), rows, false);
}

TEST_CASE("triton: more rows than max_batch_size (400) are resent row by row and all succeed") {
  REQUIRE(!triton_url().empty());
  auto c = jit_client::create(options(true));
  REQUIRE(c.has_value());
  const auto rows = make_rows(65, 4242);
  check_result(c->embed(request_for("jit_embed", rows)).get(), rows, false);
  CHECK(c->stats().row_splits >= 1);
}

TEST_CASE("triton: identity() needs client_options.identities for a Triton model") {
  REQUIRE(!triton_url().empty());
  {
    auto c = jit_client::create(options(true));
    REQUIRE(c.has_value());
    auto id = c->identity("jit_embed");
    REQUIRE_FALSE(id.has_value());
    CHECK(id.code() == errc::not_found);
  }
  auto o = options(true);
  o.identities["jit_embed"] = {"triton-jit_embed-v1", "raw-bytes"};
  auto c = jit_client::create(o);
  REQUIRE(c.has_value());
  auto id = c->identity("jit_embed");
  REQUIRE(id.has_value());
  CHECK(id->fingerprint == "triton-jit_embed-v1");
  CHECK(id->preprocess_key == "raw-bytes");
}

TEST_CASE("triton: identity() reads parameters.fingerprint / preprocess_key from the model config") {
  REQUIRE(!triton_url().empty());
  auto c = jit_client::create(options(true));
  REQUIRE(c.has_value());
  auto id = c->identity("jit_text_identity");  // Triton's metadata has no parameters; its /config has them
  REQUIRE_MESSAGE(id.has_value(), (id ? std::string() : id.error().message));
  CHECK(id->fingerprint == "triton-jit_text-v1");
  CHECK(id->preprocess_key == "utf8;max_bytes=4096;");
  CHECK(id->input == "text");
  // Without the parameters: not_found, and the message names both ways to supply them.
  auto none = c->identity("jit_text");
  REQUIRE_FALSE(none.has_value());
  CHECK(none.code() == errc::not_found);
  CHECK(none.error().message.find("publishes no parameters.fingerprint / preprocess_key") != std::string::npos);
  CHECK(none.error().message.find("--identity jit_text[:INPUT]=FINGERPRINT,PREPROCESS_KEY") != std::string::npos);
  // An unknown model is Triton's 404 on the metadata, not the missing-identity message.
  auto unknown = c->identity("no_such_model");
  REQUIRE_FALSE(unknown.has_value());
  CHECK(unknown.code() == errc::not_found);
  CHECK(unknown.error().message.find("publishes no") == std::string::npos);
}

TEST_CASE("triton: parse_identity_flag, the programs' --identity") {
  auto a = client::parse_identity_flag("jit_text:text=fp-1,mean=0.5,0.5;size=256;");
  REQUIRE(a.has_value());
  CHECK(a->first == "jit_text");
  CHECK(a->second.fingerprint == "fp-1");
  CHECK(a->second.preprocess_key == "mean=0.5,0.5;size=256;");  // the key is the rest: ',' '=' ';' kept
  CHECK(a->second.input == "text");
  auto b = client::parse_identity_flag("m=f,k");
  REQUIRE(b.has_value());
  CHECK(b->first == "m");
  CHECK(b->second.input.empty());
  for (const char* bad : {"m", "=f,k", "m=f", "m=,k", "m=f,", "m:=f,k"}) {
    auto r = client::parse_identity_flag(bad);
    CHECK_MESSAGE(r.code() == errc::invalid_argument, bad);
  }
}

#if defined(JITEMBED_HAS_GRPC)
TEST_CASE("triton over gRPC: FP32 and FP16 equal the reference, an http + grpc list, errors keep their errc") {
  const char* g = std::getenv("JITEMBED_TRITON_GRPC_URL");
  REQUIRE_MESSAGE(g != nullptr, "JITEMBED_TRITON_GRPC_URL is not set: run through run_tritonserver.py --grpc");
  client::client_options o = options(true);
  o.endpoints.list = {g};
  auto c = jit_client::create(o).value();
  for (const std::size_t n : {1, 7, 64}) {
    CAPTURE(n);
    const auto rows = make_rows(n, static_cast<std::uint32_t>(n) + 7000);
    auto r = c.embed(request_for("jit_embed", rows)).get();
    check_result(r, rows, false);
    if (r) CHECK(r->endpoint == std::string(g));
    auto h = c.embed(request_for("jit_embed_fp16", rows)).get();
    check_result(h, rows, true);
  }
  // 40 concurrent requests (Triton batches them), each keeps its rows in order
  std::vector<std::vector<std::string>> rows(40);
  std::vector<std::future<result<embed_result>>> fs;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i] = make_rows(1 + i % 5, static_cast<std::uint32_t>(8000 + i));
    fs.push_back(c.embed(request_for("jit_embed", rows[i])));
  }
  for (std::size_t i = 0; i < rows.size(); ++i) check_result(fs[i].get(), rows[i], false);
  CHECK(c.embed(request_for("no_such_model", make_rows(1, 1))).get().code() == errc::not_found);
  // Triton's gRPC publishes no identity parameters for jit_embed: the client says so (not_found)
  CHECK(c.identity("jit_embed").code() == errc::not_found);
  CHECK(c.identity("jit_text_identity").has_value());
  // both transports in one list
  o.endpoints.list = {triton_url(), g};
  auto mixed = jit_client::create(o).value();
  fs.clear();
  for (std::size_t i = 0; i < rows.size(); ++i) fs.push_back(mixed.embed(request_for("jit_embed", rows[i])));
  for (std::size_t i = 0; i < rows.size(); ++i) check_result(fs[i].get(), rows[i], false);
  const auto st = mixed.stats();
  REQUIRE(st.endpoints.size() == 2);
  for (const auto& e : st.endpoints) CHECK_MESSAGE(e.successes > 0, e.url);
}
#endif

namespace {
// Runs the shared-memory check on one Triton endpoint (http:// or grpc://): the client registers its region
// with Triton's system shared-memory extension, then sends rows and receives outputs through it.
void check_shared_memory(const std::string& url) {
  client::client_options o = options(true);
  o.endpoints.list = {url};
  o.shared_memory.min_bytes = 0;  // these rows and outputs are small
  auto c = jit_client::create(o).value();
  REQUIRE_MESSAGE(jitembed::test::eventually([&] { return c.stats().endpoints[0].shared_memory; }),
                  "Triton did not take the client's region");
  for (const std::size_t n : {1, 7, 33, 64}) {
    CAPTURE(n);
    const auto rows = make_rows(n, static_cast<std::uint32_t>(n) + 9000);
    check_result(c.embed(request_for("jit_embed", rows)).get(), rows, false);
    check_result(c.embed(request_for("jit_embed_fp16", rows)).get(), rows, true);
  }
  std::vector<std::vector<std::string>> rows(24);
  std::vector<std::future<result<embed_result>>> fs;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i] = make_rows(1 + i % 5, static_cast<std::uint32_t>(9500 + i));
    fs.push_back(c.embed(request_for("jit_embed", rows[i])));
  }
  for (std::size_t i = 0; i < rows.size(); ++i) check_result(fs[i].get(), rows[i], false);
  const auto st = c.stats();
  CHECK(st.shared_memory_attempts >= 30);  // all but each model's first request (which learns the sizes)
  CHECK(st.shared_memory_fallbacks == 0);
  CHECK(st.failed == 0);
}
}  // namespace

TEST_CASE("triton: the client's shared memory (a registered region) gives the reference embeddings") {
  REQUIRE(!triton_url().empty());
  check_shared_memory(triton_url());
}

#if defined(JITEMBED_HAS_GRPC)
TEST_CASE("triton over gRPC: the client's shared memory gives the reference embeddings") {
  const char* g = std::getenv("JITEMBED_TRITON_GRPC_URL");
  REQUIRE_MESSAGE(g != nullptr, "JITEMBED_TRITON_GRPC_URL is not set: run through run_tritonserver.py --grpc");
  check_shared_memory(g);
}
#endif
