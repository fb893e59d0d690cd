// Test helper for the python interop suite: makes input files (JPEG, MP4) and computes the C++
// reference-model outputs of a file, so test_interop.py can compare what jitembed-server returns.
//
//   reference_embed embed MODEL INPUT OUT_PREFIX   -> OUT_PREFIX.json (+ OUT_PREFIX.<output>.bin raw bytes)
//   reference_embed make-jpeg WIDTH HEIGHT SEED OUT  (RGB gradient + noise, quality 90, 4:2:0)
//   reference_embed make-video FRAMES WIDTH HEIGHT OUT  (H.264 in MP4, moving gradient)
// Exit 0 on success, 1 on a model / codec error (message on stderr), 2 for bad arguments.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitembed/codec/jpeg.hpp"
#include "jitembed/codec/video_encode.hpp"
#include "jitembed/models/reference.hpp"

namespace {

using namespace jitembed;

int usage() {
  std::cerr << "usage: reference_embed embed MODEL INPUT OUT_PREFIX\n"
               "       reference_embed make-jpeg WIDTH HEIGHT SEED OUT\n"
               "       reference_embed make-video FRAMES WIDTH HEIGHT OUT\n";
  return 2;
}

bool read_file(const std::string& path, std::vector<std::byte>& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  out.resize(raw.size());
  if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
  return true;
}

bool write_file(const std::string& path, bytes_view b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return static_cast<bool>(f);
}

int fail_with(const error_info& e) {
  std::cerr << "error: " << to_string(e.code) << ": " << e.message << "\n";
  return 1;
}

// Deterministic pixels: a diagonal gradient per channel plus xorshift noise (so JPEG has AC energy).
void fill_pixels(std::uint8_t* p, std::int64_t h, std::int64_t w, std::uint32_t seed, int shift) {
  std::uint32_t s = seed * 2654435761u + 1u;
  for (std::int64_t y = 0; y < h; ++y)
    for (std::int64_t x = 0; x < w; ++x) {
      s ^= s << 13;
      s ^= s >> 17;
      s ^= s << 5;
      const int noise = static_cast<int>(s % 32u) - 16;
      const int r = static_cast<int>((x + shift) * 255 / (w > 1 ? w - 1 : 1)) + noise;
      const int g = static_cast<int>(y * 255 / (h > 1 ? h - 1 : 1)) - noise;
      const int b = static_cast<int>(((x + y + shift) * 97 + seed) % 256);
      std::uint8_t* px = p + (y * w + x) * 3;
      px[0] = static_cast<std::uint8_t>(std::clamp(r, 0, 255));
      px[1] = static_cast<std::uint8_t>(std::clamp(g, 0, 255));
      px[2] = static_cast<std::uint8_t>(b);
    }
}

int make_jpeg(int w, int h, std::uint32_t seed, const std::string& out) {
  const std::int64_t dims[] = {h, w, 3};
  tensor img = tensor::empty(shape(dims), dtype::u8);
  fill_pixels(img.data<std::uint8_t>(), h, w, seed, 0);
  auto jpg = codec::encode_jpeg(img, codec::jpeg_encode_options{});
  if (!jpg) return fail_with(jpg.error());
  return write_file(out, bytes_view(jpg->data(), jpg->size())) ? 0 : 1;
}

int make_video(int frames, int w, int h, const std::string& out) {
  const std::int64_t dims[] = {frames, h, w, 3};
  tensor clip = tensor::empty(shape(dims), dtype::u8);
  for (int t = 0; t < frames; ++t) fill_pixels(clip.data<std::uint8_t>() + std::int64_t{t} * h * w * 3, h, w, 7, t * 4);
  auto mp4 = codec::encode_video(clip, codec::video_encode_options{});
  if (!mp4) return fail_with(mp4.error());
  return write_file(out, bytes_view(mp4->data(), mp4->size())) ? 0 : 1;
}

int embed(const std::string& name, const std::string& input, const std::string& prefix) {
  auto m = models::reference_model::create(name);
  if (!m) return fail_with(m.error());
  std::vector<std::byte> raw;
  if (!read_file(input, raw)) {
    std::cerr << "error: cannot read " << input << "\n";
    return 1;
  }
  auto item = m->preprocess(bytes_view(raw.data(), raw.size()), decode_limits{});
  if (!item) return fail_with(item.error());
  std::vector<tensor> batch{std::move(*item)};
  auto outs = m->run(std::span<const tensor>(batch));
  if (!outs) return fail_with(outs.error());
  nlohmann::json j;
  j["model"] = name;
  j["outputs"] = nlohmann::json::array();
  for (const auto& [oname, t] : outs->at(0)) {
    const std::string file = prefix + "." + oname + ".bin";
    const tensor c = t.is_contiguous() ? t : t.clone();
    if (!write_file(file, c.bytes())) return 1;
    std::vector<std::int64_t> dims(t.shape().begin(), t.shape().end());
    j["outputs"].push_back({{"name", oname}, {"dtype", std::string(to_string(t.dtype()))}, {"shape", dims}, {"file", file}});
  }
  std::ofstream f(prefix + ".json");
  f << j.dump() << "\n";
  return f ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  try {
    if (a.size() == 4 && a[0] == "embed") return embed(a[1], a[2], a[3]);
    if (a.size() == 5 && a[0] == "make-jpeg")
      return make_jpeg(std::stoi(a[1]), std::stoi(a[2]), static_cast<std::uint32_t>(std::stoul(a[3])), a[4]);
    if (a.size() == 5 && a[0] == "make-video") return make_video(std::stoi(a[1]), std::stoi(a[2]), std::stoi(a[3]), a[4]);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return usage();
}
