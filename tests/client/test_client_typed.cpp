// Typed rows (token ids a trainer tokenized itself): INT64 / INT32 "input_ids" and the model's declared input
// over HTTP (raw and compressed, through shared memory) and in local mode equal the captions sent as
// strings; a row of the wrong size is refused before anything is sent; datatype and row shape are part of
// the coalescing key.
#include <doctest/doctest.h>

#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "batching/eventually.hpp"
#include "client/ids_test_model.hpp"
#include "client_test_util.hpp"

namespace typed_test {

using namespace client_test;
using namespace ids_test;
namespace cl = jitembed::client;

// The ids model behind HTTP on 127.0.0.1.
struct ids_service {
  server::service svc;
  http::server srv;
  static server::service make() {
    server::server_config c;
    c.preprocess_threads = 1;
    auto s = server::service::create(c).value();
    server::model_config mc;
    mc.name = "ids";
    REQUIRE(s.load(mc, models::any_model(ids_model{})));
    return s;
  }
  ids_service() : svc(make()), srv(http::server::create(http::server_options{}, svc.as_handler()).value()) {}
  std::string url() const { return "http://127.0.0.1:" + std::to_string(srv.port()); }
};

cl::client_options remote_options(const std::string& url) {
  cl::client_options o;
  o.endpoints.list = {url};
  o.request_timeout = 5s;
  o.shared_memory.enabled = false;
  return o;
}

cl::embed_request captions_request(const std::vector<std::string>& captions) {
  cl::embed_request r;
  r.model = "ids";
  r.input = "text";
  for (const auto& c : captions) r.rows.push_back(as_bytes_view(c));
  return r;
}

// Typed rows over `rows` (each one row's bytes; kept alive by the caller).
template <class T>
cl::embed_request ids_request(const std::vector<std::vector<T>>& rows, std::string input = "input_ids",
                              std::vector<std::int64_t> row_shape = {4}) {
  cl::embed_request r;
  r.model = "ids";
  r.input = std::move(input);
  r.datatype = std::string(ks::to_string(ks::datatype_of_v<T>));
  r.row_shape = std::move(row_shape);
  for (const auto& v : rows) r.rows.push_back(bytes_of(v));
  return r;
}

template <class T>
std::vector<std::vector<T>> ids_rows(const std::vector<std::string>& captions) {
  std::vector<std::vector<T>> out;
  for (const auto& c : captions) out.push_back(ids_of<T>(c));
  return out;
}

bool same_s(const result<cl::embed_result>& a, const result<cl::embed_result>& b) {
  REQUIRE_MESSAGE(a, (a ? std::string() : a.error().message));
  REQUIRE_MESSAGE(b, (b ? std::string() : b.error().message));
  const tensor* x = a->find("s");
  const tensor* y = b->find("s");
  REQUIRE(x != nullptr);
  REQUIRE(y != nullptr);
  return x->shape() == y->shape() && x->nbytes() == y->nbytes() && std::memcmp(x->data(), y->data(), x->nbytes()) == 0;
}

}  // namespace typed_test

using namespace typed_test;

