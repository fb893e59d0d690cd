// KServe gRPC, both ends in one process: jitembed's gRPC front end (server::grpc_server) and the JIT
// client's grpc:// transport. Answers over gRPC equal the HTTP ones bitwise; mixed http:// + grpc://
// endpoint lists balance and fail over; errc survives the trip (not_found, invalid_argument, timeout);
// malformed messages and unknown methods get clear status codes and leave the server serving.
#include <doctest/doctest.h>

#include <google/protobuf/util/json_util.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "batching/eventually.hpp"
#include "client/ids_test_model.hpp"
#include "jitembed/client/jit_client.hpp"
#include "jitembed/net/grpc/kserve_schema.hpp"
#include "jitembed/net/http/client.hpp"
#include "jitembed/net/http/server.hpp"
#include "jitembed/net/kserve.hpp"
#include "jitembed/server.hpp"
#include "jitembed/server/grpc_server.hpp"
#include "tls_test_util.hpp"

namespace {

using namespace jitembed;
using namespace std::chrono_literals;
namespace cl = jitembed::client;
namespace http = jitembed::net::http;

// A service with the small text-embed reference model behind HTTP and gRPC on 127.0.0.1.
struct both_fronts {
  server::service svc;
  http::server http_srv;
  server::grpc_server grpc_srv;

  static server::service make_service(std::string params = "") {
    server::server_config sc;
    sc.preprocess_threads = 2;
    server::model_config mc;
    mc.name = "text-embed";
    mc.params = {{"text_dim", 16}, {"text_max_length", 8}};
    if (!params.empty()) mc.params[params] = 200000;  // e.g. sleep_us
    sc.models = {mc};
    return server::service::create(sc).value();
  }
  explicit both_fronts(std::string params = "")
      : svc(make_service(std::move(params))),
        http_srv(http::server::create(http::server_options{}, svc.as_handler()).value()),
        grpc_srv(server::grpc_server::create(server::grpc_server_options{}, svc).value()) {}

