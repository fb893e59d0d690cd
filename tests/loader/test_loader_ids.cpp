// jit_loader over a named tensor field of token ids (embedding_spec::field): typed rows to "input_ids" on an
// in-process service and in local mode, every sample once with its own embedding, the next epoch from the
// cache (keyed by the ids, their datatype and shape), a sample whose ids have another shape failing alone.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "client/ids_test_model.hpp"
#include "jitembed/cache/memory_cache.hpp"
#include "jitembed/format/shard_writer.hpp"
#include "jitembed/net/http/server.hpp"
#include "jitembed/server.hpp"
#include "loader/loader_test_util.hpp"

namespace ids_loader_test {

using namespace loader_test;
using namespace ids_test;

// What the ids model gives for ids v sent without a mask (all ones).
std::vector<float> expected_s(const std::vector<std::int64_t>& v) {
  float s0 = 0;
  for (std::size_t k = 0; k < v.size(); ++k) s0 += static_cast<float>((k + 1) * v[k]);
  return {s0, static_cast<float>(v.size())};
}

struct ids_shard {
  fs::path dir;
  format::dataset data;
  std::vector<std::vector<std::int64_t>> ids;  // per sample: the ids it carries (empty: none)
  ids_shard() {
    static std::atomic<int> counter{0};
    dir = fs::temp_directory_path() /
          ("jitembed-loader-ids-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto w = format::shard_writer::create((dir / "ids.jems").string()).value();
    // s00..s07: distinct i64 [4] ids (s03 stored zstd-compressed); s08: s00's ids again (one cache entry);
    // s09: s00's ids as i32 (another entry, the same embedding); s10: i64 [5] (fails alone); s11: no ids
    for (int i = 0; i < 12; ++i) {
      format::record_builder b;
      const std::string caption = "aaa" + std::to_string(i % 10);
      REQUIRE(b.add_text("caption", caption));
      std::vector<std::int64_t> v = ids_of<std::int64_t>(i == 8 || i == 9 ? "aaa0" : caption);
      if (i == 10) v.push_back(7);
      tensor t;  // the builder references it until append()
      if (i == 9) {
        t = tensor::copy_of(bytes_of(ids_of<std::int32_t>("aaa0")), dtype::i32, {4});
        REQUIRE(b.add_tensor("ids", t.view()));
      } else if (i != 11) {
        const auto enc = i == 3 ? format::tensor_encoding::zstd(3, 8) : format::tensor_encoding::raw();
        t = tensor::copy_of(bytes_of(v), dtype::i64, {static_cast<std::int64_t>(v.size())});
        REQUIRE(b.add_tensor("ids", t.view(), enc));
      }
      ids.push_back(i == 11 ? std::vector<std::int64_t>{} : v);
      char key[8];
      std::snprintf(key, sizeof key, "s%02d", i);
      REQUIRE(w.append(b, key));
    }
    REQUIRE(w.close());
    data = format::dataset::open(dir.string()).value();
  }
  ~ids_shard() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

}  // namespace ids_loader_test

using namespace ids_loader_test;

TEST_CASE("loader: a tensor field of token ids as typed rows, every sample once, the next epoch from the cache") {
  ids_shard shard;
  server::server_config sc;
  sc.preprocess_threads = 1;
  auto svc = server::service::create(sc).value();
  server::model_config mc;
  mc.name = "ids";
  REQUIRE(svc.load(mc, models::any_model(ids_model{})));
  auto srv = net::http::server::create(net::http::server_options{}, svc.as_handler()).value();
  for (const bool local : {false, true}) {
    CAPTURE(local);
    client::client_options co;
    if (local)
      co.local_models = {models::any_model(ids_model{})};
    else
      co.endpoints.list = {"http://127.0.0.1:" + std::to_string(srv.port())};
    auto c = client::jit_client::create(co).value();
    loader::loader_options o;
    loader::embedding_spec spec;
    spec.name = "emb";
    spec.model = "ids";
    spec.output = "s";
    spec.field = "ids";
    o.embeddings = {spec};
    o.batch_size = 4;
    o.samples_per_request = 4;
    o.shuffle = false;
    o.cache = cache::any_store(std::in_place_type<cache::memory_cache>, std::size_t{1} << 20);
    auto l = loader::jit_loader::create(shard.data, c, o);
    REQUIRE_MESSAGE(l, l.error().message);
    for (int epoch = 0; epoch < 2; ++epoch) {
      CAPTURE(epoch);
      std::vector<int> seen(12, 0);
      for (;;) {
        auto b = l->next();
        REQUIRE_MESSAGE(b, b.error().message);
        if (!*b) break;
        for (const auto& s : (*b)->samples) {
          ++seen.at(s.index);
          if (s.index == 10) {  // ids of another shape: that sample alone, the server's words, naming it and its field
            REQUIRE_FALSE(s.ok());
            CHECK(s.error->code == errc::invalid_argument);
            CHECK(s.error->message.find("sample 'ids.jems#s10'") != std::string::npos);
            CHECK(s.error->message.find("field 'ids'") != std::string::npos);
            CHECK(s.error->message.find("input 'input_ids' has shape [1,5], expected [batch, 4]") != std::string::npos);
            continue;
          }
          REQUIRE_MESSAGE(s.ok(), s.error->message);
          const tensor* t = s.find("emb");
          if (s.index == 11) {  // no ids field: no embedding, not an error
            CHECK(t == nullptr);
            continue;
          }
          REQUIRE(t != nullptr);
          const auto want = expected_s(shard.ids[s.index]);
          CHECK(std::vector<float>(t->data<float>(), t->data<float>() + 2) == want);
        }
      }
      CHECK(seen == std::vector<int>(12, 1));
    }
    const auto st = l->stats();
    REQUIRE(st.epochs.size() >= 2);
    CHECK(st.epochs[0].cache_misses + st.epochs[0].cache_hits == 11);  // s08 may find s00's entry already
    CHECK(st.epochs[1].cache_hits == 10);  // every sample with ids but s10, which is looked up and sent again
    CHECK(st.epochs[1].cache_misses == 1);
    CHECK(st.epochs[1].requests == 1);
    // distinct entries: s00..s07, and s09 (s00's ids as i32); s08 shares s00's
    CHECK(o.cache.stats().entries == 9);
    l->close();
  }
}

TEST_CASE("loader: a float tensor field needs an input name, a named text field travels as text") {
  ids_shard shard;
  client::client_options co;
  co.local_models = {models::any_model(ids_model{})};
  auto c = client::jit_client::create(co).value();
  loader::loader_options o;
  loader::embedding_spec by_caption{"caption", "ids", models::modality::image, "s", "", "caption"};
  o.embeddings = {by_caption};
  o.batch_size = 12;
  o.shuffle = false;
  auto l = loader::jit_loader::create(shard.data, c, o).value();
  auto b = l.next().value();
  REQUIRE(b);
  for (const auto& s : b->samples) {  // "aaaN": ids (97, 97, 97, '0' + N), the mask all ones
    REQUIRE(s.ok());
    const tensor* t = s.find("caption");
    REQUIRE(t != nullptr);
    CHECK(std::vector<float>(t->data<float>(), t->data<float>() + 2) ==
          expected_s(ids_of<std::int64_t>("aaa" + std::to_string(s.index % 10))));
  }
  l.close();

  // f32 "ids": no default input (only i64 / i32 ids go to input_ids)
  fs::path dir = shard.dir / "f32";
  fs::create_directories(dir);
  {
    auto w = format::shard_writer::create((dir / "f.jems").string()).value();
    format::record_builder rb;
    const std::vector<float> x{1, 2, 3, 4};
    const tensor t = tensor::copy_of(bytes_of(x), dtype::f32, {4});
    REQUIRE(rb.add_tensor("ids", t.view()));
    REQUIRE(w.append(rb, "f0"));
    REQUIRE(w.close());
  }
  loader::loader_options fo;
  loader::embedding_spec by_field;
  by_field.name = "emb";
  by_field.model = "ids";
  by_field.field = "ids";
  fo.embeddings = {by_field};
  fo.batch_size = 1;
  auto fl = loader::jit_loader::create(format::dataset::open(dir.string()).value(), c, fo).value();
  auto fb = fl.next().value();
  REQUIRE(fb);
  REQUIRE_FALSE(fb->samples.at(0).ok());
  CHECK(fb->samples[0].error->code == errc::invalid_argument);
  CHECK(fb->samples[0].error->message ==
        "sample 'f.jems#f0': field 'ids' is a f32 tensor: its embedding needs an input name (only i64 / i32 ids "
        "default to 'input_ids')");
}
