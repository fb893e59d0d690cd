// jitembed-server: serves embedding models over KServe v2 / Triton HTTP (jitembed::server::service on
// jitembed::net::http::server). With no model flags it serves image-latent, video-latent and text-embed.
// SIGTERM / SIGINT: stop accepting, drain in-flight requests, exit 0.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <pthread.h>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#if defined(JITEMBED_HAS_TORCH)
#include "jitembed/models/torch_repository.hpp"  // LibTorch first (its glog macros)
#endif
#include "jitembed/models/reference.hpp"
#include "jitembed/net/http/server.hpp"
#include "jitembed/server.hpp"
#if defined(JITEMBED_SERVER_GRPC)
#include "server_grpc.hpp"
#endif
#if defined(JITEMBED_HAS_REPOSITORY)
#include "jitembed/server/repository/model_repository.hpp"
#endif
#if defined(JITEMBED_SERVER_GPU)
#include "jitembed/cuda/ipc_backend.hpp"
#include "server_gpu_models.hpp"
#endif

namespace {

using namespace jitembed;

int fail_exit(const std::string& what) {
  std::cerr << "error: " << what << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"jitembed-server: KServe v2 / Triton HTTP embedding service"};
  std::string config_file, host, auth_token_file, model_repository, tls_cert, tls_key;
  int port = -1, io_threads = 0, preprocess_threads = -1;
  std::vector<std::string> model_flags;
  std::size_t instances = 0, max_batch = 0, queue_size = 0, max_inflight_rows = 0;
  std::int64_t max_queue_delay_us = -1;
  std::int64_t drain_grace_ms = 0;
  app.add_option("--config", config_file, "JSON configuration file (flags override it)");
  app.add_option("--host", host, "address to bind (default 127.0.0.1)");
  app.add_option("--port", port, "port (default 8000; 0 = ephemeral)")->check(CLI::Range(0, 65535));
  app.add_option("--model", model_flags, "NAME[:k=v,...] to serve (repeatable); default: the reference embedders");
  app.add_option(
      "--model-repository", model_repository,
      "Triton-style model repository DIR (<model>/config.pbtxt, numbered version directories): serves its models; "
      "/v2/repository load / unload re-read it");
  app.add_option("--instances", instances, "runner threads per model")->check(CLI::Range(1, 1024));
  app.add_option("--max-batch", max_batch, "max batch size per model (default: the model's)");
  app.add_option("--max-queue-delay-us", max_queue_delay_us, "dynamic batching delay in microseconds")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--queue-size", queue_size, "queued rows per model before 503");
  app.add_option("--max-inflight-rows", max_inflight_rows,
                 "rows admitted per model (decode to response) before an immediate 503 (default 2 x queue size)");
  app.add_option("--auth-token-file", auth_token_file,
                 "file holding the bearer token required on every route but health");
  app.add_option("--io-threads", io_threads, "HTTP I/O threads")->check(CLI::Range(1, 1024));
  auto* cert_opt = app.add_option("--tls-cert", tls_cert,
                                  "HTTPS: the server's certificate chain, PEM (leaf first); needs --tls-key");
  auto* key_opt = app.add_option("--tls-key", tls_key, "HTTPS: the private key of --tls-cert, PEM");
  cert_opt->needs(key_opt);
  key_opt->needs(cert_opt);
  app.add_option("--drain-grace-ms", drain_grace_ms,
                 "on SIGTERM: answer readiness and new requests 503 for this long before closing the listener")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{600000}));
  std::string device = "auto";
  app.add_option("--device", device, "where the reference embedders run: auto (the GPU when there is one), gpu, cpu")
      ->check(CLI::IsMember({"auto", "gpu", "cpu"}));
  app.add_option("--preprocess-threads", preprocess_threads, "decode/preprocess threads (0 = hardware)")
      ->check(CLI::Range(0, 1024));
  double compression_min_saving = -1;
  app.add_option(
         "--compression-min-saving", compression_min_saving,
         "outputs go compressed to clients that offer it only when that saves this fraction (default 0.1; 1: never)")
      ->check(CLI::Range(0.0, 1.0));
  int grpc_port = -1;
  std::string grpc_cert, grpc_key, grpc_root_cert;
  app.add_option(
         "--grpc-port", grpc_port,
         "also serve KServe v2 gRPC (inference.GRPCInferenceService) on this port (0 = ephemeral; default: no gRPC)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--grpc-server-cert", grpc_cert,
                 "gRPC TLS: the server certificate chain (PEM); with --grpc-server-key");
  app.add_option("--grpc-server-key", grpc_key, "gRPC TLS: the server's private key (PEM)");
  app.add_option("--grpc-root-cert", grpc_root_cert,
                 "gRPC mutual TLS: clients must present a certificate this CA (PEM) signed");
  CLI11_PARSE(app, argc, argv);

  server::server_config cfg;
  if (!config_file.empty()) {
    auto c = server::server_config::open(config_file);
    if (!c) return fail_exit(std::string(to_string(c.code())) + ": " + c.error().message);
    cfg = std::move(*c);
  }
  if (!host.empty()) cfg.host = host;
  if (port >= 0) cfg.port = static_cast<std::uint16_t>(port);
  if (io_threads > 0) cfg.io_threads = static_cast<std::size_t>(io_threads);
  if (preprocess_threads >= 0) cfg.preprocess_threads = static_cast<std::size_t>(preprocess_threads);
  if (compression_min_saving >= 0) cfg.compression.min_saving = compression_min_saving;
  if (!auth_token_file.empty()) cfg.auth_token_file = auth_token_file;
  if (!model_repository.empty()) cfg.model_repository = model_repository;
  if (auto r = server::load_auth_token(cfg); !r)
    return fail_exit(std::string(to_string(r.code())) + ": " + r.error().message);
