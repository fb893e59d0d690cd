// Helpers of the loader tests: a generated data set (JPEG + caption pairs, text-only and broken samples)
// in a temp dir, local-mode clients over small reference models, the reference embedding of a field,
// and a drain loop that records what a loader delivered.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "jitembed/loader/jit_loader.hpp"
#include "jitembed/codec/jpeg.hpp"
#include "jitembed/models/image_latent.hpp"
#include "jitembed/models/text_embed.hpp"

namespace loader_test {

using namespace jitembed;
namespace fs = std::filesystem;

inline models::image_latent_options image_opts() {
  models::image_latent_options o;
  o.bucket = 16;
  return o;
}
inline models::text_embed_options text_opts() {
  models::text_embed_options o;
  o.max_length = 16;
  o.dim = 8;  // the server's text_max_length / text_dim; hash_buckets stays at its default there too
  return o;
}
inline models::any_model image_model() { return models::image_latent::create(image_opts()).value(); }
inline models::any_model text_model() { return models::text_embed::create(text_opts()).value(); }

inline tensor gradient(int h, int w, int seed) {
  tensor t = tensor::empty({h, w, 3}, dtype::u8);
  auto* p = t.data<std::uint8_t>();
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) p[(y * w + x) * 3 + c] = static_cast<std::uint8_t>((x * 7 + y * 3 + c * 50 + seed * 31) & 0xff);
  return t;
}

inline void put(const fs::path& p, bytes_view content) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(content.data()), static_cast<std::streamsize>(content.size()));
}

// A directory of `n` samples "s00000".. with a JPEG and a caption each; every `text_only`-th sample (when
// non-zero) has only its caption; the samples in `broken` get a .jpg that is not a JPEG.
struct temp_dataset {
  fs::path dir;
  format::dataset data;
  explicit temp_dataset(std::size_t n, std::size_t text_only = 0, std::set<std::size_t> broken = {}) {
    static std::atomic<int> counter{0};
    dir = fs::temp_directory_path() / ("jitembed-loader-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (std::size_t i = 0; i < n; ++i) {
      char stem[32];
      std::snprintf(stem, sizeof stem, "s%05zu", i);
      const std::string caption = "caption of sample " + std::to_string(i) + (i % 3 ? " with a few more words" : "");
      put(dir / (std::string(stem) + ".txt"), as_bytes_view(caption));
      if (text_only && i % text_only == text_only - 1) continue;
      if (broken.contains(i)) {
        const std::string junk = "this is not a jpeg " + std::to_string(i);
        put(dir / (std::string(stem) + ".jpg"), as_bytes_view(junk));
        continue;
      }
      auto jpg = codec::encode_jpeg(gradient(24 + 8 * static_cast<int>(i % 3), 32, static_cast<int>(i)), {}).value();
      put(dir / (std::string(stem) + ".jpg"), jpg);
    }
    data = format::dataset::open(dir.string()).value();
  }
  ~temp_dataset() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

inline client::jit_client local_client(std::size_t threads = 2) {
  client::client_options o;
  o.local_models = {image_model(), text_model()};
  o.local_threads = threads;
  return client::jit_client::create(std::move(o)).value();
}

inline loader::loader_options base_options() {
  loader::loader_options o;
  o.embeddings = {{"latent", "image-latent", models::modality::image, "latent", ""},
                  {"caption", "text-embed", models::modality::text, "pooled", ""},
                  {"tokens", "text-embed", models::modality::text, "sequence", ""}};
  o.batch_size = 4;
  o.samples_per_request = 3;
  o.requests_in_flight = 4;
  o.workers = 2;
  o.max_buffered = 24;
  o.shuffle = false;
  return o;
}

// The in-process reference: the model's output `output` for one raw field.
inline tensor reference(const models::any_model& m, bytes_view raw, const std::string& output) {
  auto in = m.preprocess(raw, {}).value();
  std::vector<tensor> batch{in};
  auto out = m.run(batch).value();
  const tensor* t = find_tensor(out.at(0), output);
  REQUIRE(t != nullptr);
  return *t;
}

inline bool same_bytes(const tensor& a, const tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Every delivered embedding equals the reference model's output for the sample's field.
inline void check_against_reference(const format::dataset& data, const loader::embedded_sample& s) {
  static const models::any_model img = image_model(), txt = text_model();
  REQUIRE(s.ok());
  auto src = data.get(static_cast<std::size_t>(s.index)).value();
  CHECK(s.id == src.id);
  if (const auto* f = src.first(format::field_kind::image)) {
    const tensor* t = s.find("latent");
    REQUIRE(t != nullptr);
    CHECK(same_bytes(*t, reference(img, f->bytes, "latent")));
  } else {
    CHECK(s.find("latent") == nullptr);
  }
  const auto* f = src.first(format::field_kind::text);
  REQUIRE(f != nullptr);
  const auto text = f->text().value();
  const tensor* c = s.find("caption");
  const tensor* q = s.find("tokens");
  REQUIRE(c != nullptr);
  REQUIRE(q != nullptr);
  CHECK(same_bytes(*c, reference(txt, as_bytes_view(text), "pooled")));
  CHECK(same_bytes(*q, reference(txt, as_bytes_view(text), "sequence")));
}

struct drained {
  std::vector<std::uint64_t> order;             // data set indices in delivery order
  std::vector<std::size_t> step_sizes;
  std::vector<loader::embedded_sample> samples;
};

// Calls next() until the end of the epoch (or `max_steps` batches); fails the test on an error.
inline drained drain(loader::jit_loader& l, std::size_t max_steps = ~std::size_t{0}) {
  drained d;
  for (std::size_t k = 0; k < max_steps; ++k) {
    auto b = l.next();
    REQUIRE_MESSAGE(b.has_value(), b.error().message);
    if (!*b) break;
    d.step_sizes.push_back((*b)->samples.size());
    for (auto& s : (*b)->samples) {
      d.order.push_back(s.index);
      d.samples.push_back(std::move(s));
    }
  }
  return d;
}

// Waits (bounded) for `pred`, polling: for conditions no callback announces (stats of other threads).
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

}  // namespace loader_test
