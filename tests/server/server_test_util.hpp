// Helpers for the service tests: synchronous calls into service::handle, KServe request building,
// generated JPEG / MP4 / record inputs.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/codec/jpeg.hpp"
#include "jitembed/codec/video_encode.hpp"
#include "jitembed/format/record_builder.hpp"
#include "jitembed/net/kserve.hpp"
#include "jitembed/server.hpp"

namespace server_test {

using namespace jitembed;
namespace ks = jitembed::net::kserve;
namespace http = jitembed::net::http;

struct reply {
  int status = 0;
  http::header_list headers;
  std::string body;  // body + pieces, flattened
  std::string header(std::string_view name) const { return std::string(http::find_header(headers, name)); }
};

inline reply flatten(http::response r) {
  reply out;
  out.status = r.status;
  out.headers = r.headers;
  out.body = r.body;
  for (auto p : r.pieces) out.body.append(reinterpret_cast<const char*>(p.data()), p.size());
  return out;
}

// Sends a request without waiting; the reply arrives on the future.
inline std::future<reply> send(server::service& s, std::string method, std::string target, std::string body = {},
                               http::header_list headers = {}) {
  auto p = std::make_shared<std::promise<reply>>();
  auto fut = p->get_future();
  http::request req;
  req.method = std::move(method);
  req.target = std::move(target);
  req.body = std::move(body);
  req.headers = std::move(headers);
  s.handle(std::move(req), [p](http::response r) { p->set_value(flatten(std::move(r))); });
  return fut;
}

// Calls a handler (service::as_handler()) with one request and waits for its response.
inline reply call_handler(const http::handler& h, std::string method, std::string target, std::string body = {},
                          http::header_list headers = {}) {
  auto p = std::make_shared<std::promise<reply>>();
  auto fut = p->get_future();
  http::request req;
  req.method = std::move(method);
  req.target = std::move(target);
  req.body = std::move(body);
  req.headers = std::move(headers);
  h(std::move(req), [p](http::response r) { p->set_value(flatten(std::move(r))); });
  REQUIRE(fut.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  return fut.get();
}

// Sends one request and waits for its response (the service answers from any thread).
inline reply call(server::service& s, std::string method, std::string target, std::string body = {}, http::header_list headers = {}) {
  auto fut = send(s, std::move(method), std::move(target), std::move(body), std::move(headers));
  if (fut.wait_for(std::chrono::seconds(30)) != std::future_status::ready) throw std::runtime_error("no response in 30 s");
  return fut.get();
}

struct encoded_request {
  std::string body;
  http::header_list headers;
};

// A KServe request with one BYTES input of shape [rows, 1] (binary unless `binary` is false).
inline encoded_request bytes_request(std::string input, const std::vector<std::string_view>& rows, bool binary = true,
                                     std::vector<ks::requested_output> outputs = {}, ks::json params = ks::json::object()) {
  ks::infer_request r;
  r.id = "req-1";
  if (!params.empty()) r.parameters = params;
  r.inputs.push_back(ks::infer_tensor::from_strings(std::move(input), {static_cast<std::int64_t>(rows.size()), 1}, rows, binary));
  r.outputs = std::move(outputs);
  auto m = ks::encode_request(r).value();
  encoded_request e;
  e.body = m.flatten();
  if (m.header_length) e.headers.emplace_back("Inference-Header-Content-Length", std::to_string(*m.header_length));
  return e;
}

// A KServe request with these (typed) inputs, binary.
inline encoded_request tensors_request(std::vector<ks::infer_tensor> inputs) {
  ks::infer_request r;
  r.id = "req-1";
  r.inputs = std::move(inputs);
  auto m = ks::encode_request(r).value();
  encoded_request e;
  e.body = m.flatten();
  if (m.header_length) e.headers.emplace_back("Inference-Header-Content-Length", std::to_string(*m.header_length));
  return e;
}

inline reply infer(server::service& s, const std::string& model, const encoded_request& e, const std::string& version = {}) {
  const std::string target = "/v2/models/" + model + (version.empty() ? "" : "/versions/" + version) + "/infer";
  return call(s, "POST", target, e.body, e.headers);
}

inline ks::infer_response decode(const reply& r) {
  std::optional<std::size_t> hl;
  if (auto h = r.header("Inference-Header-Content-Length"); !h.empty()) hl = std::stoull(h);
  return ks::decode_response(r.body, hl).value();
}

inline tensor random_image(std::int64_t h, std::int64_t w, unsigned seed) {
  tensor t = tensor::empty({h, w, 3}, dtype::u8);
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < t.nbytes(); ++i) t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(rng() % 64 + (i % 97));
  return t;
}

inline std::string jpeg_bytes(std::int64_t h, std::int64_t w, unsigned seed) {
  auto b = codec::encode_jpeg(random_image(h, w, seed), {.quality = 85}).value();
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

inline std::string mp4_bytes(unsigned seed) {
  tensor src = tensor::empty({6, 48, 64, 3}, dtype::u8);
  for (std::size_t i = 0; i < src.nbytes(); ++i) src.data<std::uint8_t>()[i] = static_cast<std::uint8_t>((i * 7 + seed * 13) / 5);
  auto b = codec::encode_video(src, {.fps = 12.0}).value();
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// A service config with one text-embed model (dim 8, max length 8), one preprocess thread, and an
// emulated encoder time of `sleep_us` per batch.
inline server::server_config text_config(std::int64_t sleep_us = 0) {
  server::server_config c;
  c.preprocess_threads = 1;
  server::model_config m;
  m.name = "text-embed";
  m.params = nlohmann::json{{"text_dim", 8}, {"text_max_length", 8}};
  if (sleep_us) m.params["sleep_us"] = sleep_us;
  c.models.push_back(m);
  return c;
}

inline std::string_view sv(const byte_buffer& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

}  // namespace server_test