  std::string http_url() const { return "http://127.0.0.1:" + std::to_string(http_srv.port()); }
  std::string grpc_url() const { return "grpc://127.0.0.1:" + std::to_string(grpc_srv.port()); }
};

cl::client_options options_for(std::vector<std::string> urls) {
  cl::client_options o;
  o.endpoints.list = std::move(urls);
  o.request_timeout = 5s;
  return o;
}

cl::embed_request text_request(const std::vector<std::string>& rows, std::string model = "text-embed") {
  cl::embed_request r;
  r.model = std::move(model);
  r.input = "text";
  for (const auto& s : rows) r.rows.push_back(as_bytes_view(s));
  return r;
}

bool same_outputs(const cl::embed_result& a, const cl::embed_result& b) {
  if (a.outputs.size() != b.outputs.size()) return false;
  for (std::size_t k = 0; k < a.outputs.size(); ++k) {
    if (a.outputs[k].first != b.outputs[k].first || a.outputs[k].second.nbytes() != b.outputs[k].second.nbytes())
      return false;
    if (std::memcmp(a.outputs[k].second.data(), b.outputs[k].second.data(), a.outputs[k].second.nbytes()) != 0)
      return false;
  }
  return true;
}

// A raw call with bytes of our choosing (malformed messages, unknown methods).
::grpc::Status raw_call(std::uint16_t port, const std::string& method, const std::string& bytes) {
  auto ch = ::grpc::CreateChannel("127.0.0.1:" + std::to_string(port), ::grpc::InsecureChannelCredentials());
  ::grpc::GenericStub stub(ch);
  ::grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  ::grpc::Slice s(bytes.data(), bytes.size());
  ::grpc::ByteBuffer req(&s, 1), resp;
  std::promise<::grpc::Status> done;
  stub.UnaryCall(&ctx, method, ::grpc::StubOptions(), &req, &resp,
                 [&](::grpc::Status st) { done.set_value(std::move(st)); });
  return done.get_future().get();
}

// A unary call of `method` whose request is `request` (JSON of message `type` + "Request"; `bytes_field`, when
// given, set to `bytes`): the status and the response as JSON.
std::pair<::grpc::Status, nlohmann::json> json_call(std::uint16_t port, const std::string& type,
                                                    const nlohmann::json& request, const char* bytes_field = nullptr,
                                                    const std::string& bytes = {}) {
  const auto& schema = net::grpc::kserve_schema::get();
  auto msg = schema.make(type + "Request");
  REQUIRE(google::protobuf::util::JsonStringToMessage(request.dump(), msg.get()).ok());
  if (bytes_field)
    msg->GetReflection()->SetString(msg.get(), msg->GetDescriptor()->FindFieldByName(bytes_field), bytes);
  const std::string wire = msg->SerializeAsString();
  auto ch = ::grpc::CreateChannel("127.0.0.1:" + std::to_string(port), ::grpc::InsecureChannelCredentials());
  ::grpc::GenericStub stub(ch);
  ::grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  ::grpc::Slice s(wire.data(), wire.size());
  ::grpc::ByteBuffer req(&s, 1), resp;
  std::promise<::grpc::Status> done;
  stub.UnaryCall(&ctx, "/inference.GRPCInferenceService/" + type, ::grpc::StubOptions(), &req, &resp,
                 [&](::grpc::Status st) { done.set_value(std::move(st)); });
  auto st = done.get_future().get();
  if (!st.ok()) return {st, nullptr};
  std::vector<::grpc::Slice> slices;
  REQUIRE(resp.Dump(&slices).ok());
  std::string out;
  for (const auto& sl : slices) out.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  auto answer = schema.make(type + "Response");
  REQUIRE(answer->ParseFromString(out));
  std::string text;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  REQUIRE(google::protobuf::util::MessageToJsonString(*answer, &text, opts).ok());
  return {st, nlohmann::json::parse(text)};
}

// A TCP relay on 127.0.0.1 in front of `target` that counts the connections made through it, and those open.
class counting_relay {
 public:
  explicit counting_relay(std::uint16_t target) : target_(target) {
    accept();
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~counting_relay() {
    ioc_.stop();
    thread_.join();
  }
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  int accepted() const { return accepted_.load(); }
  int open() const { return open_.load(); }

 private:
  using tcp = boost::asio::ip::tcp;
  using socket_ptr = std::shared_ptr<tcp::socket>;
  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket s) {
      if (ec) return;
      ++accepted_, ++open_;
      // open until both directions ended (the client closed, or the server): the last handler drops it
      const auto token = std::shared_ptr<void>(nullptr, [this](void*) { --open_; });
      auto in = std::make_shared<tcp::socket>(std::move(s)), out = std::make_shared<tcp::socket>(ioc_);
      out->async_connect({boost::asio::ip::make_address("127.0.0.1"), target_},
                         [in, out, token](boost::system::error_code e) {
                           if (!e) pipe(in, out, token), pipe(out, in, token);
                         });
      accept();
    });
  }
  static void pipe(const socket_ptr& from, const socket_ptr& to, const std::shared_ptr<void>& token) {
    auto buf = std::make_shared<std::array<char, 1 << 16>>();
    from->async_read_some(boost::asio::buffer(*buf),
                          [from, to, buf, token](boost::system::error_code ec, std::size_t n) {
                            if (ec) return to->close();
                            boost::asio::async_write(*to, boost::asio::buffer(buf->data(), n),
                                                     [from, to, buf, token](boost::system::error_code e, std::size_t) {
                                                       if (e) return from->close();
                                                       pipe(from, to, token);
                                                     });
                          });
  }

  std::atomic<int> accepted_{0}, open_{0};  // before ioc_: its pending handlers drop tokens as it goes
  boost::asio::io_context ioc_;
  tcp::acceptor acceptor_{ioc_, {boost::asio::ip::make_address("127.0.0.1"), 0}};
  std::uint16_t target_;
  std::thread thread_;
};

// One "device" allocation that the handle "fake-handle" (padded to 64 bytes) opens.
struct one_allocation_ipc {
  std::shared_ptr<std::vector<std::byte>> memory = std::make_shared<std::vector<std::byte>>(128);
  static std::string handle() {
    std::string h = "fake-handle";
    h.resize(cuda_ipc_handle_size, '\0');
    return h;
  }
  result<cuda_ipc_mapping> open(std::span<const std::byte> h, int) {
    if (std::string(reinterpret_cast<const char*>(h.data()), h.size()) != handle())
      return fail(errc::invalid_argument, "cudaErrorInvalidValue (fake)");
    return cuda_ipc_mapping{memory->data(), memory->size()};
  }
  result<void> copy_to_host(int, const void* src, std::span<std::byte> dst) {
    std::memcpy(dst.data(), src, dst.size());
    return {};
  }
  result<void> copy_to_device(int, void* dst, std::span<const std::byte> src) {
    std::memcpy(dst, src.data(), src.size());
    return {};
  }
  void close(int, void*) noexcept {}
};

}  // namespace

