// The smallest trainer on jitembed: image latents and caption embeddings from jitembed-server(s), just in
// time, as one [B, ...] tensor per field and step. Usage: minimal_trainer DATA_DIR --endpoints URL[,URL...]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "jitembed/loader/jit_loader.hpp"
#include "jitembed/format/dataset.hpp"

using namespace jitembed;

int main(int argc, char** argv) {
  CLI::App app{"minimal_trainer: two epochs over DATA_DIR with embeddings from jitembed-server"};
  std::string data_dir;
  std::vector<std::string> endpoints;
  int epochs = 2;
  // Both required, checked after parsing: CLI11 2.1 would report them before naming an unknown flag.
  app.add_option("data", data_dir, "shards, tars or a directory of images with same-stem captions (required)");
  app.add_option("--endpoints", endpoints, "jitembed-server or Triton URLs (required)")->delimiter(',');
  app.add_option("--epochs", epochs, "epochs to run")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (data_dir.empty() || endpoints.empty()) return app.exit(CLI::RequiredError(data_dir.empty() ? "data" : "--endpoints"));

  auto data = format::dataset::open(data_dir);
  if (!data) return std::fprintf(stderr, "dataset: %s\n", data.error().message.c_str()), 1;
  client::client_options co;
  co.endpoints.list = endpoints;
  auto cl = client::jit_client::create(co);
  if (!cl) return std::fprintf(stderr, "client: %s\n", cl.error().message.c_str()), 1;

  loader::loader_options lo;
  lo.embeddings = {{.name = "latent", .model = "image-latent", .kind = models::modality::image},
                   {.name = "caption", .model = "text-embed", .kind = models::modality::text, .output = "pooled"}};
  lo.batch_size = 8;
  auto loader = loader::jit_loader::create(*data, *cl, lo);
  if (!loader) return std::fprintf(stderr, "loader: %s\n", loader.error().message.c_str()), 1;

  for (int e = 0; e < epochs; ++e) {
    std::size_t samples = 0, failed = 0;
    double sum = 0;  // stands in for a training step: the mean of every latent
    for (loader::step& step : loader->steps()) {
      failed += step.samples.size() - step.ok_count();
      auto latent = step.collate("latent");    // [B, 4, H/8, W/8] f32, its own storage
      auto caption = step.collate("caption");  // [B, D]
      if (!latent || !caption) return std::fprintf(stderr, "collate: %s\n", (latent ? caption : latent).error().message.c_str()), 1;
      const float* x = latent->data<float>();
      for (std::size_t i = 0; i < latent->numel(); ++i) sum += x[i];
      samples += latent->size(0);
    }
    if (!loader->status()) return std::fprintf(stderr, "epoch %d: %s\n", e, loader->status().error().message.c_str()), 1;
    std::printf("epoch %d: %zu samples, %zu failed, latent sum %.6g\n", e, samples, failed, sum);
    if (failed != 0 || samples != data->size()) return 1;
  }
  return 0;
}