#if defined(JITEMBED_SERVER_GPU)
  cfg.cuda_ipc = any_cuda_ipc_backend(cuda::ipc_backend{});  // Triton's CUDA shared-memory extension
#endif

  server::model_config defaults;
  const auto apply_flags = [&](server::model_config& m) {
    if (instances) m.instances = instances;
    if (max_batch) m.max_batch_size = max_batch;
    if (max_queue_delay_us >= 0) m.max_queue_delay_us = max_queue_delay_us;
    if (queue_size) m.queue_size = queue_size;
    if (max_inflight_rows) m.max_inflight_rows = max_inflight_rows;
  };
  apply_flags(defaults);
  if (!model_flags.empty()) {
    cfg.models.clear();
    for (const auto& f : model_flags) {
      auto m = server::parse_model_spec(f, defaults);
      if (!m) return fail_exit(m.error().message);
      cfg.models.push_back(std::move(*m));
    }
  } else if (cfg.models.empty() && cfg.model_repository.empty()) {
    for (auto name : models::kReferenceModelNames) {
      server::model_config m = defaults;
      m.name = std::string(name);
      cfg.models.push_back(std::move(m));
    }
  } else {
    for (auto& m : cfg.models) apply_flags(m);
  }

  // Signals go to the thread that waits for them, not to the I/O or runner threads started below.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  // The reference embedders run on GPU 0 when there is one (and this build has the CUDA component), else on
  // the CPU; --device gpu makes a missing GPU an error.
  server::model_factory factory = [device](std::string_view name,
                                           const nlohmann::json& params) -> result<models::any_model> {
    auto o = server::parse_reference_params(params);
    if (!o) return o.error();
    if (device != "cpu") {
#if defined(JITEMBED_SERVER_GPU)
      auto gpu = tools::make_gpu_reference_model(name, *o, 0);
      if (gpu || gpu.code() != errc::not_found || device == "gpu") return gpu;
#else
      if (device == "gpu") return fail(errc::not_found, "this jitembed-server was built without the CUDA component");
#endif
    }
    return models::reference_model::create(name, *o);
  };
  auto svc_made = server::service::create(cfg, factory);
  if (!svc_made) return fail_exit(std::string(to_string(svc_made.code())) + ": " + svc_made.error().message);
  auto& svc = *svc_made;
  if (!cfg.model_repository.empty()) {
#if defined(JITEMBED_HAS_REPOSITORY)
    server::repository_options ro;
    ro.log = [](const std::string& line) { std::fprintf(stderr, "jitembed-server: %s\n", line.c_str()); };
#if defined(JITEMBED_HAS_TORCH)
    ro.backends.add("pytorch_libtorch", models::torch_script_backend());
    ro.backends.add("torch_aoti", models::torch_aoti_backend());
#endif
    auto repo = server::model_repository::open(cfg.model_repository, std::move(ro));
    if (!repo) return fail_exit(std::string(to_string(repo.code())) + ": " + repo.error().message);
    // A model that fails is logged and in /v2/repository/index with its reason; the others serve.
    repo->load_all(svc);
    svc.attach(*repo);
#else
    return fail_exit(
        "--model-repository: this jitembed-server was built without the repository component "
        "(JITEMBED_WITH_REPOSITORY)");
#endif
  }

  net::http::server_options ho;
  ho.host = cfg.host;
  ho.port = cfg.port;
  ho.io_threads = static_cast<int>(cfg.io_threads);
  ho.max_header_bytes = cfg.protocol.max_header_bytes;
  ho.max_body_bytes = cfg.protocol.max_body_bytes;
  ho.tls_cert_file = tls_cert;
  ho.tls_key_file = tls_key;
  auto http_made = net::http::server::create(ho, svc.as_handler());
  if (!http_made) return fail_exit(std::string(to_string(http_made.code())) + ": " + http_made.error().message);
  auto& http = *http_made;
