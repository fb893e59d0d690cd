// zstd codec benchmarks: jitembed's zstd_codec against direct libzstd calls (same level, reused contexts)
// on a bf16 embedding batch and a 1 MB caption-like text, plus what byte shuffle gains on embeddings.
#include <zstd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "codecs/codec_benches.hpp"
#include "jitembed/codec/shuffle.hpp"
#include "jitembed/codec/zstd.hpp"

namespace jitembed::bench {

namespace {

using codec::zstd_codec;
using codec::zstd_options;

// 64 tokens x 4096 channels of N(0, 1) bf16: what a text encoder hands back for one caption.
std::vector<bfloat16> embedding_batch() {
  std::mt19937 rng(2024);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<bfloat16> v(64 * 4096);
  for (auto& x : v) x = bfloat16(normal(rng));
  return v;
}

std::vector<float> embedding_batch_f32() {
  std::mt19937 rng(2025);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(64 * 4096);
  for (auto& x : v) x = normal(rng);
  return v;
}

// ~1 MB of captions: Zipf-distributed words from a 2000-word vocabulary, one caption per line.
std::string caption_text() {
  std::mt19937 rng(7);
  std::vector<std::string> vocab;
  for (int i = 0; i < 2000; ++i) {
    std::string w;
    const int len = 2 + static_cast<int>(rng() % 9);
    for (int k = 0; k < len; ++k) w += static_cast<char>('a' + rng() % 26);
    vocab.push_back(w);
  }
  std::vector<double> weights(vocab.size());
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = 1.0 / static_cast<double>(i + 1);
  std::discrete_distribution<std::size_t> zipf(weights.begin(), weights.end());
  std::string s;
  while (s.size() < (1u << 20)) {
    const int words = 6 + static_cast<int>(rng() % 30);
    for (int k = 0; k < words; ++k) {
      s += vocab[zipf(rng)];
      s += k + 1 == words ? ".\n" : " ";
    }
  }
  s.resize(1u << 20);
  return s;
}

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("zstd bench: ") + what);
}

// Times `reps` back-to-back calls of fn.
template <class F>
auto repeated(int reps, F fn) {
  return [reps, fn]() mutable {
    for (int i = 0; i < reps; ++i) fn();
  };
}

void compare_speed(reporter& r, const std::string& name, bytes_view data, int level) {
  const zstd_codec ours = zstd_codec(zstd_options{level, 0, {}, false});
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);

  byte_buffer frame(zstd_codec::compress_bound(data.size()));
  byte_buffer ref_frame(frame.size());
  std::size_t n_ours = 0, n_ref = 0;
  const int reps = data.size() >= (1u << 20) ? 3 : 6;
  const int rounds = 15;

  auto [t_ours_c, t_ref_c] = side_by_side(
      rounds, repeated(reps, [&] { n_ours = ours.compress(data, frame).value(); }),
      repeated(reps, [&] { n_ref = ZSTD_compress2(cctx, ref_frame.data(), ref_frame.size(), data.data(), data.size()); }));
  check(!ZSTD_isError(n_ref) && n_ours == n_ref, "compressed sizes differ");

  const bytes_view f(frame.data(), n_ours);
  byte_buffer out(data.size()), ref_out(data.size());
  const decode_limits limits;
  std::size_t d_ref = 0;
  auto [t_ours_d, t_ref_d] = side_by_side(
      rounds, repeated(reps, [&] { (void)ours.decompress_into(f, out, limits).value(); }),
      repeated(reps, [&] { d_ref = ZSTD_decompressDCtx(dctx, ref_out.data(), ref_out.size(), f.data(), f.size()); }));
  check(d_ref == data.size() && out == ref_out, "decompressed bytes differ");

  // Unknown-size decoding (grows its own output) against the same direct call, for information.
  auto [t_ours_g, t_ref_g] = side_by_side(
      rounds, repeated(reps, [&] { (void)ours.decompress(f, limits).value(); }),
      repeated(reps, [&] { d_ref = ZSTD_decompressDCtx(dctx, ref_out.data(), ref_out.size(), f.data(), f.size()); }));

  const double mb = static_cast<double>(data.size()) * reps / 1e6;
  const nlohmann::json info = {{"level", level},
                               {"bytes", data.size()},
                               {"compression_ratio", static_cast<double>(data.size()) / static_cast<double>(n_ours)}};
  r.add("zstd/" + name + "/compress", "speed_ratio", t_ref_c / t_ours_c, "x direct",
        {{"level", level}, {"ours_MBps", mb / t_ours_c}, {"direct_MBps", mb / t_ref_c},
         {"compression_ratio", info["compression_ratio"]}},
        0.95);
  r.add("zstd/" + name + "/decompress_into", "speed_ratio", t_ref_d / t_ours_d, "x direct",
        {{"level", level}, {"ours_MBps", mb / t_ours_d}, {"direct_MBps", mb / t_ref_d}}, 0.95);
  r.add("zstd/" + name + "/decompress_grow", "speed_ratio", t_ref_g / t_ours_g, "x direct",
        {{"level", level}, {"ours_MBps", mb / t_ours_g}, {"direct_MBps", mb / t_ref_g}});
  ZSTD_freeCCtx(cctx);
  ZSTD_freeDCtx(dctx);
}

