// bench_tls: the JIT client's request rate over HTTPS next to plain HTTP, same service, same tiny request
// (text-embed D=8 L=8, one 1-byte row), keep-alive connections, at concurrency 1 and 32. One in-process
// service behind two http::server ports (plain and TLS, certificates made at start); the two clients are
// driven in alternation (`rounds` times, alternating which goes first, best of each kept). No target: the
// ratio https/http is reported.
//
//   bench_tls [--seconds S] [--rounds R]

#include "bench_util.hpp"
#include "client/drive.hpp"
#include "jitembed/client/jit_client.hpp"
#include "jitembed/net/http/server.hpp"
#include "jitembed/server.hpp"
#include "tls_test_util.hpp"

namespace {

using namespace jitembed;

const std::string kText = "x";

double drive(client::jit_client& c, int concurrency, double seconds, std::string& first_error) {
  return bench::drive(
      c,
      [] {
        client::embed_request r;
        r.model = "text-embed";
        r.input = "text";
        r.rows = {as_bytes_view(kText)};
        return r;
      },
      concurrency, seconds, first_error);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  int rounds = 3;
  bench::command_line cli{"bench_tls: jit_client requests/s over HTTPS vs HTTP"};
  cli.app.add_option("--seconds", seconds, "seconds per measurement")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cli.app.add_option("--rounds", rounds, "alternating rounds")->check(CLI::Range(1, 100))->capture_default_str();
  CLI11_PARSE(cli.app, argc, argv);

  const auto& pki = tls_test::files();
  server::server_config sc;
  sc.preprocess_threads = 1;
  auto mc = server::parse_model_spec("text-embed:text_dim=8,text_max_length=8,sleep_us=0").value();
  mc.max_queue_delay_us = 0;
  sc.models = {mc};
  auto svc = server::service::create(sc).value();
  net::http::server_options plain_opts;
  plain_opts.io_threads = 1;
  auto tls_opts = plain_opts;
  tls_opts.tls_cert_file = pki.cert;
  tls_opts.tls_key_file = pki.key;
  auto plain = net::http::server::create(plain_opts, svc.as_handler()).value();
  auto tls = net::http::server::create(tls_opts, svc.as_handler()).value();

  const auto make = [&](const std::string& url) {
    client::client_options o;
    o.endpoints.list = {url};
    o.tls_ca_file = pki.ca_cert;
    o.hedge.enabled = false;
    return client::jit_client::create(o).value();
  };
  auto http_client = make(plain.url());
  auto https_client = make(tls.url());

  std::printf("%-12s %12s %12s %8s\n", "concurrency", "http req/s", "https req/s", "ratio");
  for (int conc : {1, 32}) {
    double best_http = 0, best_https = 0;
    std::string err;
    for (int r = 0; r < rounds; ++r) {
      if (r % 2 == 0) {
        best_http = std::max(best_http, drive(http_client, conc, seconds, err));
        best_https = std::max(best_https, drive(https_client, conc, seconds, err));
      } else {
        best_https = std::max(best_https, drive(https_client, conc, seconds, err));
        best_http = std::max(best_http, drive(http_client, conc, seconds, err));
      }
    }
    if (!err.empty()) std::fprintf(stderr, "first error: %s\n", err.c_str());
    const double ratio = best_http > 0 ? best_https / best_http : 0;
    std::printf("%-12d %12.0f %12.0f %8.3f\n", conc, best_http, best_https, ratio);
    std::printf(
        "{\"bench\": \"tls_vs_http\", \"concurrency\": %d, \"http_rps\": %.1f, \"https_rps\": %.1f, \"ratio\": %.4f}\n",
        conc, best_http, best_https, ratio);
  }
  std::printf("connections accepted: http %llu, https %llu (keep-alive), https handshake failures %llu\n",
              static_cast<unsigned long long>(plain.stats().connections_accepted),
              static_cast<unsigned long long>(tls.stats().connections_accepted),
              static_cast<unsigned long long>(tls.stats().tls_handshake_failures));
  tls.stop(std::chrono::seconds(1));
  plain.stop(std::chrono::seconds(1));
  return 0;
}
