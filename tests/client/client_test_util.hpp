// Test peers for the JIT client: scripted KServe servers on 127.0.0.1 (answer, fail with a status, delay,
// hang) whose answer is a function of the row bytes the test recomputes, and an in-process jitembed service.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "jitembed/client/jit_client.hpp"
#include "jitembed/net/http/server.hpp"
#include "jitembed/net/kserve.hpp"
#include "jitembed/server.hpp"
#include "tls_test_util.hpp"

namespace client_test {

using namespace jitembed;
namespace ks = jitembed::net::kserve;
namespace http = jitembed::net::http;
using namespace std::chrono_literals;

inline constexpr int kDim = 4;

// The fake model: out[j] = float(sum of bytes * (j + 1) mod 1009).
inline std::vector<float> fake_embedding(std::string_view row) {
  std::vector<float> v(kDim);
  for (int j = 0; j < kDim; ++j) {
    unsigned long s = 0;
    for (unsigned char c : row) s += c * static_cast<unsigned long>(j + 1);
    v[j] = static_cast<float>(s % 1009);
  }
  return v;
}

// What a scripted server does with one request.
struct action {
  int status = 200;               // 200: answer with the fake model
  std::chrono::milliseconds delay{0};
  bool hang = false;              // never answer (until the server stops)
  std::string body;               // for non-200
};

struct seen_request {
  std::size_t rows = 0;
  std::int64_t timeout_us = -1;
  std::string model;
};

// A KServe server on 127.0.0.1:0 answering per `script` (called for every infer request).
class fake_server {
 public:
  using script_fn = std::function<action(const seen_request&, const std::vector<std::string_view>& rows)>;

  // tls: HTTPS with tls_test::files()' certificate (127.0.0.1, ::1, localhost).
  explicit fake_server(script_fn script, bool tls = false) : script_(std::move(script)), tls_(tls) {
    http::server_options o;
    o.io_threads = 1;
    if (tls) {
      o.tls_cert_file = tls_test::files().cert;
      o.tls_key_file = tls_test::files().key;
    }
    srv_.emplace(http::server::create(o, [this](http::request&& req, http::responder respond) {
                   handle(std::move(req), std::move(respond));
                 }).value());
    port_ = srv_->port();
    delayer_ = std::thread([this] { run_delayed(); });
  }
  ~fake_server() { stop(); }

  std::string url() const { return (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(port_); }
  http::server_stats server_stats() const { return srv_->stats(); }
  std::uint16_t port() const { return port_; }
  std::size_t requests() const { return requests_.load(); }
  std::size_t rows() const { return rows_.load(); }
  std::vector<seen_request> seen() const {
    std::lock_guard lk(mu_);
    return seen_;
  }

  void stop() {
    {
      std::lock_guard lk(mu_);
      if (stopped_) return;
      stopped_ = true;
      hung_.clear();  // drops the responders of hung requests (their connections close)
    }
    cv_.notify_all();
    if (delayer_.joinable()) delayer_.join();
    srv_->stop(100ms);
  }

 private:
  void handle(http::request&& req, http::responder respond) {
    if (req.method == "GET") {
      // readiness and metadata: every model is ready
      http::response r;
      r.status = 200;
      r.body = "{\"name\":\"fake\",\"parameters\":{\"fingerprint\":\"fake-1\",\"preprocess_key\":\"bytes\"}}";
      return respond(std::move(r));
    }
    std::optional<std::size_t> hl;
    if (auto h = http::find_header(req.headers, "Inference-Header-Content-Length"); !h.empty()) hl = std::stoull(std::string(h));
    auto decoded = ks::decode_request(req.body, hl);
    if (!decoded) return respond(error(400, decoded.error().message));
    seen_request s;
    const auto* in = decoded->inputs.empty() ? nullptr : &decoded->inputs[0];
    auto rows = in ? in->strings() : result<std::vector<std::string_view>>(fail(errc::invalid_argument, "no input"));
    if (!rows) return respond(error(400, rows.error().message));
    s.rows = rows->size();
    if (decoded->parameters.is_object() && decoded->parameters.contains("timeout")) {
      s.timeout_us = decoded->parameters["timeout"].get<std::int64_t>();
    }
    const auto p = req.target.find("/models/");
    s.model = req.target.substr(p + 8, req.target.find('/', p + 8) - (p + 8));
    requests_++;
    rows_ += s.rows;
    {
      std::lock_guard lk(mu_);
      seen_.push_back(s);
    }
    const action a = script_(s, *rows);
    http::response r = a.status == 200 ? answer(*decoded, *rows) : error(a.status, a.body.empty() ? "scripted" : a.body);
    if (a.status == 503) r.headers.emplace_back("Retry-After", "1");
    if (a.hang) {
      std::lock_guard lk(mu_);
      hung_.push_back(std::move(respond));
      return;
    }
    if (a.delay.count() == 0) return respond(std::move(r));
    {
      std::lock_guard lk(mu_);
      delayed_.push_back({std::chrono::steady_clock::now() + a.delay, std::move(r), std::move(respond)});
    }
    cv_.notify_all();
  }

  static http::response error(int status, const std::string& msg) {
    http::response r;
    r.status = status;
    r.body = ks::error_body(msg);
    r.headers.emplace_back("Content-Type", "application/json");
    return r;
  }

  static http::response answer(const ks::infer_request& req, const std::vector<std::string_view>& rows) {
    std::vector<float> flat;
    for (auto row : rows) {
      auto v = fake_embedding(row);
      flat.insert(flat.end(), v.begin(), v.end());
    }
    ks::infer_response resp;
    resp.model_name = req.model.empty() ? "fake" : req.model;
    resp.model_version = "1";
    resp.outputs.push_back(ks::infer_tensor::from_values<float>("EMBEDDING", {static_cast<std::int64_t>(rows.size()), kDim}, flat, true));
    auto msg = ks::encode_response(resp).value();
    http::response r;
    r.body = msg.flatten();
    if (msg.header_length) r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(*msg.header_length));
    r.headers.emplace_back("Content-Type", "application/octet-stream");
    return r;
  }

