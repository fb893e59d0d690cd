// Options of the JIT client: where the servers are, deadlines, retries, hedging, balancing, local mode.
// Boost-free, so a CLI or config loader can fill them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jitembed/codec/zstd_wire_options.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/models/any_model.hpp"

namespace jitembed::client {

// Where the endpoint list comes from (exactly one of the three, or local_models instead).
// Text format (file and URL): one endpoint URL per line, `http://host:port` or `https://host:port` (mixed
// lists work); blank lines and `#` comments are ignored (see parse_endpoint_list in client/endpoints.hpp).
struct endpoint_source {
  std::vector<std::string> list;           // fixed list of URLs
  std::string file;                        // re-read when its modification time or size changes
  std::string url;                         // GET this URL (http[s]://host:port/path); the body is the text format
  std::chrono::milliseconds refresh{250};  // how often file / url are checked
};

// What the cache key of a model's embeddings is made of. jitembed-server publishes both in its model
// metadata (parameters.fingerprint, parameters.preprocess_key); for a Triton model the user supplies them.
struct model_identity {
  std::string fingerprint;
  std::string preprocess_key;
  std::string
      input;  // the model's input name from its metadata ("image", "video", "text"; "INPUT0" on Triton), if known
};

// One tensor of a served model's KServe metadata (GET /v2/models/<m>): its name, KServe datatype ("FP32",
// "BYTES", ...) and shape as the server reports it, the batch dimension (-1) in front when the model batches.
struct served_tensor {
  std::string name;
  std::string datatype;
  std::vector<std::int64_t> shape;
};

// A served model's KServe metadata, as jit_client::metadata() reads it from an endpoint (or from a local model).
struct model_metadata {
  std::string name;
  std::string platform;
  std::vector<std::string> versions;
  std::vector<served_tensor> inputs, outputs;

  // The output called `name` (the first output when `name` is empty), or nullptr.
  const served_tensor* output(std::string_view name = {}) const noexcept {
    if (name.empty()) return outputs.empty() ? nullptr : &outputs.front();
    for (const auto& o : outputs)
      if (o.name == name) return &o;
    return nullptr;
  }
};

// The programs' --identity flag: "MODEL[:INPUT]=FINGERPRINT,PREPROCESS_KEY" -> {MODEL, identity}, for a
// model whose server publishes no identity (a Triton model without the config parameters "fingerprint" and
// "preprocess_key"). The key is everything after the first comma (keys hold ',', '=' and ';'); INPUT is the
// model's input name (image / video / text for the programs). invalid_argument naming the flag otherwise.
inline result<std::pair<std::string, model_identity>> parse_identity_flag(std::string_view flag) {
  const auto bad = [&](const char* why) {
    return fail(errc::invalid_argument, "--identity '" + std::string(flag) + "': " + why +
                                            " (expected MODEL[:INPUT]=FINGERPRINT,PREPROCESS_KEY)");
  };
  const auto eq = flag.find('=');
  if (eq == std::string_view::npos) return bad("no '='");
  std::string_view name = flag.substr(0, eq), input;
  if (const auto colon = name.find(':'); colon != std::string_view::npos) {
    input = name.substr(colon + 1);
    name = name.substr(0, colon);
    if (input.empty()) return bad("an empty INPUT after ':'");
  }
  if (name.empty()) return bad("an empty MODEL");
  const std::string_view rest = flag.substr(eq + 1);
  const auto comma = rest.find(',');
  if (comma == std::string_view::npos) return bad("no ',' between the fingerprint and the preprocess key");
  if (comma == 0 || comma + 1 == rest.size()) return bad("an empty fingerprint or preprocess key");
  model_identity id{std::string(rest.substr(0, comma)), std::string(rest.substr(comma + 1)), std::string(input)};
  return std::pair<std::string, model_identity>(std::string(name), std::move(id));
}

struct retry_options {
  int max_attempts = 5;                       // per request, counting the first; hedges not counted
  std::chrono::milliseconds backoff_base{5};  // exponential backoff: base * 2^(n-1), full jitter
  std::chrono::milliseconds backoff_max{500};
  double budget_ratio = 0.2;     // retries + hedges may add at most this share of requests...
  double budget_min_per_s = 10;  // ...plus this many per second (so a quiet client can retry)
};

struct hedge_options {
  bool enabled = true;
  double percentile = 0.95;                 // hedge a request still running after this latency percentile
  std::chrono::milliseconds min_delay{20};  // never sooner than this
  std::size_t min_samples = 50;             // latency samples needed before hedging starts
};

struct breaker_options {
  int failure_threshold = 5;                // consecutive connection-level failures that open the circuit
  std::chrono::milliseconds open_for{500};  // then one probe request (half-open) decides
  std::chrono::milliseconds eject_for{
      1000};  // a model ejected from an endpoint (404, not ready) is re-probed after this
};

// Shared memory for same-host endpoints (Triton's system shared-memory extension): rows and outputs of a
// request through a span of one registered object per endpoint instead of the socket (docs/client.md).
struct shared_memory_options {
  bool enabled = true;
  std::size_t pool_bytes = std::size_t{64} << 20;  // per endpoint
  // Smaller requests (rows + outputs) use the socket: below ~64 KiB the two extra copies and the region's
  // bookkeeping cost more than the socket (bench_client_shm: 0.8-0.93x at 64 KiB, 1.2-1.6x at 1 MiB).
  std::size_t min_bytes = std::size_t{256} << 10;
  std::chrono::milliseconds quarantine{1000};  // an abandoned attempt's span: reused this long after its deadline
};

struct client_options {
  endpoint_source endpoints;
  // Local mode: with no endpoint source, requests run on these in-process models (name() routes).
  std::vector<models::any_model> local_models;
  std::size_t local_threads = 0;  // local mode worker threads (0: hardware concurrency)

  std::map<std::string, model_identity> identities;  // per model: overrides / supplies metadata (Triton)

  std::chrono::milliseconds request_timeout{30000};  // default deadline of a request, all attempts together
  std::chrono::milliseconds connect_timeout{2000};
  std::size_t max_connections_per_endpoint = 256;  // open connections (in flight + idle) per endpoint
  std::size_t max_in_flight = 4096;                // requests accepted and not completed; past it: unavailable
  std::size_t max_response_bytes = std::size_t{256} << 20;
  bool binary_outputs = true;  // ask for outputs in Triton's binary extension
  // Compressed tensors (docs/client.md): offer_compression asks a jitembed server for compressed outputs (not
  // on loopback unless compress_on_loopback: there the codec's CPU is all cost); compress_inputs sends the rows
  // compressed (jitembed servers only). Decompression is bounded by max_response_bytes.
  bool offer_compression = true;
  bool compress_on_loopback = false;
  bool compress_inputs = false;
  codec::wire_compression_options compression;
  shared_memory_options shared_memory;
  int io_threads = 1;      // threads running the Asio event loop
  std::string auth_token;  // sent as Authorization: Bearer <token> when set
  // https:// endpoints: the CA bundle (PEM) their certificates must chain to (and name the host); empty: the
  // system's CA paths. A failed handshake is io_error, not retried on that endpoint (docs/client.md, TLS).
  std::string tls_ca_file;
  double ewma_alpha = 0.2;  // latency EWMA weight of a new sample (tie break)

  retry_options retry;
  hedge_options hedge;
  breaker_options breaker;
};

}  // namespace jitembed::client