TEST_CASE("typed rows: INT64 / INT32 input_ids and the declared input equal the captions, over HTTP and locally") {
  ids_service service;
  // captions of 4 bytes or more: the model's mask is all ones, as for ids sent without a mask
  const std::vector<std::string> captions = {"abcd", "hello world", "wxyz!", "dcba"};
  auto remote = cl::jit_client::create(remote_options(service.url())).value();
  cl::client_options lo;
  lo.local_models = {models::any_model(ids_model{})};
  lo.local_threads = 2;
  auto local = cl::jit_client::create(lo).value();
  const auto i64 = ids_rows<std::int64_t>(captions);
  const auto i32 = ids_rows<std::int32_t>(captions);
  // the declared input: i64 [2, 4], ids then mask
  std::vector<std::vector<std::int64_t>> declared;
  for (auto v : i64) {
    v.insert(v.end(), {1, 1, 1, 1});
    declared.push_back(v);
  }
  for (auto* c : {&remote, &local}) {
    CAPTURE(c->local());
    const auto want = c->embed(captions_request(captions)).get();
    REQUIRE(want);
    CHECK(want->find("s")->shape() == jitembed::shape{4, 2});
    CHECK(same_s(c->embed(ids_request(i64)).get(), want));
    CHECK(same_s(c->embed(ids_request(i32)).get(), want));
    CHECK(same_s(c->embed(ids_request(declared, "INPUT__0", {2, 4})).get(), want));
    // another order of the same ids is another answer
    const auto swapped = c->embed(ids_request(ids_rows<std::int64_t>({"bacd", "ehllo", "xwyz", "cdba"}))).get();
    REQUIRE(swapped);
    CHECK_FALSE(same_s(swapped, want));
    // one row alone (a row split sends rows one by one in the same way)
    auto one = c->embed(ids_request(std::vector<std::vector<std::int32_t>>{i32[1]})).get();
    REQUIRE(one);
    CHECK(std::memcmp(one->find("s")->data(), want->find("s")->data<float>() + 2, 2 * sizeof(float)) == 0);
    // the model's own checks, with the server's words: ids of another length, a datatype it does not take
    const auto five = std::vector<std::vector<std::int64_t>>{{1, 2, 3, 4, 5}};
    auto long_ids = c->embed(ids_request(five, "input_ids", {5})).get();
    REQUIRE_FALSE(long_ids);
    CHECK(long_ids.error().message.find("input 'input_ids' has shape [1,5], expected [batch, 4]") != std::string::npos);
    const auto floats = std::vector<std::vector<float>>{{1, 2, 3, 4}};
    CHECK(c->embed(ids_request(floats)).get().code() == errc::dtype_mismatch);
  }
  // compressed inputs: typed rows shuffled by their element size, as the server unshuffles them
  std::vector<std::string> many;
  for (int i = 0; i < 300; ++i) many.push_back(captions[i % captions.size()] + std::to_string(i));
  auto packed_o = remote_options(service.url());
  packed_o.compress_inputs = true;
  auto packed = cl::jit_client::create(packed_o).value();
  const auto many64 = ids_rows<std::int64_t>(many);  // 300 x 32 bytes: past the 4 KiB floor, and compressible
  CHECK(same_s(packed.embed(ids_request(many64)).get(), remote.embed(captions_request(many)).get()));
  // through the endpoint's shared memory (same host): the rows as they are, the same answer
  auto shm_o = remote_options(service.url());
  shm_o.shared_memory.enabled = true;
  shm_o.shared_memory.min_bytes = 0;
  auto shm = cl::jit_client::create(shm_o).value();
  REQUIRE(jitembed::test::eventually([&] { return shm.stats().endpoints[0].shared_memory; }));
  const auto want = remote.embed(captions_request(captions)).get();
  for (int i = 0; i < 3; ++i) CHECK(same_s(shm.embed(ids_request(i32)).get(), want));
  CHECK(shm.stats().shared_memory_attempts == 2);  // the first answer taught the output sizes
  CHECK(shm.stats().shared_memory_fallbacks == 0);
}

TEST_CASE("typed rows: a row of the wrong size, an unknown datatype, a BYTES row shape are refused before sending") {
  fake_server srv(always_ok());
  auto c = cl::jit_client::create(remote_options(srv.url())).value();
  const std::vector<std::vector<std::int64_t>> rows = {{1, 2, 3, 4}, {1, 2, 3}};
  auto short_row = c.embed(ids_request(rows)).get();
  CHECK(short_row.code() == errc::invalid_argument);
  CHECK(short_row.error().message == "embed: row 1 has 24 bytes, INT64 [4] needs 32");
  auto bad_type = ids_request(rows);
  bad_type.datatype = "INT128";
  CHECK(c.embed(bad_type).get().error().message == "embed: unknown datatype 'INT128'");
  auto shaped_bytes = captions_request({"abcd"});
  shaped_bytes.row_shape = {4};
  CHECK(c.embed(shaped_bytes).get().error().message ==
        "embed: row_shape [4] given for BYTES rows (each row is one element)");
  auto negative = ids_request(rows, "input_ids", {-4});
  CHECK(c.embed(negative).get().code() == errc::invalid_argument);
  CHECK(srv.requests() == 0);
  CHECK(c.stats().failed == 4);
}

TEST_CASE("typed rows: the datatype and row shape are part of the coalescing key") {
  auto g = std::make_shared<gate>();
  cl::client_options lo;
  lo.local_models = {models::any_model(ids_model{g})};
  lo.local_threads = 2;
  auto c = cl::jit_client::create(lo).value();
  // the same 32 bytes three ways, under one key: INT64 [4] (twice) and INT32 [8]
  const std::vector<std::vector<std::int64_t>> i64 = {{97, 98, 99, 100}};
  const std::vector<std::vector<std::int32_t>> i32 = {{97, 0, 98, 0, 99, 0, 100, 0}};
  REQUIRE(bytes_of(i64[0]).size() == bytes_of(i32[0]).size());
  REQUIRE(std::memcmp(bytes_of(i64[0]).data(), bytes_of(i32[0]).data(), 32) == 0);  // little-endian
  auto a = ids_request(i64);
  auto b = ids_request(i32, "input_ids", {8});
  auto d = ids_request(i64);
  for (auto* r : {&a, &b, &d}) r->coalesce_key = hash128{42, 7};
  auto fa = c.embed(a);
  auto fb = c.embed(b);
  auto fd = c.embed(d);
  g->release();
  const auto ra = fa.get(), rb = fb.get(), rd = fd.get();
  CHECK(same_s(ra, rd));
  CHECK(rb.code() == errc::invalid_argument);  // [8] is not the model's length: it did not join the INT64 call
  CHECK(rb.error().message.find("expected [batch, 4]") != std::string::npos);
  CHECK(c.stats().coalesced == 1);
  CHECK(c.stats().requests == 3);
}