#if defined(JITEMBED_SERVER_GRPC)
  std::unique_ptr<jitembed_tools::grpc_front> grpc;
  if (grpc_port >= 0) {
    server::grpc_server_options go;
    go.host = cfg.host;
    go.port = static_cast<std::uint16_t>(grpc_port);
    go.max_message_bytes = cfg.protocol.max_body_bytes;
    go.tls_cert_file = grpc_cert;
    go.tls_key_file = grpc_key;
    go.tls_root_cert_file = grpc_root_cert;
    auto made = jitembed_tools::start_grpc_front(go, svc);
    if (!made) return fail_exit(std::string(to_string(made.code())) + ": --grpc-port: " + made.error().message);
    grpc = std::move(*made);
  }
#else
  if (grpc_port >= 0)
    return fail_exit("--grpc-port: this jitembed-server was built without the grpc component (JITEMBED_WITH_GRPC)");
#endif
  std::printf("jitembed-server listening on %s\n", http.url().c_str());
#if defined(JITEMBED_SERVER_GRPC)
  if (grpc)
    std::printf("jitembed-server gRPC listening on %s:%u\n", cfg.host.c_str(), static_cast<unsigned>(grpc->port()));
#endif
  for (const auto& [name, version] : svc.loaded())
    std::printf("  model %s version %s\n", name.c_str(), version.c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&sigs, &sig);
  std::fprintf(stderr, "jitembed-server: %s, draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  svc.begin_drain();  // readiness 503 and new infer requests 503 unavailable from here on
  // Keep accepting for a while so that load balancers and JIT clients see the 503s and move elsewhere.
  if (drain_grace_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(drain_grace_ms));
  http.stop(std::chrono::seconds(10));  // in-flight requests finish and are answered
#if defined(JITEMBED_SERVER_GRPC)
  if (grpc) grpc->stop(std::chrono::seconds(10));
#endif
  svc.shutdown();
  return 0;
}