void shuffle_gain(reporter& r, const std::string& name, bytes_view data, std::size_t elem, int level) {
  const zstd_codec plain(zstd_options{level, 0, {}, false});
  const zstd_codec shuffled(zstd_options{level, elem, {}, false});
  byte_buffer a(zstd_codec::compress_bound(data.size())), b(a.size());
  const std::size_t na = plain.compress(data, a).value();
  const std::size_t nb = shuffled.compress(data, b).value();
  byte_buffer back(data.size());
  (void)shuffled.decompress_into(bytes_view(b.data(), nb), back, decode_limits{}).value();
  check(std::equal(back.begin(), back.end(), data.begin()), "shuffled round trip differs");

  auto [t_sh, t_plain] = side_by_side(
      7, repeated(4, [&] { (void)shuffled.compress(data, b).value(); }),
      repeated(4, [&] { (void)plain.compress(data, a).value(); }));
  r.add("zstd/" + name + "/shuffle_gain", "size_ratio", static_cast<double>(na) / static_cast<double>(nb), "x plain",
        {{"level", level}, {"plain_bytes", na}, {"shuffled_bytes", nb}, {"raw_bytes", data.size()},
         {"shuffled_compress_time_vs_plain", t_sh / t_plain}},
        elem == 2 ? 1.1 : 0.0);
}

void shuffle_speed(reporter& r, bytes_view data, std::size_t elem) {
  byte_buffer out(data.size()), back(data.size());
  auto [t_s, t_u] = side_by_side(
      9, repeated(10, [&] { codec::byte_shuffle(data, out, elem); }),
      repeated(10, [&] { codec::byte_unshuffle(out, back, elem); }));
  check(std::equal(back.begin(), back.end(), data.begin()), "shuffle round trip differs");
  const double gb = static_cast<double>(data.size()) * 10 / 1e9;
  r.add("zstd/byte_shuffle/elem" + std::to_string(elem), "GBps", gb / t_s, "GB/s", {{"unshuffle_GBps", gb / t_u}});
}

}  // namespace

void run_zstd_benchmarks(reporter& r) {
  const auto emb = embedding_batch();
  const bytes_view emb_bytes(reinterpret_cast<const std::byte*>(emb.data()), emb.size() * sizeof(bfloat16));
  const auto emb32 = embedding_batch_f32();
  const bytes_view emb32_bytes(reinterpret_cast<const std::byte*>(emb32.data()), emb32.size() * sizeof(float));
  const std::string text = caption_text();
  const bytes_view text_bytes(reinterpret_cast<const std::byte*>(text.data()), text.size());

  for (int level : {1, 3}) {
    compare_speed(r, "bf16_64x4096_l" + std::to_string(level), emb_bytes, level);
    compare_speed(r, "text_1MB_l" + std::to_string(level), text_bytes, level);
  }
  for (int level : {1, 3, 9}) shuffle_gain(r, "bf16_64x4096_l" + std::to_string(level), emb_bytes, 2, level);
  shuffle_gain(r, "f32_64x4096_l3", emb32_bytes, 4, 3);
  for (std::size_t e : {2u, 4u, 8u}) shuffle_speed(r, emb32_bytes, e);
}

}  // namespace jitembed::bench
