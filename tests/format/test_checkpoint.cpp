// Sharded checkpoints (format/checkpoint.hpp): shards round trip bitwise, are written whole or not at all,
// are refused when damaged or not what was asked for, and the newest complete step is the one to resume.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>

#include "format_test_util.hpp"
#include "jitembed/format/checkpoint.hpp"

using namespace fmt_test;

namespace {

tensor filled(const shape& s, float start) {
  tensor t = tensor::empty(s, dtype::f32);
  for (std::uint64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + 0.25f * static_cast<float>(i);
  return t;
}
bool same(const tensor& a, const tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

}  // namespace

TEST_CASE("checkpoint: a shard round trips bitwise in order, whole files only, replaced by a new save") {
  fmt_test::temp_dir d;
  tensor step_t = tensor::zeros(shape{1}, dtype::i64);
  const named_tensors saved = {{"qkv.w", filled(shape{8, 4}, 1)},
                               {"exp_avg/qkv.w", filled(shape{8, 4}, -3)},
                               {"step", step_t},
                               {"empty", tensor::empty(shape{0, 3}, dtype::f32)}};
  const checkpoint_shard_id id{20, "llm", 1, 2};
  REQUIRE(save_checkpoint_shard(d.path, id, saved));
  CHECK(std::filesystem::exists(d.path / "step-000000000020" / "llm" / "shard-1-of-2.jer"));
  for (const auto& e : std::filesystem::recursive_directory_iterator(d.path))
    CHECK(e.path().string().find(".tmp.") == std::string::npos);
  auto back = load_checkpoint_shard(d.path, id);
  REQUIRE_MESSAGE(back.has_value(), back.error().message);
  REQUIRE(back->size() == saved.size());
  for (std::size_t i = 0; i < saved.size(); ++i) {
    CHECK(back->at(i).first == saved[i].first);
    CHECK(same(back->at(i).second, saved[i].second));
  }
  // saved again with other values: replaced
  REQUIRE(save_checkpoint_shard(d.path, id, {{"qkv.w", filled(shape{8, 4}, 7)}}));
  auto again = load_checkpoint_shard(d.path, id).value();
  REQUIRE(again.size() == 1);
  CHECK(same(again[0].second, filled(shape{8, 4}, 7)));
}

TEST_CASE("checkpoint: a missing, damaged or different shard is refused with its own errc") {
  fmt_test::temp_dir d;
  const checkpoint_shard_id id{3, "encoder", 0, 4};
  REQUIRE(save_checkpoint_shard(d.path, id, {{"w", filled(shape{64}, 0)}}));
  CHECK(load_checkpoint_shard(d.path, {3, "encoder", 1, 4}).code() == errc::not_found);
  CHECK(load_checkpoint_shard(d.path, {4, "encoder", 0, 4}).code() == errc::not_found);
  // the same file asked for with another shard count: named, not silently resharded
  std::filesystem::copy_file(d.path / "step-000000000003" / "encoder" / "shard-0-of-4.jer",
                             d.path / "step-000000000003" / "encoder" / "shard-0-of-2.jer");
  auto other = load_checkpoint_shard(d.path, {3, "encoder", 0, 2});
  CHECK(other.code() == errc::invalid_argument);
  CHECK(other.error().message.find("holds step 3, module 'encoder', shard 0 of 4") != std::string::npos);
  // a flipped byte in the tensor's payload: checksum_mismatch
  const auto path = d.path / "step-000000000003" / "encoder" / "shard-0-of-4.jer";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-40, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(-40, std::ios::end);
  f.write(&c, 1);
  f.close();
  CHECK(load_checkpoint_shard(d.path, id).code() == errc::checksum_mismatch);
  // ids and names
  CHECK(save_checkpoint_shard(d.path, {1, "../x", 0, 1}, {}).code() == errc::invalid_argument);
  CHECK(save_checkpoint_shard(d.path, {1, "m", 2, 2}, {}).code() == errc::invalid_argument);
  CHECK(save_checkpoint_shard(d.path, {1, "m", 0, 1}, {{"checkpoint/step", filled(shape{1}, 0)}}).code() ==
        errc::invalid_argument);
}

TEST_CASE("checkpoint: the latest step is the newest with every shard of every module") {
  fmt_test::temp_dir d;
  const std::vector<std::pair<std::string, int>> modules = {{"encoder", 2}, {"llm", 1}};
  CHECK_FALSE(latest_checkpoint(d.path / "none", modules).has_value());
  const auto save = [&](std::uint64_t step, const std::string& m, int k, int n) {
    REQUIRE(save_checkpoint_shard(d.path, {step, m, k, n}, {{"w", filled(shape{2}, 0)}}));
  };
  save(10, "encoder", 0, 2);
  save(10, "encoder", 1, 2);
  save(10, "llm", 0, 1);
  save(20, "encoder", 0, 2);  // step 20: interrupted, one shard of the encoder and no llm
  save(20, "llm", 0, 1);
  std::ofstream(d.path / "step-000000000020" / "encoder" / "shard-1-of-2.jer.tmp.123") << "partial";
  CHECK(latest_checkpoint(d.path, modules) == std::optional<std::uint64_t>(10));
  save(20, "encoder", 1, 2);
  CHECK(latest_checkpoint(d.path, modules) == std::optional<std::uint64_t>(20));
  CHECK(latest_checkpoint(d.path, {{"encoder", 4}}) == std::nullopt);  // another degree: none complete
}