TEST_CASE("gRPC front end: CUDA shared memory calls (a fake backend, none: register refused)") {
  server::server_config sc;
  sc.preprocess_threads = 1;
  sc.cuda_ipc = any_cuda_ipc_backend(one_allocation_ipc{});
  auto svc = server::service::create(sc).value();
  auto g = server::grpc_server::create(server::grpc_server_options{}, svc).value();
  const auto port = g.port();
  const auto ext = json_call(port, "ServerMetadata", nlohmann::json::object()).second["extensions"];
  CHECK(std::find(ext.begin(), ext.end(), "cuda_shared_memory") != ext.end());

  const auto handle = one_allocation_ipc::handle();
  auto reg = json_call(port, "CudaSharedMemoryRegister", {{"name", "c"}, {"device_id", "0"}, {"byte_size", "100"}},
                       "raw_handle", handle);
  CHECK(reg.first.ok());
  auto st = json_call(port, "CudaSharedMemoryStatus", nlohmann::json::object());
  REQUIRE(st.first.ok());
  CHECK(st.second ==
        nlohmann::json::parse(R"({"regions":{"c":{"name":"c","byte_size":"100"}}})"));  // device 0: default
  CHECK(json_call(port, "SystemSharedMemoryStatus", nlohmann::json::object()).second == nlohmann::json::object());
  auto dup = json_call(port, "CudaSharedMemoryRegister", {{"name", "c"}, {"byte_size", "8"}}, "raw_handle", handle);
  CHECK(dup.first.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(dup.first.error_message() == "shared memory region 'c' already in manager");
  auto bogus = json_call(port, "CudaSharedMemoryRegister", {{"name", "b"}, {"byte_size", "8"}}, "raw_handle",
                         std::string(cuda_ipc_handle_size, 'z'));
  CHECK(bogus.first.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(bogus.first.error_message() ==
        "CUDA shared memory region 'b': cannot open raw_handle on device 0: cudaErrorInvalidValue (fake)");
  auto one = json_call(port, "CudaSharedMemoryStatus", {{"name", "nope"}});
  CHECK(one.first.error_code() == ::grpc::StatusCode::NOT_FOUND);
  CHECK(json_call(port, "CudaSharedMemoryUnregister", {{"name", "c"}}).first.ok());
  CHECK(json_call(port, "CudaSharedMemoryStatus", nlohmann::json::object()).second == nlohmann::json::object());

  // Without a backend: not advertised, register refused.
  server::server_config plain;
  plain.preprocess_threads = 1;
  auto bare = server::service::create(plain).value();
  auto g2 = server::grpc_server::create(server::grpc_server_options{}, bare).value();
  const auto ext2 = json_call(g2.port(), "ServerMetadata", nlohmann::json::object()).second["extensions"];
  CHECK(std::find(ext2.begin(), ext2.end(), "cuda_shared_memory") == ext2.end());
  auto refused =
      json_call(g2.port(), "CudaSharedMemoryRegister", {{"name", "c"}, {"byte_size", "8"}}, "raw_handle", handle);
  CHECK(refused.first.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(refused.first.error_message() == "CUDA shared memory: this server was built without CUDA");
}

TEST_CASE("grpc:// endpoints: the same embeddings as HTTP, bitwise, identity and metadata over gRPC") {
  both_fronts f;
  auto over_http = cl::jit_client::create(options_for({f.http_url()})).value();
  auto over_grpc = cl::jit_client::create(options_for({f.grpc_url()})).value();
  const std::vector<std::string> rows = {"a cat on a mat", "two dogs", "", "the sea at night"};
  auto h = over_http.embed(text_request(rows)).get();
  auto g = over_grpc.embed(text_request(rows)).get();
  REQUIRE(h);
  REQUIRE(g);
  CHECK(g->endpoint == f.grpc_url());
  CHECK(g->outputs.size() == 3);
  CHECK(same_outputs(*h, *g));
  CHECK(g->find("pooled")->shape()[0] == 4);

  const auto hid = over_http.identity("text-embed").value();
  const auto gid = over_grpc.identity("text-embed").value();
  CHECK(gid.fingerprint == hid.fingerprint);
  CHECK(gid.preprocess_key == hid.preprocess_key);
  CHECK(gid.input == "text");
  const auto md = over_grpc.metadata("text-embed").value();
  CHECK(md.name == "text-embed");
  REQUIRE(md.outputs.size() == 3);
  CHECK(md.outputs[0].shape.front() == -1);
  CHECK(over_grpc.metadata("nope").code() == errc::not_found);
}

TEST_CASE(
    "grpc:// control plane: one connection for all calls, and an endpoint that leaves closes its own (HTTP too)") {
  both_fronts f;
  for (const bool grpc : {true, false}) {
    CAPTURE(grpc);
    counting_relay relay(grpc ? f.grpc_srv.port() : f.http_srv.port());
    const auto list = std::filesystem::temp_directory_path() / ("jitembed_relay_" + std::to_string(::getpid()));
    std::ofstream(list) << (grpc ? "grpc" : "http") << "://127.0.0.1:" << relay.port() << "\n";
    auto o = options_for({});
    o.endpoints.file = list.string();
    o.endpoints.refresh = 10ms;
    auto c = cl::jit_client::create(o).value();
    for (int i = 0; i < 3; ++i) {
      REQUIRE(c.wait_ready({"text-embed"}, 5s));
      REQUIRE(c.metadata("text-embed"));
      CHECK(c.metadata("nope").code() == errc::not_found);
    }
    REQUIRE(c.identity("text-embed"));
    REQUIRE(c.embed(text_request({"one"})).get());
    REQUIRE(jitembed::test::eventually([&] { return c.stats().endpoints[0].shared_memory; }));  // region registered
    if (grpc) CHECK(relay.accepted() == 1);  // a channel per call: 11 (measured before the channels were kept)
    CHECK(relay.open() >= 1);
    // The endpoint leaves the set (drained, then reaped after a call): its connections close, and its region's
    // unregistration, which follows, keeps none open.
    const std::string direct = grpc ? f.grpc_url() : f.http_url();
    const auto accepted_before = relay.accepted();
    std::ofstream(list) << direct << "\n";
    REQUIRE(jitembed::test::eventually([&] { return c.endpoints() == std::vector<std::string>{direct}; }));
    REQUIRE(c.embed(text_request({"two"})).get());
    // The unregistration came through the relay on a connection of its own, and that one closed too.
    CHECK(jitembed::test::eventually([&] { return relay.accepted() > accepted_before && relay.open() == 0; }));
    std::filesystem::remove(list);
  }
}

TEST_CASE("grpc:// transport: a failed call's errc is its outcome's fault, as HTTP's status would be") {
  namespace cd = jitembed::client::detail;
  using f = cd::attempt_fault;
  for (auto c : {errc::unavailable, errc::resource_exhausted, errc::timeout})
    CHECK(cd::grpc_client::fault_of(c) == f::busy);
  for (auto c : {errc::internal, errc::io_error, errc::encode_failed, errc::comm_failed, errc::buffer_too_small})
    CHECK(cd::grpc_client::fault_of(c) == f::endpoint);
  for (auto c : {errc::invalid_argument, errc::corrupt_data, errc::not_found, errc::cancelled, errc::limit_exceeded})
    CHECK(cd::grpc_client::fault_of(c) == f::request);
  // the same fault as the HTTP status the server would have answered with
  for (int i = 1; i <= static_cast<int>(errc::resource_exhausted); ++i) {
    const auto c = static_cast<errc>(i);
    const auto o = cd::http_outcome(net::kserve::http_status(c),
                                    "{\"error\":\"x\",\"errc\":\"" + std::string(to_string(c)) + "\"}", "x");
    CHECK_MESSAGE(cd::grpc_client::fault_of(c) == o.fault, to_string(c));
  }
}

TEST_CASE("grpc:// errors keep their errc: unknown model, bad row, server-side deadline") {
  both_fronts f;
  auto c = cl::jit_client::create(options_for({f.grpc_url()})).value();
  CHECK(c.embed(text_request({"x"}, "nope")).get().code() == errc::not_found);
  // one bad row of three: the request is split row by row, only that row fails
  const std::string bad = "\xff\xfe";
  auto r = c.embed(text_request({"ok", bad, "fine"})).get();
  REQUIRE(r);
  CHECK(r->row_ok(0));
  CHECK(r->row_errors.at(1).code == errc::invalid_utf8);
  CHECK(r->row_ok(2));

  both_fronts slow("sleep_us");  // 200 ms per batch
  auto o = options_for({slow.grpc_url()});
  o.request_timeout = 50ms;
  o.retry.max_attempts = 1;
  auto sc = cl::jit_client::create(o).value();
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(sc.embed(text_request({"slow"})).get().code() == errc::timeout);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
}

TEST_CASE("mixed http:// and grpc:// endpoints: both serve, a stopped gRPC front end fails over to HTTP") {
  both_fronts a, b;
  auto c = cl::jit_client::create(options_for({a.http_url(), b.grpc_url()})).value();
  std::vector<std::future<result<cl::embed_result>>> fs;
  std::vector<std::vector<std::string>> rows;
  for (int i = 0; i < 64; ++i) rows.push_back({"caption " + std::to_string(i)});
  for (int i = 0; i < 64; ++i) fs.push_back(c.embed(text_request(rows[i])));
  int ok = 0;
  for (auto& f : fs) ok += f.get().has_value();
  CHECK(ok == 64);
  const auto st = c.stats();
  REQUIRE(st.endpoints.size() == 2);
  for (const auto& e : st.endpoints) CHECK(e.successes > 0);

  b.grpc_srv.stop(0ms);  // the gRPC endpoint goes away: every request still succeeds, over HTTP
  fs.clear();
  for (int i = 0; i < 32; ++i) fs.push_back(c.embed(text_request(rows[i])));
  ok = 0;
  for (auto& f : fs) {
    auto r = f.get();
    ok += r.has_value();
    if (r) CHECK(r->endpoint == a.http_url());
  }
  CHECK(ok == 32);
}

// What the HTTP front answers on `target` (a JSON body), as the gRPC message `type` reads it (protobuf's JSON
// parser; keys the message lacks are dropped), printed as json_call prints a gRPC answer.
nlohmann::json http_as_message(server::service& svc, const std::string& method, const std::string& target,
                               const std::string& type, const char* wrap = nullptr) {
  http::response got;
  svc.handle(http::request{.method = method, .target = target}, [&](http::response r) { got = std::move(r); });
  REQUIRE(got.status == 200);
  auto j = nlohmann::json::parse(got.body);
  if (wrap) j = nlohmann::json{{wrap, j}};
  auto msg = net::grpc::kserve_schema::get().make(type);
  google::protobuf::util::JsonParseOptions in;
  in.ignore_unknown_fields = true;
  REQUIRE(google::protobuf::util::JsonStringToMessage(j.dump(), msg.get(), in).ok());
  std::string text;
  google::protobuf::util::JsonPrintOptions out;
  out.preserve_proto_field_names = true;
  REQUIRE(google::protobuf::util::MessageToJsonString(*msg, &text, out).ok());
  return nlohmann::json::parse(text);
}

TEST_CASE("gRPC front end: metadata, config, statistics and index answers equal the HTTP ones field for field") {
  server::server_config sc;
  sc.preprocess_threads = 1;
  server::model_config a{.name = "text-embed", .params = {{"text_dim", 16}, {"text_max_length", 8}}};
  a.policy = {.which = server::version_policy::kind::specific, .versions = {"1", "3", "7"}};
  server::model_config b = a;
  b.version = "3";
  sc.models = {a, b, server::model_config{.name = "image-latent"}};
  auto svc = server::service::create(sc).value();
  auto g = server::grpc_server::create(server::grpc_server_options{}, svc).value();
  auto c = cl::jit_client::create(options_for({"grpc://127.0.0.1:" + std::to_string(g.port())})).value();
  REQUIRE(c.embed(text_request({"one", "two"})).get());  // statistics with counts and a batch size

  using target = std::pair<std::string, std::string>;  // model, version
  for (const auto& t : {target{"text-embed", ""}, target{"text-embed", "1"}, target{"image-latent", ""}}) {
    const std::string &m = t.first, &v = t.second;
    const auto call = [&](const std::string& t) { return json_call(g.port(), t, {{"name", m}, {"version", v}}); };
    const std::string path = "/v2/models/" + m + (v.empty() ? "" : "/versions/" + v);
    const auto [st1, md] = call("ModelMetadata");
    REQUIRE(st1.ok());
    CHECK(md == http_as_message(svc, "GET", path, "ModelMetadataResponse"));
    const auto [st2, cfg] = call("ModelConfig");
    REQUIRE(st2.ok());
    CHECK(cfg == http_as_message(svc, "GET", path + "/config", "ModelConfigResponse", "config"));
    CHECK(cfg["config"]["parameters"].contains("fingerprint"));
    const auto [st3, stats] = call("ModelStatistics");
    REQUIRE(st3.ok());
    CHECK(stats == http_as_message(svc, "GET", path + "/stats", "ModelStatisticsResponse"));
  }
  CHECK(json_call(g.port(), "ModelConfig", {{"name", "text-embed"}}).second["config"]["version_policy"] ==
        nlohmann::json{{"specific", {{"versions", {"1", "3", "7"}}}}});  // int64 printed as JSON strings
  CHECK(json_call(g.port(), "ModelMetadata", {{"name", "text-embed"}}).second["versions"] == nlohmann::json{"1", "3"});
  const auto [st4, all] = json_call(g.port(), "ModelStatistics", nlohmann::json::object());
  REQUIRE(st4.ok());
  CHECK(all["model_stats"].size() == 3);
  CHECK(all == http_as_message(svc, "GET", "/v2/models/stats", "ModelStatisticsResponse"));
  CHECK(json_call(g.port(), "ServerMetadata", nlohmann::json::object()).second ==
        http_as_message(svc, "GET", "/v2", "ServerMetadataResponse"));
  CHECK(json_call(g.port(), "RepositoryIndex", nlohmann::json::object()).second ==
        http_as_message(svc, "POST", "/v2/repository/index", "RepositoryIndexResponse", "models"));
}

TEST_CASE("gRPC front end: malformed messages and unknown methods get status codes, the server keeps serving") {
  both_fronts f;
  const auto port = f.grpc_srv.port();
  const std::string infer = "/inference.GRPCInferenceService/ModelInfer";
  CHECK(raw_call(port, infer, "\xff\xff\xff\xff garbage").error_code() == ::grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(raw_call(port, "/inference.GRPCInferenceService/NoSuchCall", "").error_code() ==
        ::grpc::StatusCode::UNIMPLEMENTED);
  CHECK(raw_call(port, "/other.Service/ModelInfer", "").error_code() == ::grpc::StatusCode::UNIMPLEMENTED);
  // an empty ModelInferRequest: no model name
  CHECK(raw_call(port, infer, "").error_code() == ::grpc::StatusCode::NOT_FOUND);
  auto c = cl::jit_client::create(options_for({f.grpc_url()})).value();
  CHECK(c.embed(text_request({"still here"})).get().has_value());
}

TEST_CASE("grpcs://: a TLS file that is not PEM, or a key of another certificate, is named before gRPC starts") {
  const auto& pki = tls_test::files();
  server::server_config sc;
  server::model_config mc;
  mc.name = "text-embed";
  mc.params = {{"text_dim", 16}, {"text_max_length", 8}};
  sc.models = {mc};
  auto svc = server::service::create(sc).value();
  const auto start = [&](std::string cert, std::string key, std::string root = {}) {
    server::grpc_server_options go;
    go.tls_cert_file = std::move(cert);
    go.tls_key_file = std::move(key);
    go.tls_root_cert_file = std::move(root);
    return server::grpc_server::create(go, svc);
  };
  auto garbage_cert = start(pki.garbage, pki.key);
  REQUIRE_FALSE(garbage_cert.has_value());
  CHECK(garbage_cert.code() == errc::invalid_argument);
  CHECK(garbage_cert.error().message.find("certificate file '" + pki.garbage + "' is not a PEM") != std::string::npos);
  auto garbage_key = start(pki.cert, pki.garbage);
  REQUIRE_FALSE(garbage_key.has_value());
  CHECK(garbage_key.error().message.find("key file '" + pki.garbage + "' is not a PEM private key") !=
        std::string::npos);
  auto mismatch = start(pki.cert, pki.other_name_key);
  REQUIRE_FALSE(mismatch.has_value());
  CHECK(mismatch.error().message.find("does not match the certificate") != std::string::npos);
  auto bad_root = start(pki.cert, pki.key, pki.garbage);
  REQUIRE_FALSE(bad_root.has_value());
  CHECK(bad_root.error().message.find("root certificate file '" + pki.garbage + "' holds no PEM") != std::string::npos);
  auto missing = start(pki.cert, pki.dir + "/nope.key");
  CHECK(missing.code() == errc::io_error);
  CHECK(start(pki.cert, pki.key).has_value());
  server::grpc_server_options zero;
  zero.stream.window = 0;
  CHECK(server::grpc_server::create(zero, svc).code() == errc::invalid_argument);
}

TEST_CASE("grpcs://: TLS with the service's certificate, a bearer token, a wrong CA never gets an answer") {
  const auto& pki = tls_test::files();
  server::server_config sc;
  sc.preprocess_threads = 2;
  sc.auth_token = "s3cret";
  server::model_config mc;
  mc.name = "text-embed";
  mc.params = {{"text_dim", 16}, {"text_max_length", 8}};
  sc.models = {mc};
  auto svc = server::service::create(sc).value();
  server::grpc_server_options go;
  go.tls_cert_file = pki.cert;
  go.tls_key_file = pki.key;
  auto g = server::grpc_server::create(go, svc).value();
  const std::string url = "grpcs://127.0.0.1:" + std::to_string(g.port());
  auto o = options_for({url});
  o.tls_ca_file = pki.ca_cert;
  o.auth_token = "s3cret";
  auto c = cl::jit_client::create(o).value();
  auto r = c.embed(text_request({"over tls", "two"})).get();
  REQUIRE_MESSAGE(r, (r ? "" : r.error().message));
  CHECK(r->endpoint == url);
  CHECK(c.identity("text-embed").has_value());

  o.auth_token = "wrong";
  auto denied = cl::jit_client::create(o).value();
  CHECK(denied.embed(text_request({"x"})).get().code() == errc::invalid_argument);  // UNAUTHENTICATED: fix the token

  o.auth_token = "s3cret";
  o.tls_ca_file = pki.wrong_ca_cert;
  o.request_timeout = 1s;
  auto wrong_ca = cl::jit_client::create(o).value();
  const auto w = wrong_ca.embed(text_request({"x"})).get();
  CHECK_FALSE(w.has_value());
  CHECK(c.embed(text_request({"still serving"})).get().has_value());

  // a plaintext client against the TLS port fails too (bounded by its deadline)
  auto plain = cl::jit_client::create([&] {
                 auto p = options_for({"grpc://127.0.0.1:" + std::to_string(g.port())});
                 p.request_timeout = 1s;
                 return p;
               }())
                   .value();
  CHECK_FALSE(plain.embed(text_request({"x"})).get().has_value());
}

TEST_CASE(
    "compressed tensors: offered outputs come back compressed when it pays, inputs too, same values, bad frames "
    "refused") {
  both_fronts f;
  // 600 rows: the mask output (600 x 8 bytes, mostly 0/1) is past the 4 KiB floor and compresses well; the
  // client decompresses it to the same values
  std::vector<std::string> rows;
  for (int i = 0; i < 600; ++i) rows.push_back("a caption about the sea number " + std::to_string(i));
  for (const auto& url : {f.http_url(), f.grpc_url()}) {
    CAPTURE(url);
    auto plain_o = options_for({url});
    plain_o.offer_compression = false;
    auto packed_o = options_for({url});
    packed_o.offer_compression = true;
    packed_o.compress_on_loopback = true;  // the test server is on loopback, where it is not offered by default
    packed_o.compress_inputs = true;
    auto plain = cl::jit_client::create(plain_o).value();
    auto packed = cl::jit_client::create(packed_o).value();
    auto a = plain.embed(text_request(rows)).get();
    auto b = packed.embed(text_request(rows)).get();
    REQUIRE(a);
    REQUIRE(b);
    CHECK(same_outputs(*a, *b));
  }
  // On the wire (HTTP, by hand): the mask (600 rows x 8 bytes, past the 4 KiB floor) is compressed and
  // marked, the raw size announced
  namespace ks = jitembed::net::kserve;
  std::vector<std::string_view> views(rows.begin(), rows.end());
  auto in = ks::infer_tensor::from_strings("text", {static_cast<std::int64_t>(rows.size()), 1}, views);
  ks::infer_request req;
  req.inputs.push_back(std::move(in));
  req.parameters = ks::json::object();
  req.parameters["jitembed_compression"] = "zstd_shuffle";
  req.parameters["binary_data_output"] = true;
  auto msg = ks::encode_request(req).value();
  http::client hc("127.0.0.1", f.http_srv.port(), {});
  http::header_list h{{"Inference-Header-Content-Length", std::to_string(*msg.header_length)}};
  auto resp = hc.post("/v2/models/text-embed/infer", msg.flatten(), h).value();
  REQUIRE(resp.status == 200);
  std::optional<std::size_t> hl;
  for (const auto& [k, v] : resp.headers)
    if (k == "Inference-Header-Content-Length" || k == "inference-header-content-length") hl = std::stoull(v);
  auto decoded = ks::decode_response(resp.body, hl).value();
  const auto* mask = decoded.find_output("mask");
  REQUIRE(mask);
  CHECK(mask->parameters["jitembed_compression"] == "zstd_shuffle");
  const auto raw = mask->parameters["jitembed_raw_byte_size"].get<std::uint64_t>();
  CHECK(raw == 600 * 8);  // text_max_length 8 bytes per row
  CHECK(mask->data.size() < raw);

  // A compressed input whose frame is garbage: 400 decode_failed; one announcing more than max_body_bytes:
  // limit_exceeded, before any allocation
  for (const auto& [raw_size, want] :
       {std::pair<std::uint64_t, int>{100, 400}, std::pair<std::uint64_t, int>{1ull << 40, 400}}) {
    std::string junk(64, 'x');
    auto t = ks::infer_tensor::owned("text", ks::datatype::bytes, {1, 1},
                                     byte_buffer(reinterpret_cast<const std::byte*>(junk.data()),
                                                 reinterpret_cast<const std::byte*>(junk.data()) + junk.size()));
    ks::mark_compressed(t, raw_size);
    ks::infer_request bad;
    bad.inputs.push_back(std::move(t));
    auto m = ks::encode_request(bad).value();
    http::header_list bh{{"Inference-Header-Content-Length", std::to_string(*m.header_length)}};
    auto r = hc.post("/v2/models/text-embed/infer", m.flatten(), bh).value();
    CHECK(r.status == want);
    CHECK(r.body.find(raw_size > 1000 ? "limit_exceeded" : "decode_failed") != std::string::npos);
  }
  auto c = cl::jit_client::create(options_for({f.http_url()})).value();
  CHECK(c.embed(text_request({"still here"})).get().has_value());
}

TEST_CASE("grpc:// on this host: rows and outputs through a registered shared-memory region, bitwise HTTP's") {
  both_fronts f;
  auto shm_opts = options_for({f.grpc_url()});
  shm_opts.shared_memory.min_bytes = 0;  // these requests are small
  auto over_grpc = cl::jit_client::create(shm_opts).value();
  auto plain_opts = options_for({f.http_url()});
  plain_opts.shared_memory.enabled = false;
  auto over_http = cl::jit_client::create(plain_opts).value();
  REQUIRE(jitembed::test::eventually([&] { return over_grpc.stats().endpoints[0].shared_memory; }));
  for (int i = 0; i < 6; ++i) {
    const std::vector<std::string> rows = {"row " + std::to_string(i), "a cat", std::string(i * 3, 'x')};
    auto g = over_grpc.embed(text_request(rows)).get();
    auto h = over_http.embed(text_request(rows)).get();
    REQUIRE_MESSAGE(g, (g ? std::string() : g.error().message));
    REQUIRE(h);
    CHECK(same_outputs(*h, *g));
  }
  const auto st = over_grpc.stats();
  CHECK(st.shared_memory_attempts == 5);  // the first answer taught the output sizes
  CHECK(st.shared_memory_fallbacks == 0);
  CHECK(over_http.stats().shared_memory_attempts == 0);
}

TEST_CASE("grpc:// typed rows: INT64 / INT32 input_ids equal the captions over HTTP (raw, compressed, shared memory)") {
  server::server_config sc;
  sc.preprocess_threads = 1;
  auto svc = server::service::create(sc).value();
  server::model_config mc;
  mc.name = "ids";
  REQUIRE(svc.load(mc, models::any_model(ids_test::ids_model{})));
  auto http_srv = http::server::create(http::server_options{}, svc.as_handler()).value();
  auto grpc_srv = server::grpc_server::create(server::grpc_server_options{}, svc).value();
  const std::string grpc_url = "grpc://127.0.0.1:" + std::to_string(grpc_srv.port());
  auto over_http = cl::jit_client::create(options_for({"http://127.0.0.1:" + std::to_string(http_srv.port())})).value();
  std::vector<std::string> captions;
  for (int i = 0; i < 300; ++i)
    captions.push_back("caption " + std::to_string(i));  // 300 x 32 bytes of ids: compressible
  std::vector<std::vector<std::int64_t>> i64;
  std::vector<std::vector<std::int32_t>> i32;
  for (const auto& c : captions) {
    i64.push_back(ids_test::ids_of<std::int64_t>(c.substr(c.size() - 4)));
    i32.push_back(ids_test::ids_of<std::int32_t>(c.substr(c.size() - 4)));
  }
  cl::embed_request strings;
  strings.model = "ids";
  strings.input = "text";
  std::vector<std::string> tails;
  for (const auto& c : captions) tails.push_back(c.substr(c.size() - 4));
  for (const auto& t : tails) strings.rows.push_back(as_bytes_view(t));
  const auto want = over_http.embed(strings).get();
  REQUIRE(want);
  const auto typed = [&](std::string datatype, const auto& rows, std::size_t n) {
    cl::embed_request r;
    r.model = "ids";
    r.input = "input_ids";
    r.datatype = std::move(datatype);
    r.row_shape = {4};
    for (std::size_t i = 0; i < n; ++i) r.rows.push_back(ids_test::bytes_of(rows[i]));
    return r;
  };
  auto plain_o = options_for({grpc_url});
  plain_o.shared_memory.enabled = false;
  auto packed_o = plain_o;
  packed_o.compress_inputs = true;
  auto shm_o = options_for({grpc_url});
  shm_o.shared_memory.min_bytes = 0;
  auto plain = cl::jit_client::create(plain_o).value();
  auto packed = cl::jit_client::create(packed_o).value();
  auto shm = cl::jit_client::create(shm_o).value();
  REQUIRE(jitembed::test::eventually([&] { return shm.stats().endpoints[0].shared_memory; }));
  for (auto* c : {&plain, &packed, &shm}) {
    for (int k = 0; k < 2; ++k) {  // twice: the shared-memory client learns the output sizes from its first answer
      auto a = c->embed(typed("INT64", i64, captions.size())).get();
      auto b = c->embed(typed("INT32", i32, captions.size())).get();
      REQUIRE_MESSAGE(a, (a ? std::string() : a.error().message));
      REQUIRE_MESSAGE(b, (b ? std::string() : b.error().message));
      CHECK(a->endpoint == grpc_url);
      CHECK(same_outputs(*a, *want));
      CHECK(same_outputs(*b, *want));
    }
  }
  CHECK(shm.stats().shared_memory_attempts == 3);
  CHECK(shm.stats().shared_memory_fallbacks == 0);
  // the server's error keeps its errc over gRPC: ids of another length
  auto five = typed("INT64", i64, 1);
  five.row_shape = {2};
  five.rows[0] = five.rows[0].first(16);
  CHECK(plain.embed(five).get().code() == errc::invalid_argument);
}