  struct delayed {
    std::chrono::steady_clock::time_point at;
    http::response r;
    http::responder respond;
  };

  void run_delayed() {
    std::unique_lock lk(mu_);
    while (!stopped_) {
      if (delayed_.empty()) {
        cv_.wait(lk);
        continue;
      }
      auto next = std::min_element(delayed_.begin(), delayed_.end(), [](auto& a, auto& b) { return a.at < b.at; });
      if (next->at > std::chrono::steady_clock::now()) {
        cv_.wait_until(lk, next->at);
        continue;
      }
      auto d = std::move(*next);
      delayed_.erase(next);
      lk.unlock();
      d.respond(std::move(d.r));
      lk.lock();
    }
    delayed_.clear();
  }

  script_fn script_;
  bool tls_ = false;
  std::optional<http::server> srv_;
  std::uint16_t port_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<delayed> delayed_;
  std::vector<http::responder> hung_;
  std::vector<seen_request> seen_;
  bool stopped_ = false;
  std::atomic<std::size_t> requests_{0}, rows_{0};
  std::thread delayer_;
};

inline fake_server::script_fn always_ok() {
  return [](const seen_request&, const std::vector<std::string_view>&) { return action{}; };
}

// An embed_request over string rows (the views point into `rows`; embed() copies them before returning).
inline client::embed_request request(const std::string& model, const std::vector<std::string>& rows) {
  client::embed_request r;
  r.model = model;
  r.input = "INPUT0";
  for (const auto& s : rows) r.rows.push_back(as_bytes_view(s));
  return r;
}

// Waits for every future; returns the results in order.
inline std::vector<result<client::embed_result>> wait_all(std::vector<std::future<result<client::embed_result>>>& fs) {
  std::vector<result<client::embed_result>> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

// True when `r` holds the fake model's embedding of each row.
inline bool matches_fake(const client::embed_result& r, const std::vector<std::string>& rows) {
  const tensor* t = r.find("EMBEDDING");
  if (!t || t->shape()[0] != static_cast<std::int64_t>(rows.size()) || t->shape()[1] != kDim) return false;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!r.row_ok(i)) continue;
    const auto want = fake_embedding(rows[i]);
    if (std::memcmp(t->data<float>() + i * kDim, want.data(), kDim * sizeof(float)) != 0) return false;
  }
  return true;
}
}  // namespace client_test
